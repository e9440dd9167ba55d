//! `stapes bench`: stage timings of a loaded model (median and spread over repetitions, after a
//! warm-up that absorbs module loading, kernel compilation and graph capture).

use crate::engine::{whisper_options, TranscribeOptions};
use crate::error::StapesError;
use serde::Serialize;
use stapes_core::{Backend, DeviceTensor, HostTensor};
use stapes_models::fastconformer::Parakeet;
use stapes_models::whisper::decoding::{LogitRules, TimestampRules};
use stapes_models::whisper::Whisper;
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub iters: usize,
    /// Windows in the batched-encode measurement (0 = skip).
    pub batch: usize,
    /// Decoder steps timed per repetition.
    pub decode_tokens: usize,
    /// 16 kHz samples for the end-to-end measurement (None = skip).
    pub audio: Option<Vec<f32>>,
}

/// Milliseconds over repetitions.
#[derive(Clone, Debug, Serialize)]
pub struct Stats {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub n: usize,
}

impl Stats {
    fn of(mut ms: Vec<f64>) -> Stats {
        ms.sort_by(|a, b| a.total_cmp(b));
        let n = ms.len();
        let median = if n == 0 {
            0.0
        } else if n % 2 == 1 {
            ms[n / 2]
        } else {
            (ms[n / 2 - 1] + ms[n / 2]) / 2.0
        };
        Stats {
            median_ms: median,
            min_ms: ms.first().copied().unwrap_or(0.0),
            max_ms: ms.last().copied().unwrap_or(0.0),
            n,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// One window or clip from host features: the upload of the features is timed too.
    pub encode: Stats,
    /// The same window or clip from features already on the device, as the PyTorch anchor times
    /// its encoders (and as `encode_batched` always was): the encoder alone.
    pub encode_device: Stats,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encode_batched: Option<Stats>,
    pub batch: usize,
    /// One decoder step (batch 1) including the logits and the token choice as greedy decoding
    /// makes it (Whisper: logit rules, `select_tokens`; AED families).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_token: Option<Stats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_to_end: Option<Stats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transcript: Option<String>,
    /// Family-specific figures by name (milliseconds unless the name says otherwise).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub extra: std::collections::BTreeMap<String, f64>,
}

/// Tokens greedy decoding generates for jfk.wav with the real tiny.en weights (17 + 11 tokens in
/// two segments, then end-of-text; `stapes transcribe -f verbose_json`, same as faster-whisper).
const JFK_GREEDY_TOKENS: usize = 29;

fn time<F: FnMut() -> Result<(), StapesError>>(
    iters: usize,
    warm: usize,
    mut f: F,
) -> Result<Stats, StapesError> {
    for _ in 0..warm {
        f()?;
    }
    let mut ms = Vec::with_capacity(iters);
    for _ in 0..iters.max(1) {
        let t = Instant::now();
        f()?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(Stats::of(ms))
}

/// Times `encode` on `features (T, n_mels)` uploaded once beforehand as `(1, T, n_mels)`.
fn encode_on_device<B: Backend>(
    be: &B,
    features: &HostTensor,
    iters: usize,
    mut encode: impl FnMut(&B::Tensor) -> Result<(), StapesError>,
) -> Result<Stats, StapesError> {
    let x = be.upload(features)?;
    let x = be.reshape(&x, &[1, features.shape[0], features.shape[1]])?;
    time(iters, 3, || {
        encode(&x)?;
        be.synchronize()?;
        Ok(())
    })
}

pub(crate) fn whisper<B: Backend>(
    m: &Whisper<B>,
    o: &BenchOptions,
) -> Result<BenchReport, StapesError> {
    let be = m.backend();
    let cfg = &m.config;
    let frames = 2 * cfg.n_audio_ctx; // mel frames per 30 s window
    let mel = HostTensor::random(vec![frames, cfg.n_mels], 7, 1.0);
    let encode = time(o.iters, 3, || {
        let _enc = m.encode_host(&mel)?;
        be.synchronize()?;
        Ok(())
    })?;
    let encode_device = encode_on_device(be, &mel, o.iters, |x| {
        m.encode(x)?;
        Ok(())
    })?;
    let encode_batched = if o.batch > 1 {
        let melb = HostTensor::random(vec![o.batch, frames, cfg.n_mels], 9, 1.0);
        let x = be.upload(&melb)?;
        Some(time(o.iters.min(10), 1, || {
            let _enc = m.encode(&x)?;
            be.synchronize()?;
            Ok(())
        })?)
    } else {
        None
    };

    let enc = m.encode_host(&mel)?;
    let cross = m.cross_kv(&enc)?;
    let tok = &m.tokenizer;
    let prompt = [tok.sot()];
    let steps = o.decode_tokens.clamp(1, cfg.n_text_ctx - prompt.len());
    // The steps as greedy decoding runs them: the step chain where the home captures chains,
    // the logit rules of timestamp mode, the token chosen through `select_tokens` (on the device
    // where the home selects there, else downloaded and chosen on the host). For comparison, on
    // the same window: the host-parameter pass, and the bare step with its whole logits row
    // downloaded and argmaxed on the host (no rules: this figure's meaning before device
    // selection).
    let sp = tok.special();
    let rules = LogitRules {
        suppress: m.generation.suppress_tokens.clone(),
        suppress_begin: m.generation.begin_suppress_tokens.clone(),
        timestamps: Some(TimestampRules::whisper(sp, cfg.vocab_size, 50)),
    };
    let (mut per_token, mut per_token_host, mut per_token_download) =
        (Vec::new(), Vec::new(), Vec::new());
    let was = m.device_steps_setting();
    for pass in 0..3 {
        // first what decoding runs by default, then the host-parameter steps, then the bare
        // download + argmax
        m.set_device_steps(if pass == 1 { Some(false) } else { was });
        for rep in 0..o.iters.clamp(1, 10) + 1 {
            let mut st = m.decoder_state(&cross, 1)?;
            let h = m.decode(&mut st, &prompt, prompt.len())?;
            let last = be.slice(&h, 1, prompt.len() - 1, 1)?;
            let mut next = be.argmax(&be.reshape(&last, &[1, cfg.d_model])?)?;
            let mut seq: Vec<u32> = Vec::with_capacity(steps);
            let t = Instant::now();
            for step in 0..steps {
                next = if pass == 2 {
                    let logits = m.decode_step(&mut st, &next)?; // (1, V)
                    vec![argmax(&logits.data)]
                } else {
                    let sel = m.decode_step_select_ahead(
                        &mut st,
                        &next,
                        &rules,
                        step,
                        0,
                        &[&seq],
                        (None, 1, None),
                        step + 1 < steps,
                    )?;
                    sel.ids
                };
                seq.extend_from_slice(&next);
            }
            if rep > 0 {
                let ms = t.elapsed().as_secs_f64() * 1e3 / steps as f64;
                [&mut per_token, &mut per_token_host, &mut per_token_download][pass].push(ms);
            }
        }
    }
    m.set_device_steps(was);
    let decode_token = Some(Stats::of(per_token));
    let decode_token_host = Stats::of(per_token_host).median_ms;
    let decode_token_download = Stats::of(per_token_download).median_ms;

    let (end_to_end, transcript, capped_ms) = match &o.audio {
        Some(samples) => {
            let topts = TranscribeOptions {
                beam_size: 1,
                temperature: Some(0.0),
                ..Default::default()
            };
            let w = whisper_options(&topts);
            let mut text = String::new();
            let s = time(o.iters.min(10), 1, || {
                text = m.transcribe(samples, &w)?.text();
                Ok(())
            })?;
            // Random weights rarely say end-of-text, so the run above decodes up to the window's
            // limit; this one stops where the real transcript of jfk stops, which makes it the
            // "jfk end to end with these shapes" figure.
            let capped = stapes_models::whisper::WhisperOptions {
                max_new_tokens: Some(JFK_GREEDY_TOKENS),
                ..w.clone()
            };
            let windows = std::cell::Cell::new(0usize);
            let count = |_: f64| windows.set(windows.get() + 1);
            let c = time(o.iters.min(10), 1, || {
                windows.set(0);
                m.transcribe_with_progress(samples, &capped, Some(&count))?;
                Ok(())
            })?;
            (Some(s), Some(text), Some((c.median_ms, windows.get())))
        }
        None => (None, None, None),
    };
    let mut extra: std::collections::BTreeMap<String, f64> = [
        ("decode_token_host_params_ms".to_string(), decode_token_host),
        (
            "decode_token_download_argmax_ms".to_string(),
            decode_token_download,
        ),
        (
            "decode_token_device_select".to_string(),
            f64::from(u8::from(m.device_select())),
        ),
        (
            "decode_token_queued_ahead".to_string(),
            f64::from(u8::from(m.decode_ahead())),
        ),
    ]
    .into();
    if let Some((c, windows)) = capped_ms {
        extra.insert(format!("end_to_end_{JFK_GREEDY_TOKENS}_tokens_ms"), c);
        // random tokens can end a window early on a timestamp, and the seek loop then decodes
        // another one: the figure is jfk-like only where this is 1
        extra.insert(
            format!("end_to_end_{JFK_GREEDY_TOKENS}_tokens_windows"),
            windows as f64,
        );
    }
    Ok(BenchReport {
        encode,
        encode_device,
        encode_batched,
        batch: o.batch,
        decode_token,
        end_to_end,
        transcript,
        extra,
    })
}

/// Parakeet: encoder on the input's features (11 s of random features when no audio is given),
/// batched encoder, and end to end (features, encoder, greedy head) on the audio.
pub(crate) fn parakeet<B: Backend>(
    m: &Parakeet<B>,
    o: &BenchOptions,
) -> Result<BenchReport, StapesError> {
    let be = m.backend();
    let feats = match &o.audio {
        Some(a) => m.features(a)?,
        None => HostTensor::random(vec![1100, m.config.encoder.num_mel_bins], 7, 1.0), // 11 s
    };
    let mut r = one_pass(
        be,
        &feats,
        o,
        |f| Ok(m.encode_host(f)?),
        |x| Ok(m.encode(x)?),
        |e| Ok(m.greedy(e)?.tokens.len()),
        |a| Ok(m.transcribe(a)?.text()),
    )?;
    r.encode_batched = if o.batch > 1 {
        let (t, mels) = (feats.shape[0], feats.shape[1]);
        let data: Vec<f32> = (0..o.batch)
            .flat_map(|_| feats.data.iter().copied())
            .collect();
        let x = be.upload(&HostTensor::new(vec![o.batch, t, mels], data)?)?;
        Some(time(o.iters.min(10), 1, || {
            let _enc = m.encode(&x)?;
            be.synchronize()?;
            Ok(())
        })?)
    } else {
        None
    };
    let extra = &mut r.extra;
    if let (Some(samples), true) = (&o.audio, o.batch > 1) {
        // 100 clips of 60–100 % of the audio (different lengths, so batches are padded),
        // transcribed in batches of `o.batch` and one at a time; a first pass warms (eager),
        // a second captures each shape bucket's graph, the third is timed.
        let n = samples.len();
        let clips: Vec<&[f32]> = (0..100)
            .map(|k| &samples[..n * (60 + (k * 37) % 41) / 100])
            .collect();
        let audio_s: f64 = clips.iter().map(|c| c.len() as f64).sum::<f64>() / 16_000.0;
        let pass = |batched: bool| -> Result<f64, StapesError> {
            let t = Instant::now();
            if batched {
                for group in clips.chunks(o.batch) {
                    m.transcribe_batch(group)?;
                }
            } else {
                for c in &clips {
                    m.transcribe(c)?;
                }
            }
            Ok(t.elapsed().as_secs_f64())
        };
        for (name, batched) in [("batched", true), ("sequential", false)] {
            pass(batched)?;
            pass(batched)?;
            let secs = pass(batched)?;
            extra.insert(format!("rtfx_100_clips_{name}"), audio_s / secs);
            extra.insert(format!("wall_100_clips_{name}_ms"), secs * 1e3);
        }
        extra.insert("audio_100_clips_s".into(), audio_s);
    }
    Ok(r)
}

/// What the one-pass families (Parakeet, GigaAM) time alike: the encoder on `feats` from the
/// host and from the device, greedy decoding of its output alone (`decode_clip_ms`, tokens),
/// and end to end on the audio when there is some.
#[allow(clippy::too_many_arguments)]
fn one_pass<B: Backend>(
    be: &B,
    feats: &HostTensor,
    o: &BenchOptions,
    encode_host: impl Fn(&HostTensor) -> Result<B::Tensor, StapesError>,
    encode: impl Fn(&B::Tensor) -> Result<B::Tensor, StapesError>,
    greedy: impl Fn(&B::Tensor) -> Result<usize, StapesError>,
    transcribe: impl Fn(&[f32]) -> Result<String, StapesError>,
) -> Result<BenchReport, StapesError> {
    let encode_s = time(o.iters, 3, || {
        let _enc = encode_host(feats)?;
        be.synchronize()?;
        Ok(())
    })?;
    let encode_device = encode_on_device(be, feats, o.iters, |x| {
        encode(x)?;
        Ok(())
    })?;
    let mut extra = std::collections::BTreeMap::new();
    let enc = encode_host(feats)?;
    let mut emitted = 0;
    let decode = time(o.iters.min(10), 1, || {
        emitted = greedy(&enc)?;
        Ok(())
    })?;
    extra.insert("decode_clip_ms".into(), decode.median_ms);
    extra.insert("decode_clip_tokens".into(), emitted as f64);
    let (end_to_end, transcript) = match &o.audio {
        Some(samples) => {
            let mut text = String::new();
            let s = time(o.iters.min(10), 1, || {
                text = transcribe(samples)?;
                Ok(())
            })?;
            (Some(s), Some(text))
        }
        None => (None, None),
    };
    Ok(BenchReport {
        encode: encode_s,
        encode_device,
        encode_batched: None,
        batch: o.batch,
        decode_token: None,
        end_to_end,
        transcript,
        extra,
    })
}

/// GigaAM: encoder on the input's features (11 s of random features when no audio is given),
/// `--batch` copies of them as one padded batch, greedy decoding of that output, and end to end
/// (features, encoder, head) on the audio.
pub(crate) fn gigaam<B: Backend>(
    m: &stapes_models::gigaam::Gigaam<B>,
    o: &BenchOptions,
) -> Result<BenchReport, StapesError> {
    let feats = match &o.audio {
        Some(a) => m.features(a)?,
        None => HostTensor::random(vec![1100, m.config.encoder.feat_in], 7, 1.0), // 11 s
    };
    let mut r = one_pass(
        m.backend(),
        &feats,
        o,
        |f| Ok(m.encode_host(f)?),
        |x| Ok(m.encode(x)?),
        |e| Ok(m.greedy(e)?.tokens.len()),
        |a| Ok(m.transcribe(a)?.text()),
    )?;
    // `o.batch` copies of the clip as one padded batch (from the host, as the engine runs it)
    r.encode_batched = if o.batch > 1 {
        let clips = vec![feats.clone(); o.batch];
        Some(time(o.iters.min(10), 1, || {
            let _enc = m.encode_batch(&clips)?;
            m.backend().synchronize()?;
            Ok(())
        })?)
    } else {
        None
    };
    Ok(r)
}

/// Qwen3-ASR: the audio tower and projector on the input's features (11 s of random features
/// when no audio is given), one text-model step after the prompt (the step's forward, logits
/// and argmax, averaged over `decode_tokens` steps), and end to end on the audio with at most
/// `decode_tokens` new tokens (random weights never stop on their own).
pub(crate) fn qwen3a<B: Backend>(
    m: &stapes_models::qwen3a::Qwen3Asr<B>,
    o: &BenchOptions,
) -> Result<BenchReport, StapesError> {
    let be = m.backend();
    let (feats, valid) = match &o.audio {
        Some(a) => m.features(a)?,
        None => (
            HostTensor::random(vec![1100, m.config.audio.n_mels], 7, 1.0),
            1100,
        ),
    };
    let encode = time(o.iters, 3, || {
        let _enc = m.encode(&feats, valid)?;
        be.synchronize()?;
        Ok(())
    })?;
    let chunks = be.upload(&m.tower().chunks(&feats, valid)?)?;
    let encode_device = time(o.iters, 3, || {
        let _enc = m.encode_chunks(&chunks, valid)?;
        be.synchronize()?;
        Ok(())
    })?;
    let (_, audio) = m.encode(&feats, valid)?;
    let prompt = m
        .prompt(None)
        .unwrap_or_else(|_| stapes_models::qwen3a::Prompt {
            prefix: vec![0; 9],
            suffix: vec![0; 6],
        });
    let steps = o.decode_tokens.max(1);
    // per step only: `generate` of 1 + N tokens minus `generate` of 1 (prompt prefill and the
    // first argmax), over the steps it took (the model's own step path: the step chain where
    // the home captures)
    let gen = |n: usize| -> Result<(f64, usize), StapesError> {
        let t = Instant::now();
        let g = m.generate(&audio, &prompt, n)?;
        be.synchronize()?;
        Ok((
            t.elapsed().as_secs_f64() * 1e3,
            g.ids.len() + g.finished as usize,
        ))
    };
    gen(steps + 1)?;
    let mut step_ms = Vec::new();
    for _ in 0..o.iters.clamp(1, 10) {
        let (one, _) = gen(1)?;
        let (all, n) = gen(steps + 1)?;
        if n > 1 {
            step_ms.push((all - one).max(0.0) / (n - 1) as f64);
        }
    }
    if step_ms.is_empty() {
        return Err(StapesError::Usage(
            "the model ended its answer at once: no decode step to time".into(),
        ));
    }
    let prompt_len = prompt.prefix.len() + audio.shape()[1] + prompt.suffix.len();
    let opts = stapes_models::qwen3a::Qwen3AsrOptions {
        language: None,
        max_new_tokens: Some(steps),
    };
    let (end_to_end, transcript) = match &o.audio {
        Some(a) => {
            let mut text_out = String::new();
            let s = time(o.iters.min(5), 1, || {
                text_out = m.transcribe(a, &opts)?.text();
                Ok(())
            })?;
            (Some(s), Some(text_out))
        }
        None => (None, None),
    };
    let mut extra = std::collections::BTreeMap::new();
    extra.insert("prompt_tokens".into(), prompt_len as f64);
    extra.insert("decode_steps_timed".into(), steps as f64);
    Ok(BenchReport {
        encode,
        encode_device,
        encode_batched: None,
        batch: 1,
        decode_token: Some(Stats::of(step_ms)),
        end_to_end,
        transcript,
        extra,
    })
}

/// Gemma 4's audio tower: the tower (and the text-width projection of a whole checkpoint) on
/// the input's features (11 s of random features when no audio is given). The tower reads host
/// features, so `encode_device` is the same pass timed again, upload included.
pub(crate) fn gemma4a<B: Backend>(
    m: &stapes_models::gemma4a::Gemma4Audio<B>,
    o: &BenchOptions,
) -> Result<BenchReport, StapesError> {
    let be = m.backend();
    let (feats, valid) = match &o.audio {
        Some(a) => m.features(a)?,
        None => {
            let frames = 1100;
            (
                HostTensor::random(vec![frames, m.config.n_mels], 7, 1.0),
                frames,
            )
        }
    };
    let mut run = || -> Result<(), StapesError> {
        let _e = m.encode(&feats, valid)?;
        be.synchronize()?;
        Ok(())
    };
    let encode = time(o.iters, 3, &mut run)?;
    let encode_device = time(o.iters, 1, &mut run)?;
    let mut extra = std::collections::BTreeMap::new();
    extra.insert("input_on_host".into(), 1.0);
    extra.insert("feature_frames".into(), valid as f64);
    Ok(BenchReport {
        encode,
        encode_device,
        encode_batched: None,
        batch: 1,
        decode_token: None,
        end_to_end: None,
        transcript: None,
        extra,
    })
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in x.iter().enumerate() {
        if *v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// Canary: encoder on the input's features (11 s of random features when no audio is given),
/// one greedy decoder step (averaged over a run of steps after the canary2 prompt), and end to
/// end (features, encoder, greedy decoding) on the audio.
pub(crate) fn canary<B: Backend>(
    m: &stapes_models::fastconformer::Canary<B>,
    o: &BenchOptions,
) -> Result<BenchReport, StapesError> {
    let be = m.backend();
    let mels = m.config.encoder.num_mel_bins;
    let feats = HostTensor::random(vec![1100, mels], 7, 1.0); // 11 s at a 10 ms hop
    let encode = time(o.iters, 3, || {
        let _enc = m.encode_host(&feats)?;
        be.synchronize()?;
        Ok(())
    })?;
    let encode_device = encode_on_device(be, &feats, o.iters, |x| {
        m.encode(x)?;
        Ok(())
    })?;
    let enc = m.encode_host(&feats)?;
    // The model's own en->en prompt; synthetic models have no tokenizer: canary2's length in
    // plain ids.
    let prompt = m
        .prompt(&stapes_models::fastconformer::CanaryRequest::default())
        .unwrap_or_else(|_| {
            (0..9)
                .map(|i| (i + 4) % m.config.vocab_size as u32)
                .collect()
        });
    let steps = o.decode_tokens.clamp(1, m.max_new_tokens(prompt.len()));
    let mut per_token = Vec::new();
    for rep in 0..o.iters.clamp(1, 10) + 1 {
        let t = Instant::now();
        let n = m.generate(&enc, &prompt, steps)?.len().max(1);
        if rep > 0 {
            per_token.push(t.elapsed().as_secs_f64() * 1e3 / n as f64);
        }
    }
    let (end_to_end, transcript) = match &o.audio {
        Some(samples) => {
            let mut text = String::new();
            let s = time(o.iters.min(10), 1, || {
                text = m.transcribe(samples, &prompt, steps)?.text();
                Ok(())
            })?;
            (Some(s), Some(text))
        }
        None => (None, None),
    };
    Ok(BenchReport {
        encode,
        encode_device,
        encode_batched: None,
        batch: o.batch,
        decode_token: Some(Stats::of(per_token)),
        end_to_end,
        transcript,
        extra: Default::default(),
    })
}
