//! The model families, each written once over `stapes_core::Backend`.

pub mod error;
pub mod fastconformer;
pub mod gemma4a;
pub mod gigaam;
mod json_config;
mod pickle;
pub mod qwen3a;
pub mod silero;
pub mod transcript;
pub mod wer;
pub mod whisper;

pub use error::{ModelError, Result};

/// A new process-wide number for chain keys. A captured chain is bound to the exact buffers it
/// recorded, so every model, decoder, loop or slot owning some names its chains by its own.
pub(crate) fn next_chain_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Audio every family takes: finite samples (one NaN turns every feature frame it reaches into
/// NaN and the transcript into nothing or noise).
pub fn check_finite(samples: &[f32]) -> Result<()> {
    match samples.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(ModelError::BadInput(format!(
            "audio sample {i} of {} is {} (samples must be finite)",
            samples.len(),
            samples[i]
        ))),
        None => Ok(()),
    }
}

/// Random weights of the given shapes for `--synthetic` speed runs (outputs are meaningless):
/// matrices fan-in scaled, vectors small; tensors `positive` names (norm gains, variances) get
/// `1 + |x|`, so norms neither vanish nor flip.
pub(crate) fn random_weights(
    shapes: Vec<(String, Vec<usize>)>,
    seed: u64,
    positive: impl Fn(&str) -> bool,
) -> std::collections::BTreeMap<String, stapes_core::HostTensor> {
    let mut tensors = std::collections::BTreeMap::new();
    for (i, (name, shape)) in shapes.into_iter().enumerate() {
        let fan_in: usize = shape.iter().skip(1).product::<usize>().max(1);
        let scale = if shape.len() >= 2 {
            1.0 / (fan_in as f32).sqrt()
        } else {
            0.05
        };
        let mut t = stapes_core::HostTensor::random(shape, seed.wrapping_add(i as u64), scale);
        if positive(&name) {
            t.data.iter_mut().for_each(|v| *v = 1.0 + v.abs());
        }
        tensors.insert(name, t);
    }
    tensors
}

/// Every `expected` tensor present in its shape, and no tensor that is neither expected nor
/// `ignored` (`what` names the model in that error): the weight-table check each family's loader
/// runs before it stores anything.
pub(crate) fn check_tensors(
    expected: &[(String, Vec<usize>)],
    tensors: &std::collections::BTreeMap<String, stapes_core::HostTensor>,
    path: &std::path::Path,
    ignored: impl Fn(&str) -> bool,
    what: &str,
) -> Result<()> {
    for (name, shape) in expected {
        let t = tensors
            .get(name)
            .ok_or_else(|| ModelError::bad_tensor(path, name, "missing"))?;
        if &t.shape != shape {
            return Err(ModelError::bad_tensor(
                path,
                name,
                format!("shape {:?}, expected {shape:?} for this config", t.shape),
            ));
        }
    }
    let known: std::collections::BTreeSet<&str> =
        expected.iter().map(|(n, _)| n.as_str()).collect();
    match tensors
        .keys()
        .find(|n| !known.contains(n.as_str()) && !ignored(n))
    {
        Some(name) => Err(ModelError::bad_tensor(
            path,
            name,
            format!("not a tensor of this {what} configuration"),
        )),
        None => Ok(()),
    }
}

/// Host feature matrices `(T_i, mels)` as one batch `(n, T_max, mels)`, zero past each clip, and
/// each clip's frames; a matrix of another width, or no clip at all, is refused by name.
pub(crate) fn pad_features(
    features: &[stapes_core::HostTensor],
    mels: usize,
) -> Result<(stapes_core::HostTensor, Vec<usize>)> {
    let mut t = 0;
    for f in features {
        if f.rank() != 2 || f.shape[1] != mels {
            return Err(ModelError::BadInput(format!(
                "features must be (T, {mels}), got {:?}",
                f.shape
            )));
        }
        t = t.max(f.shape[0]);
    }
    if features.is_empty() {
        return Err(ModelError::BadInput("no clips to encode".into()));
    }
    let mut data = vec![0f32; features.len() * t * mels];
    for (i, f) in features.iter().enumerate() {
        data[i * t * mels..i * t * mels + f.data.len()].copy_from_slice(&f.data);
    }
    let lens = features.iter().map(|f| f.shape[0]).collect();
    Ok((
        stapes_core::HostTensor::new(vec![features.len(), t, mels], data)?,
        lens,
    ))
}

/// A chain's body over its slot `S`: the outputs ([`ChainSlots::run`]).
pub(crate) type SlotPass<'a, B, S> =
    dyn FnMut(&B, &S) -> Result<Vec<<B as stapes_core::Backend>::Tensor>> + 'a;

/// A model's chain inputs per shape: a captured chain reads its inputs by address, so each
/// shape's slot lives as long as the model, at most `max` shapes of them.
pub(crate) struct ChainSlots<K, S> {
    slots: std::sync::Mutex<std::collections::BTreeMap<K, S>>,
    max: usize,
}

impl<K: Ord, S> ChainSlots<K, S> {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            slots: std::sync::Mutex::new(std::collections::BTreeMap::new()),
            max,
        }
    }

    /// Runs `forward` over `key`'s slot (made by `make` the first time, refreshed by `refresh`
    /// every call) as the chain `name`, and returns copies of its outputs, each whole along
    /// dim 1, taken before another call can replay the chain over them. `None` when the model
    /// already keeps `max` other shapes: the caller runs eagerly.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run<B: stapes_core::Backend>(
        &self,
        b: &B,
        key: K,
        name: &str,
        what: &'static str,
        make: impl FnOnce() -> Result<S>,
        refresh: impl FnOnce(&mut S) -> Result<()>,
        forward: &mut SlotPass<'_, B, S>,
    ) -> Result<Option<Vec<B::Tensor>>> {
        use stapes_core::DeviceTensor;
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if !slots.contains_key(&key) && slots.len() >= self.max {
            return Ok(None);
        }
        let slot = match slots.entry(key) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => e.insert(make()?),
        };
        refresh(slot)?;
        let slot = &*slot;
        let outs = chain_all(b, name, what, &mut |be| forward(be, slot))?;
        // copies under the lock: the next replay overwrites the chain's outputs
        let copies = outs
            .iter()
            .map(|o| Ok(b.slice(o, 1, 0, o.shape()[1])?))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(copies))
    }
}

/// Runs `forward` as the backend's chain `key` (captured and replayed where the home can) and
/// returns its one output. A model error inside the chain is carried out as itself, not as the
/// backend's shape error it had to travel as. The output is overwritten by the next replay.
pub(crate) fn chain_one<B: stapes_core::Backend>(
    b: &B,
    key: &str,
    what: &'static str,
    forward: &mut dyn FnMut(&B) -> Result<B::Tensor>,
) -> Result<B::Tensor> {
    chain_all(b, key, what, &mut |be| Ok(vec![forward(be)?]))?
        .into_iter()
        .next()
        .ok_or_else(|| ModelError::BadInput(format!("the {what} chain returned nothing")))
}

/// [`chain_one`] for a chain of several outputs.
pub(crate) fn chain_all<B: stapes_core::Backend>(
    b: &B,
    key: &str,
    what: &'static str,
    forward: &mut dyn FnMut(&B) -> Result<Vec<B::Tensor>>,
) -> Result<Vec<B::Tensor>> {
    let mut failure = None;
    let out = b.chain(key, &mut |be| match forward(be) {
        Ok(x) => Ok(x),
        Err(ModelError::Backend(e)) => Err(e),
        Err(e) => {
            let msg = e.to_string();
            failure = Some(e);
            Err(stapes_core::Error::shape(what, msg))
        }
    });
    match (out, failure) {
        (_, Some(e)) => Err(e),
        (r, None) => Ok(r?),
    }
}
