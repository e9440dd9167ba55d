//! `Whisper<B>`: the weights on a backend, and the building blocks shared by encoder and decoder.

use super::config::{WhisperConfig, WhisperGeneration};
use super::decoder::{CrossKv, Decoder, DecoderState};
use super::encoder::{Encoder, LN_EPS};
use super::tokenizer::WhisperTokenizer;
use super::weights::{WhisperCheckpoint, WhisperWeights};
use crate::{ModelError, Result};
use stapes_core::{
    Activation, AttnParams, Backend, DeviceTensor, HostTensor, Lane, WeightData, WeightView,
};
use stapes_formats::{DType, RawTensor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The lane of each GEMM weight, by canonical (transformers) name: a base lane and exceptions
/// matched by name prefix, first match wins. The lane stays a property of each loaded weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightLanes {
    pub base: Lane,
    pub exceptions: Vec<(String, Lane)>,
}

impl WeightLanes {
    /// Every GEMM weight in `lane`.
    pub fn uniform(lane: Lane) -> Self {
        Self {
            base: lane,
            exceptions: Vec::new(),
        }
    }

    /// What the `lane` of a Whisper model means. f32/f16: every GEMM weight in it. q8: the
    /// encoder's GEMM weights in q8 except its input end — the convolution stem and the first
    /// block — and the decoder's (self/cross attention, MLP, and the token embedding that doubles
    /// as the logits projection), all kept in f16, which is exact for the f16 checkpoints Whisper
    /// ships in. Measured with teacher-forced logits along the f32 greedy path of the 7 test
    /// clips (relative L2 of the logits vs f32 / largest shift of f32's decision margin, tiny.en;
    /// base, CPU): all-q8 1.9e-2; 1.2e-2, f16 decoder 1.0e-2 / 0.20; 7.2e-3 / 0.37 (flips base
    /// 0920's 0.044 near-tie), + f16 stem and first block 7.1e-3 / 0.08; 5.6e-3 / 0.18 (no flip;
    /// the stem and last block instead: 9.1e-3 / 0.15; 5.7e-3 / 0.24). With this rule the greedy
    /// ids equal f32's on all 14 clip runs (tests/whisper_q8.rs); faster-whisper's own int8
    /// changes the text of 3 of them. The stem's and first block's activations (log-mel and
    /// its first projections) lose most to int8; later blocks tolerate it. Cost on the 2-core
    /// CPU vs the f16 decoder alone (jfk, greedy, in-process, loaded box): encoder +0–16 %, end
    /// to end +2–12 % (docs/perf-ledger.md).
    pub fn whisper(lane: Lane) -> Self {
        match lane {
            Lane::Q8 => Self {
                base: lane,
                exceptions: vec![
                    ("model.decoder.".into(), Lane::F16),
                    ("model.encoder.conv".into(), Lane::F16),
                    ("model.encoder.layers.0.".into(), Lane::F16),
                ],
            },
            _ => Self::uniform(lane),
        }
    }

    /// The lane of weight `name`.
    pub fn lane_of(&self, name: &str) -> Lane {
        self.exceptions
            .iter()
            .find(|(p, _)| name.starts_with(p.as_str()))
            .map(|(_, l)| *l)
            .unwrap_or(self.base)
    }
}

/// Named tensors of one checkpoint, with errors that name the file and the tensor.
pub(crate) struct Tensors<'a> {
    /// f32 tensors: every tensor of a widened checkpoint, or the non-GEMM ones (norms, biases,
    /// embeddings) of a stored one.
    pub map: &'a BTreeMap<String, HostTensor>,
    /// GEMM weights as the file stores them, looked up first by [`Tensors::weight`].
    pub stored: Option<&'a BTreeMap<String, RawTensor>>,
    pub path: &'a Path,
    /// Per-weight lane exceptions; `None`: every weight in the lane the caller names.
    pub lanes: Option<&'a WeightLanes>,
}

impl<'a> Tensors<'a> {
    pub fn bad(&self, name: &str, detail: &str) -> ModelError {
        ModelError::bad_tensor(self.path, name, detail)
    }
    pub fn get(&self, name: &str) -> Result<&'a HostTensor> {
        self.map.get(name).ok_or_else(|| self.bad(name, "missing"))
    }
    /// Shape of tensor `name`, without widening it.
    pub fn shape(&self, name: &str) -> Result<&'a [usize]> {
        match (self.map.get(name), self.stored.and_then(|m| m.get(name))) {
            (Some(t), _) => Ok(&t.shape),
            (None, Some(t)) => Ok(&t.shape),
            (None, None) => Err(self.bad(name, "missing")),
        }
    }
    /// Tensor `name` on the backend as f32. A stored tensor that is not among the widened ones
    /// (the token embedding table) is widened once, straight into the buffer the backend keeps.
    pub fn tensor<B: Backend>(&self, b: &B, name: &str) -> Result<B::Tensor> {
        if let (None, Some(t)) = (self.map.get(name), self.stored.and_then(|m| m.get(name))) {
            let wide = HostTensor::new(t.shape.clone(), t.to_f32())
                .map_err(|e| self.bad(name, &e.to_string()))?;
            return Ok(b.upload_owned(wide)?);
        }
        Ok(b.upload(self.get(name)?)?)
    }
    pub fn opt_tensor<B: Backend>(&self, b: &B, name: &str) -> Result<Option<B::Tensor>> {
        match self.map.get(name) {
            Some(t) => Ok(Some(b.upload(t)?)),
            None => Ok(None),
        }
    }
    /// The lane weight `name` is stored in: the policy's, where there is one, else `lane`.
    pub fn lane_of(&self, name: &str, lane: Lane) -> Lane {
        self.lanes.map(|l| l.lane_of(name)).unwrap_or(lane)
    }
    /// GEMM weight `name`, a `(N, K)` matrix.
    pub fn weight<B: Backend>(&self, b: &B, name: &str, lane: Lane) -> Result<B::Weight> {
        self.weight_of_rank(b, name, 2, lane)
    }
    /// GEMM weight `name` of `rank` dimensions `(N, ..)`, flattened to `(N, K)` (convolution
    /// kernels `(C_out, C_in, K)` become `(C_out, C_in·K)`).
    pub fn weight_of_rank<B: Backend>(
        &self,
        b: &B,
        name: &str,
        rank: usize,
        lane: Lane,
    ) -> Result<B::Weight> {
        let lane = self.lane_of(name, lane);
        let check = |shape: &[usize]| -> Result<(usize, usize)> {
            if shape.len() != rank {
                return Err(self.bad(
                    name,
                    &format!("expected a weight of rank {rank}, got shape {shape:?}"),
                ));
            }
            Ok((shape[0], shape[1..].iter().product()))
        };
        if let Some(raw) = self.stored.and_then(|m| m.get(name)) {
            let (n, k) = check(&raw.shape)?;
            let data = match (raw.dtype, raw.as_f32_slice()) {
                (DType::F16, _) => WeightData::F16Le(raw.bytes()),
                (_, Some(v)) => WeightData::F32(v),
                _ => {
                    let wide = HostTensor::new(vec![n, k], raw.to_f32())
                        .map_err(|e| self.bad(name, &e.to_string()))?;
                    return Ok(b.weight(&wide, lane)?);
                }
            };
            let view = WeightView::new(n, k, data)
                .map_err(|e| self.bad(name, &e.to_string()))?
                .kept_by(raw.owner());
            return Ok(b.weight_from(&view, lane)?);
        }
        let w = self.get(name)?;
        let (n, k) = check(&w.shape)?;
        if rank == 2 {
            return Ok(b.weight(w, lane)?);
        }
        Ok(b.weight(&w.clone().reshape(vec![n, k])?, lane)?)
    }

    /// GEMM weights `names` (each `(N_i, K)`, all in one lane) as one `(ΣN_i, K)` weight, rows
    /// stacked in order: one GEMM instead of several over the same input (the encoder's q, k,
    /// v). Every lane quantizes row by row (q8: 32-blocks along K), so each stacked row is
    /// stored exactly as it would be alone. f16 checkpoints stack their stored bytes.
    pub fn stacked_weight<B: Backend>(
        &self,
        b: &B,
        names: &[String],
        lane: Lane,
    ) -> Result<B::Weight> {
        let first = names
            .first()
            .ok_or_else(|| self.bad("(stacked weight)", "no weights to stack"))?;
        let lane_0 = self.lane_of(first, lane);
        let mut k_0 = None;
        let mut rows = 0;
        for name in names {
            if self.lane_of(name, lane) != lane_0 {
                return Err(self.bad(
                    name,
                    &format!("stacked with {first}, which is in another lane"),
                ));
            }
            let shape = self.shape(name)?;
            if shape.len() != 2 || k_0.is_some_and(|k| k != shape[1]) {
                return Err(self.bad(
                    name,
                    &format!("shape {shape:?} cannot be stacked with {first} (same K, rank 2)"),
                ));
            }
            k_0 = Some(shape[1]);
            rows += shape[0];
        }
        let k = k_0.unwrap_or(0);
        let stored: Option<Vec<&RawTensor>> = names
            .iter()
            .map(|n| self.stored.and_then(|m| m.get(n.as_str())))
            .collect();
        if let Some(raws) = stored.filter(|r| r.iter().all(|t| t.dtype == DType::F16)) {
            let mut bytes = Vec::with_capacity(rows * k * 2);
            raws.iter().for_each(|t| bytes.extend_from_slice(t.bytes()));
            let bytes = std::sync::Arc::new(bytes);
            let view = WeightView::new(rows, k, WeightData::F16Le(&bytes[..]))
                .map_err(|e| self.bad(first, &e.to_string()))?
                .kept_by(bytes.clone());
            return Ok(b.weight_from(&view, lane_0)?);
        }
        let mut data = Vec::with_capacity(rows * k);
        for name in names {
            match (
                self.map.get(name.as_str()),
                self.stored.and_then(|m| m.get(name.as_str())),
            ) {
                (Some(t), _) => data.extend_from_slice(&t.data),
                (None, Some(t)) => data.extend_from_slice(&t.to_f32()),
                (None, None) => return Err(self.bad(name, "missing")),
            }
        }
        let wide =
            HostTensor::new(vec![rows, k], data).map_err(|e| self.bad(first, &e.to_string()))?;
        Ok(b.weight(&wide, lane_0)?)
    }

    /// The biases of a [`Tensors::stacked_weight`], `(ΣN_i)`: each `(name, N_i)`'s bias, or
    /// zeros where there is none (Whisper's k_proj).
    pub fn stacked_bias<B: Backend>(&self, b: &B, parts: &[(String, usize)]) -> Result<B::Tensor> {
        let mut data = Vec::with_capacity(parts.iter().map(|p| p.1).sum());
        for (name, n) in parts {
            match self.map.get(name.as_str()) {
                Some(t) if t.data.len() == *n => data.extend_from_slice(&t.data),
                Some(t) => {
                    return Err(self.bad(
                        name,
                        &format!("bias of shape {:?} for {n} outputs", t.shape),
                    ))
                }
                None => data.resize(data.len() + n, 0.0),
            }
        }
        let h = HostTensor::new(vec![data.len()], data)
            .map_err(|e| self.bad("(stacked bias)", &e.to_string()))?;
        Ok(b.upload(&h)?)
    }
}

/// Whether stored tensor `name` is widened up front as plain f32 values (norms, biases, the
/// position tables) rather than used as a GEMM weight. The token embedding is both: it is
/// widened only when uploaded ([`Tensors::tensor`]).
fn widened_for_upload(name: &str, t: &RawTensor) -> bool {
    t.shape.len() < 2 || name.contains(".embed_positions.")
}

/// Layer norm with its affine parameters.
pub(crate) struct Norm<B: Backend> {
    gamma: B::Tensor,
    beta: Option<B::Tensor>,
}

impl<B: Backend> Norm<B> {
    pub fn load(b: &B, t: &Tensors<'_>, prefix: &str) -> Result<Self> {
        Ok(Self {
            gamma: t.tensor(b, &format!("{prefix}.weight"))?,
            beta: t.opt_tensor(b, &format!("{prefix}.bias"))?,
        })
    }
    pub fn forward(&self, b: &B, x: &B::Tensor) -> Result<B::Tensor> {
        Ok(b.layer_norm(x, &self.gamma, self.beta.as_ref(), LN_EPS)?)
    }
    /// `x + o(attention(qkv(LN(x))))` ([`Backend::layer_norm_attention_add`]).
    pub fn attention_add(
        &self,
        b: &B,
        x: &B::Tensor,
        qkv: &Linear<B>,
        p: &AttnParams,
        o: &Linear<B>,
    ) -> Result<B::Tensor> {
        Ok(b.layer_norm_attention_add(
            x,
            &self.gamma,
            self.beta.as_ref(),
            LN_EPS,
            &qkv.w,
            qkv.b.as_ref(),
            p,
            &o.w,
            o.b.as_ref(),
        )?)
    }
    /// `x + fc2(act(fc1(LN(x))))` ([`Backend::layer_norm_mlp_add`]).
    pub fn mlp_add(
        &self,
        b: &B,
        x: &B::Tensor,
        fc1: &Linear<B>,
        act: Activation,
        fc2: &Linear<B>,
    ) -> Result<B::Tensor> {
        Ok(b.layer_norm_mlp_add(
            x,
            &self.gamma,
            self.beta.as_ref(),
            LN_EPS,
            &fc1.w,
            fc1.b.as_ref(),
            act,
            &fc2.w,
            fc2.b.as_ref(),
        )?)
    }
}

/// One projection `x·Wᵀ + b`.
pub(crate) struct Linear<B: Backend> {
    pub w: B::Weight,
    pub b: Option<B::Tensor>,
}

impl<B: Backend> Linear<B> {
    pub fn load(b: &B, t: &Tensors<'_>, prefix: &str, lane: Lane) -> Result<Self> {
        Ok(Self {
            w: t.weight(b, &format!("{prefix}.weight"), lane)?,
            // k_proj has no bias in Whisper; CTranslate2 files carry a zero one.
            b: t.opt_tensor(b, &format!("{prefix}.bias"))?,
        })
    }
    pub fn forward(&self, be: &B, x: &B::Tensor) -> Result<B::Tensor> {
        Ok(be.linear(x, &self.w, self.b.as_ref())?)
    }
}

/// Multi-head attention projections (self or cross).
pub(crate) struct Attn<B: Backend> {
    pub q: Linear<B>,
    pub k: Linear<B>,
    pub v: Linear<B>,
    pub o: Linear<B>,
}

impl<B: Backend> Attn<B> {
    pub fn load(b: &B, t: &Tensors<'_>, prefix: &str, lane: Lane) -> Result<Self> {
        Ok(Self {
            q: Linear::load(b, t, &format!("{prefix}.q_proj"), lane)?,
            k: Linear::load(b, t, &format!("{prefix}.k_proj"), lane)?,
            v: Linear::load(b, t, &format!("{prefix}.v_proj"), lane)?,
            o: Linear::load(b, t, &format!("{prefix}.out_proj"), lane)?,
        })
    }
}

pub(crate) fn attn_params<T: DeviceTensor>(
    x: &T,
    heads: usize,
    kv_len: Option<usize>,
    causal: bool,
) -> AttnParams {
    let d = x.shape().last().copied().unwrap_or(1);
    let dh = (d / heads.max(1)).max(1);
    AttnParams {
        n_heads: heads,
        scale: 1.0 / (dh as f32).sqrt(),
        kv_len,
        causal,
    }
}

/// fc1 → GELU → fc2.
pub(crate) struct Mlp<B: Backend> {
    fc1: Linear<B>,
    fc2: Linear<B>,
}

impl<B: Backend> Mlp<B> {
    pub fn load(b: &B, t: &Tensors<'_>, prefix: &str, lane: Lane) -> Result<Self> {
        Ok(Self {
            fc1: Linear::load(b, t, &format!("{prefix}.fc1"), lane)?,
            fc2: Linear::load(b, t, &format!("{prefix}.fc2"), lane)?,
        })
    }
    pub fn forward(&self, b: &B, x: &B::Tensor) -> Result<B::Tensor> {
        let h = self.fc1.forward(b, x)?;
        let h = b.activation(&h, Activation::Gelu)?;
        self.fc2.forward(b, &h)
    }
}

/// A Whisper model whose weights live on backend `B`, in one lane.
pub struct Whisper<B: Backend> {
    pub(crate) backend: B,
    pub config: WhisperConfig,
    pub generation: WhisperGeneration,
    pub tokenizer: WhisperTokenizer,
    pub(crate) lane: Lane,
    pub(crate) path: PathBuf,
    pub(crate) encoder: Encoder<B>,
    pub(crate) decoder: Decoder<B>,
    /// Encoder chain inputs by batch size `(B, n_frames, n_mels)` (see [`Whisper::encode`]).
    chain_inputs: std::sync::Mutex<BTreeMap<usize, B::Tensor>>,
    /// The device's turn among batched transcriptions' threads (batch.rs), one per model so
    /// that two batches running at once take turns too.
    pub(crate) device_turn: std::sync::Mutex<()>,
    /// Token choice on the device: 0 where the backend selects there, 1 on, 2 off
    /// (`Whisper::set_device_select`).
    pub(crate) select: std::sync::atomic::AtomicU8,
}

impl<B: Backend> Whisper<B> {
    /// Upload a loaded checkpoint to `backend`, GEMM weights in `lane` as
    /// [`WeightLanes::whisper`] means it.
    pub fn new(backend: B, ckpt: &WhisperCheckpoint, lane: Lane) -> Result<Self> {
        Self::with_lanes(backend, ckpt, &WeightLanes::whisper(lane))
    }

    /// Upload a loaded checkpoint with an explicit lane per weight.
    pub fn with_lanes(backend: B, ckpt: &WhisperCheckpoint, lanes: &WeightLanes) -> Result<Self> {
        Self::from_tensors_with_lanes(
            backend,
            ckpt.config.clone(),
            ckpt.generation.clone(),
            ckpt.tokenizer.clone(),
            &ckpt.tensors,
            &ckpt.path,
            lanes,
        )
    }

    /// Upload named weights (transformers names) to `backend`: GEMM weights in `lane` (as
    /// [`WeightLanes::whisper`] means it), norms, biases and embeddings as plain tensors.
    pub fn from_tensors(
        backend: B,
        config: WhisperConfig,
        generation: WhisperGeneration,
        tokenizer: WhisperTokenizer,
        tensors: &BTreeMap<String, HostTensor>,
        path: &Path,
        lane: Lane,
    ) -> Result<Self> {
        Self::from_tensors_with_lanes(
            backend,
            config,
            generation,
            tokenizer,
            tensors,
            path,
            &WeightLanes::whisper(lane),
        )
    }

    /// [`Self::from_tensors`] with an explicit lane per weight. Every lane the policy names must
    /// be one the backend has.
    pub fn from_tensors_with_lanes(
        backend: B,
        config: WhisperConfig,
        generation: WhisperGeneration,
        tokenizer: WhisperTokenizer,
        tensors: &BTreeMap<String, HostTensor>,
        path: &Path,
        lanes: &WeightLanes,
    ) -> Result<Self> {
        let t = Tensors {
            map: tensors,
            stored: None,
            path,
            lanes: Some(lanes),
        };
        Self::build(backend, config, generation, tokenizer, &t, lanes)
    }

    /// Build from weights as their file stores them, GEMM weights in `lane` as
    /// [`WeightLanes::whisper`] means it: each weight goes to the backend's lane straight from
    /// the stored values ([`Backend::weight_from`]), with no f32 copy of the checkpoint.
    /// The model is the one [`Self::new`] builds from the widened checkpoint.
    pub fn from_weights(backend: B, w: &WhisperWeights, lane: Lane) -> Result<Self> {
        Self::from_weights_with_lanes(backend, w, &WeightLanes::whisper(lane))
    }

    /// [`Self::from_weights`] with an explicit lane per weight.
    pub fn from_weights_with_lanes(
        backend: B,
        w: &WhisperWeights,
        lanes: &WeightLanes,
    ) -> Result<Self> {
        let mut host = BTreeMap::new();
        for (name, t) in w.tensors.iter().filter(|(n, t)| widened_for_upload(n, t)) {
            let h = HostTensor::new(t.shape.clone(), t.to_f32())
                .map_err(|e| ModelError::bad_tensor(&w.path, name, e.to_string()))?;
            host.insert(name.clone(), h);
        }
        let t = Tensors {
            map: &host,
            stored: Some(&w.tensors),
            path: &w.path,
            lanes: Some(lanes),
        };
        Self::build(
            backend,
            w.config.clone(),
            w.generation.clone(),
            w.tokenizer.clone(),
            &t,
            lanes,
        )
    }

    fn build(
        backend: B,
        config: WhisperConfig,
        generation: WhisperGeneration,
        tokenizer: WhisperTokenizer,
        t: &Tensors<'_>,
        lanes: &WeightLanes,
    ) -> Result<Self> {
        let lane = lanes.base;
        for l in std::iter::once(lane).chain(lanes.exceptions.iter().map(|(_, l)| *l)) {
            backend.require_lane(l)?;
        }
        let encoder = Encoder::load(
            &backend,
            t,
            config.encoder_layers,
            config.encoder_heads,
            lane,
        )?;
        let decoder = Decoder::load(&backend, t, &config, lane)?;
        Ok(Self {
            backend,
            config,
            generation,
            tokenizer,
            lane,
            path: t.path.to_path_buf(),
            encoder,
            decoder,
            chain_inputs: std::sync::Mutex::new(BTreeMap::new()),
            device_turn: std::sync::Mutex::new(()),
            select: std::sync::atomic::AtomicU8::new(0),
        })
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub fn lane(&self) -> Lane {
        self.lane
    }

    /// Encode one window: `mel (B, n_frames, n_mels)` frames-major → `(B, n_audio_ctx, d)`.
    pub fn encode(&self, mel: &B::Tensor) -> Result<B::Tensor> {
        let s = mel.shape();
        if s.len() != 3 || s[1] != self.encoder.n_frames || s[2] != self.config.n_mels {
            return Err(ModelError::BadInput(format!(
                "encoder input must be (B, {}, {}), got {s:?}",
                self.encoder.n_frames, self.config.n_mels
            )));
        }
        let batch = s[0];
        // The whole encoder is one chain per (batch, lane): a GPU home captures it once and
        // replays it. A chain reads its input from storage that outlives it, so each call copies
        // the mel into this batch size's input buffer first.
        let mut inputs = self.chain_inputs.lock().unwrap_or_else(|p| p.into_inner());
        let input = match inputs.entry(batch) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(self.backend.upload(&HostTensor::zeros(s.to_vec()))?)
            }
        };
        self.backend.write_rows(input, mel, 0)?;
        let input = &*input;
        let key = format!("whisper-encoder/b{batch}/{}", self.lane);
        let enc = crate::chain_one(&self.backend, &key, "whisper encoder", &mut |b| {
            self.encoder.forward(b, input)
        })?;
        // The next replay overwrites the chain's output: the caller gets its own copy.
        Ok(self.backend.slice(&enc, 0, 0, batch)?)
    }

    /// Encode a host mel window `(n_frames, n_mels)` (one sequence).
    pub fn encode_host(&self, mel: &HostTensor) -> Result<B::Tensor> {
        let x = self.backend.upload(mel)?;
        let x = self
            .backend
            .reshape(&x, &[1, self.encoder.n_frames, self.config.n_mels])?;
        self.encode(&x)
    }

    /// Cross-attention K/V of one encoded window `(1, n_audio_ctx, d)`, computed once.
    pub fn cross_kv(&self, encoded: &B::Tensor) -> Result<CrossKv<B>> {
        self.decoder.cross_kv(&self.backend, encoded)
    }

    /// A decoder state for `batch` sequences over a window's cross K/V.
    pub fn decoder_state<'a>(
        &self,
        cross: &'a CrossKv<B>,
        batch: usize,
    ) -> Result<DecoderState<'a, B>> {
        self.decoder.new_state(&self.backend, cross, batch)
    }

    /// Feed `tokens` (`batch × n`, row-major) through the decoder at the state's current
    /// position; returns the final hidden states `(batch, n, d)` (before the output projection).
    pub fn decode(
        &self,
        state: &mut DecoderState<'_, B>,
        tokens: &[u32],
        n: usize,
    ) -> Result<B::Tensor> {
        self.decoder.forward(&self.backend, state, tokens, n)
    }

    /// Logits `(rows, V)` of hidden rows `(rows, d)` against the tied embedding, downloaded.
    pub fn logits(&self, hidden: &B::Tensor) -> Result<HostTensor> {
        let l = self.decoder.logits(&self.backend, hidden)?;
        Ok(self.backend.download(&l)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whisper_q8_keeps_the_decoder_at_f16() {
        let q8 = WeightLanes::whisper(Lane::Q8);
        assert_eq!(
            q8.lane_of("model.encoder.layers.3.self_attn.q_proj.weight"),
            Lane::Q8
        );
        assert_eq!(q8.lane_of("model.encoder.layers.10.fc1.weight"), Lane::Q8);
        assert_eq!(q8.lane_of("model.encoder.layers.0.fc2.weight"), Lane::F16);
        assert_eq!(q8.lane_of("model.encoder.conv1.weight"), Lane::F16);
        assert_eq!(q8.lane_of("model.encoder.conv2.weight"), Lane::F16);
        assert_eq!(q8.lane_of("model.decoder.layers.0.fc1.weight"), Lane::F16);
        assert_eq!(q8.lane_of("model.decoder.embed_tokens.weight"), Lane::F16);
        for lane in [Lane::F32, Lane::F16] {
            let w = WeightLanes::whisper(lane);
            assert_eq!(w.lane_of("model.decoder.embed_tokens.weight"), lane);
            assert_eq!(w.lane_of("model.encoder.conv2.weight"), lane);
        }
    }

    #[test]
    fn first_matching_exception_wins() {
        let w = WeightLanes {
            base: Lane::Q8,
            exceptions: vec![
                ("model.decoder.embed_tokens.".into(), Lane::F32),
                ("model.decoder.".into(), Lane::F16),
            ],
        };
        assert_eq!(w.lane_of("model.decoder.embed_tokens.weight"), Lane::F32);
        assert_eq!(w.lane_of("model.decoder.layers.1.fc2.weight"), Lane::F16);
        assert_eq!(w.lane_of("model.encoder.layers.1.fc2.weight"), Lane::Q8);
    }
}
