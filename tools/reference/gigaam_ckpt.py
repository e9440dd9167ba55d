#!/usr/bin/env python3
"""Dump GigaAM reference fixtures (real `.ckpt` format) for the stapes parity tests.

Command line that produced the committed fixtures (about 10 minutes on 8 CPU threads; torch 2.15
CPU, torchaudio 2.11, omegaconf 2.3, hydra-core 1.3, GigaAM = salute-developers/GigaAM at the
commit recorded in expected.json):

    STAPES_CACHE=/root/.cache/stapes /tmp/tv/bin/python tools/reference/gigaam_ckpt.py \\
        --gigaam-src /tmp/giga

`--gigaam-src` is a copy of GigaAM's source (the folder holding the `gigaam` package); it is put
first on sys.path and `gigaam` is imported from there at run time (nothing of it is copied here).
`--gigaam-commit` (default: `git -C <gigaam-src> rev-parse HEAD`, else the local mirror's HEAD) is
only recorded. `--out` (or GIGAAM_FIXTURE_OUT) writes somewhere else than the committed folder.

What it writes under crates/stapes-models/tests/fixtures/gigaam/:
  v3_ctc.ckpt, v3_rnnt.ckpt, v1_ctc.ckpt
      tiny random-weight GigaAM ASR models in GigaAM's own checkpoint format,
      `torch.save({"cfg": <omegaconf DictConfig>, "state_dict": model.state_dict()}, path)`,
      state dict float32 (as the released checkpoints are), loadable by gigaam's own path
      (`torch.load(path, weights_only=False)`, `GigaAMASR(ck["cfg"])`, strict `load_state_dict`;
      checked here, outputs bit-identical). The cfgs have the keys of the released ones (PRE_*,
      ENC_*, *_HEAD, *_DECODING below):
        v3_*   v3 front end (n_fft = win = 320, hop 160, center False; the cfg also carries
               `mel_scale: htk` and `mel_norm: None`, which FeatureExtractor ignores: torchaudio's
               defaults, htk and no norm, apply), encoder with conv1d subsampling (kernel 5),
               rotary attention, LayerNorm in the conv module, conv kernel 5
        v1_ctc the older layout: the preprocessor cfg has only sample_rate and features (so
               n_fft = win = 400, hop 160, center True from the class defaults), and the encoder
               cfg has *no* `subsampling`, `subs_kernel_size`, `conv_norm_type` keys (the v1/v2-era
               ConformerEncoder did not take them; the defaults conv2d, 3, batch_norm apply),
               rel_pos attention, conv kernel 31, BatchNorm with random running statistics
      All: d_model 64, 4 heads, 2 layers, ff x4, 64 mels, charwise vocabulary of 33 (" " then
      а..я without ё), blank = 33 = the last of 34 classes. RNNT: pred_hidden 32, one LSTM layer,
      joint_hidden 32, `max_symbols_per_step` absent from the cfg (RNNTGreedyDecoding's default 10).
  inputs.safetensors
      `features.<v3|v1>.<clip>`: (T, 64) float16: the log-mel of each clip from gigaam's own
      FeatureExtractor built from that family's preprocessor cfg (valid frames only, `out_len`),
      rounded to float16 and stored as float16 (exact)
  expected.safetensors (all float32)
      `<model>.encoder.<clip>`: (T_enc, 64) encoder output, time-major, on exactly those rounded
      features (batch of one, length T, no padding)
      `v3_ctc.encoder_batched.<clip>`: the three clips as one padded batch with lengths (feature
      lengths 299/299/298); valid rows only; stored because it matches the single runs within
      BATCH_TOL (expected.json `batched` says by how much)
      `v3_ctc.encoder_batched_prefix.<clip>`: a batch whose lengths really differ: the first
      PREFIX_FRAMES[clip] rows of each clip's stored features; valid rows only (compare with a
      single run on the same prefix)
      `e2e_features.<v3|v1>.jfk`: (T, 64) the *unrounded* log-mel of the jfk clip (what the
      end-to-end case feeds the encoder), for front-end tests
  expected.json
      provenance (clips, CLIP_SECONDS, versions, GigaAM commit, search settings) and per model:
      the cfg, blank id, the seeds found, and per clip the greedy output as gigaam's decoding
      returns it (`ids`, `frames`, `text`), every decision's top-1/top-2 margin (`margins`,
      `min_margin`), the lane logit errors; RNNT also every joint step `steps` ([token, frame],
      blanks included) and `n_forced_advances`. `e2e` (v3 models): gigaam's full path
      (FeatureExtractor on the raw, unrounded jfk waveform, encoder, decode).

Weights. Encoder: normals with std WEIGHT_STD/sqrt(fan_in), norm gains 1 +- 0.2, small biases,
BatchNorm running mean/var random. GigaAM feeds raw log-mels (about -20..+5, no normalisation) to
the subsampling, so the first conv is scaled by SUBS_IN_GAIN and its bias cancels FEAT_MEAN; then
the bias of every module writing into the residual stream is set to minus its mean output over
the clips (`center_writers`), so the encoder output varies with the audio rather than carrying a
large constant part. Everything in the state dict except the preprocessor's buffers is rounded to
float16 values (dtype stays float32) *before* the reference runs, so an f16 lane on our side
sees the same weights. The preprocessor buffers (`preprocessor.featurizer.0.spectrogram.window`,
`...mel_scale.fb`) keep torchaudio's exact values, as in the released checkpoints. The RNNT
embedding row of blank is zero (padding_idx, as trained models have it; gigaam never embeds blank).

Head search. With 75 frames per clip, a random head almost always has some decision within
F16_SAFETY x the f16 lane error of a tie, so heads are searched cheaply: with the encoder fixed,
its f32 outputs and its f16-lane outputs are computed once per frame set (the clips and the e2e
case), and each drawn head is judged on them alone (decisions and margins from the f32 outputs,
the f16 error from the lane outputs, as the full emulation computes it). Heads are drawn at unit
logit scale, centred on the clips' mean encoder output and scaled by its spread. CTC: the blank
bias is put in the widest gap of the sorted (best token - blank) leads of all clip frames between
the CTC_BLANK_QUANTILES; RNNT: RNNT_BLANK_BIASES are tried and the predictor projection is scaled by
PRED_GAIN. A head passes when every clip has at least MIN_IDS tokens (RNNT: of 3+ kinds, no more
than one per frame on average, and some frame emits 2+), blanks occur, the clips decode
differently with 5+ distinct ids overall, and every decision's margin is at least F16_SAFETY x the
f16 error. The output layer is then scaled by the smallest power of two (exact in f16) lifting the
smallest margin to MARGIN_SLACK x MIN_MARGIN, and the model is checked end to end with gigaam.

Greedy references (gigaam.decoding, cross-checked against loops written here):
  CTC  per-frame argmax of the head's log-softmax, collapse repeats, drop blank; `frames` is the
       first frame of each kept token's run
  RNNT gigaam's loop: the predictor starts from a *zero input vector* and zero LSTM state (not an
       embedding); per frame up to 10 joint steps; a blank moves to the next frame, a token is
       emitted at that frame and steps the predictor (state kept only on emission); after 10
       tokens on one frame it moves on without a blank (`n_forced_advances`)
Margins. Every greedy decision of every clip and of the e2e case (CTC: each frame's argmax; RNNT:
each joint step's argmax) has a top-1/top-2 margin (log-softmax keeps logit differences) of at
least the model's `margin_floor` = max(MIN_MARGIN, F16_SAFETY x f16 error) in f32. Lane errors
(`lane_logit_error`, the largest |raw logit change| over all steps, emulated on the CPU along the
f32 decisions, teacher forced, as fastconformer_hf.py does):
  f16  activations rounded to float16 at the input of every Linear and 1x1 convolution (the
       GEMMs: attention/FF projections, pointwise convs, CTC head, joint); the subsampling convs,
       the depthwise conv and the LSTM stay f32
  q8   those GEMMs' weights as the q8 lane stores them (32-blocks amax/127 with an f16 scale,
       re-laid per output row; LSTM weights too), activations quantized to int8 per row
So f16 ids must equal the f32 ids; q8's error is larger than many margins (informational).

Clips (16 kHz mono int16, first CLIP_SECONDS seconds, int16 / 32768 as gigaam.load_audio gives):
  jfk       samples/jfk.wav (in the repo)
  beckett   $STAPES_CACHE/audio/beckett.wav
  lv0880    $STAPES_CACHE/audio/librivox/sense_and_sensibility_01_austen_64kb-0880.wav
            (47840 samples: shorter than CLIP_SECONDS)
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "crates/stapes-models/tests/fixtures/gigaam"
CACHE = Path(os.environ.get("STAPES_CACHE", Path.home() / ".cache/stapes"))
MIRROR = Path("/work/.mirror/salute-developers+GigaAM/repo")
CLIP_SECONDS = 3.0
CLIPS = {
    "jfk": ROOT / "samples/jfk.wav",
    "beckett": CACHE / "audio/beckett.wav",
    "lv0880": CACHE / "audio/librivox/sense_and_sensibility_01_austen_64kb-0880.wav",
}
# The charwise vocabulary of GigaAM v1/v2/v3 CTC and RNNT: space, then а..я (no ё).
VOCAB = [" "] + [chr(c) for c in range(ord("а"), ord("я") + 1)]
assert len(VOCAB) == 33
NUM_CLASSES = len(VOCAB) + 1
BLANK = NUM_CLASSES - 1
MAX_SYMBOLS = 10  # RNNTGreedyDecoding's default max_symbols_per_step (not in the cfg)
D_MODEL = 64

MIN_MARGIN = 0.05
F16_SAFETY = 4.0
MIN_IDS = 5
# std x sqrt(fan_in) of the random weights
WEIGHT_STD = 1.0
# Scale of the first subsampling conv (its input is raw log-mel, |x| ~ 10).
SUBS_IN_GAIN = 0.3
# Typical log-mel value; the first subsampling conv's bias cancels it (before centring).
FEAT_MEAN = -6.0
# Encoder seeds tried, and heads drawn per encoder (the head search is cheap).
ENCODER_SEEDS = range(100, 140)
HEADS_PER_ENCODER = {"ctc": 4000, "rnnt": 600}
CTC_HEAD_BATCH = 500
# CTC: the blank shift is put in the widest gap of the sorted (best token - blank) leads of all
# clip frames between these quantiles. RNNT: blank biases tried (unit-scale logits).
CTC_BLANK_QUANTILES = (0.7, 0.9)
RNNT_BLANK_BIASES = (1.0, 1.5, 2.0, 2.5)
# Gain of the RNNT joint's predictor projection (so the emitted tokens steer the next ones).
PRED_GAIN = 2.0
# The output layer is scaled by the smallest power of two (exact in f16) that lifts the
# smallest margin to MARGIN_SLACK x MIN_MARGIN.
MARGIN_SLACK = 1.25
BATCH_TOL = 1e-5
LOG_EVERY = 20  # search progress lines
# Feature rows of each clip in the `encoder_batched_prefix` case (lengths that really differ).
PREFIX_FRAMES = {"jfk": 299, "beckett": 241, "lv0880": 163}

PRE_V3 = {
    "_target_": "gigaam.preprocess.FeatureExtractor",
    "sample_rate": 16000,
    "features": 64,
    "win_length": 320,
    "hop_length": 160,
    "mel_scale": "htk",
    "n_fft": 320,
    "mel_norm": None,
    "center": False,
}
PRE_V1 = {"_target_": "gigaam.preprocess.FeatureExtractor", "sample_rate": 16000, "features": 64}
ENC_V3 = {
    "_target_": "gigaam.encoder.ConformerEncoder",
    "feat_in": 64,
    "n_layers": 2,
    "d_model": D_MODEL,
    "subsampling_factor": 4,
    "ff_expansion_factor": 4,
    "self_attention_model": "rotary",
    "pos_emb_max_len": 5000,
    "n_heads": 4,
    "conv_kernel_size": 5,
    "flash_attn": False,
    "subs_kernel_size": 5,
    "subsampling": "conv1d",
    "conv_norm_type": "layer_norm",
}
# v1/v2-era encoder cfg: no subsampling / subs_kernel_size / conv_norm_type keys.
ENC_V1 = {
    "_target_": "gigaam.encoder.ConformerEncoder",
    "feat_in": 64,
    "n_layers": 2,
    "d_model": D_MODEL,
    "subsampling_factor": 4,
    "ff_expansion_factor": 4,
    "self_attention_model": "rel_pos",
    "pos_emb_max_len": 5000,
    "n_heads": 4,
    "conv_kernel_size": 31,
    "flash_attn": False,
}
CTC_HEAD = {"_target_": "gigaam.decoder.CTCHead", "feat_in": D_MODEL, "num_classes": NUM_CLASSES}
RNNT_HEAD = {
    "_target_": "gigaam.decoder.RNNTHead",
    "decoder": {"pred_hidden": 32, "pred_rnn_layers": 1, "num_classes": NUM_CLASSES},
    "joint": {"enc_hidden": D_MODEL, "pred_hidden": 32, "joint_hidden": 32, "num_classes": NUM_CLASSES},
}
CTC_DECODING = {"_target_": "gigaam.decoding.CTCGreedyDecoding", "vocabulary": VOCAB}
RNNT_DECODING = {"_target_": "gigaam.decoding.RNNTGreedyDecoding", "vocabulary": VOCAB}


def cfg_dict(name):
    kind = "rnnt" if name.endswith("rnnt") else "ctc"
    v1 = name.startswith("v1")
    return {
        "model_class": kind,
        "sample_rate": 16000,
        "preprocessor": dict(PRE_V1 if v1 else PRE_V3),
        "encoder": dict(ENC_V1 if v1 else ENC_V3),
        "head": copy.deepcopy(RNNT_HEAD if kind == "rnnt" else CTC_HEAD),
        "decoding": copy.deepcopy(RNNT_DECODING if kind == "rnnt" else CTC_DECODING),
        "model_name": name,
    }


MODELS = {"v3_ctc": "v3", "v3_rnnt": "v3", "v1_ctc": "v1"}  # model -> front end


def read_wav(path):
    with wave.open(str(path), "rb") as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    n = int(CLIP_SECONDS * 16000)
    return torch.from_numpy(pcm[:n].astype(np.float32) / 32768.0)


def round16(x):
    return x.half().float()


def round_f16(model):
    """Round to float16 values (float32 dtype), all but the front end's exact buffers."""
    with torch.no_grad():
        for k, p in model.state_dict().items():
            if p.dtype == torch.float32 and not k.startswith("preprocessor."):
                p.copy_(round16(p))


def randomize_encoder(model, seed, feats):
    """Random encoder weights (the head is drawn separately), centred on the clips."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("head."):
                continue
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) * (WEIGHT_STD / fan_in**0.5))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif "pos_bias_" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.2 * torch.randn(b.shape, generator=g))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))
        c0 = model.encoder.pre_encode.conv[0]
        c0.weight.mul_(SUBS_IN_GAIN)
        c0.bias.add_(-FEAT_MEAN * c0.weight.sum(dim=tuple(range(1, c0.weight.dim()))))
        round_f16(model)
        center_writers(model, feats)
    return model.eval()


def center_writers(model, feats):
    """Set the bias of every module that writes into the residual stream (and of the first
    subsampling conv) to minus the mean of its output over all frames of the clips, in order,
    so the encoder output varies with the audio instead of carrying a large constant part."""
    e = model.encoder
    writers = [e.pre_encode.conv[0], e.pre_encode.conv[2]]
    if hasattr(e.pre_encode, "out"):
        writers.append(e.pre_encode.out)
    for layer in e.layers:
        writers += [layer.feed_forward1.linear2, layer.self_attn.linear_out,
                    layer.conv.pointwise_conv2, layer.feed_forward2.linear2]
    for w in writers:
        rows = []

        def grab(mod, args, out):
            x = out if isinstance(mod, torch.nn.Linear) else out.movedim(1, -1)
            rows.append(x.reshape(-1, x.shape[-1]) - mod.bias)

        h = w.register_forward_hook(grab)
        for f in feats.values():
            encode(model, f)
        h.remove()
        w.bias.copy_(-torch.cat(rows).mean(0))
        round_f16(model)


def margin(v):
    top = torch.topk(v, 2).values
    return float(top[0] - top[1])


def encode(model, feats):
    """Encoder on (T, 64) features, batch of one: (T_enc, d)."""
    enc, n = model.encoder(feats.T[None].contiguous(), torch.tensor([feats.shape[0]]))
    assert int(n[0]) == enc.shape[2]
    return enc[0].T.contiguous()


def ctc_log_probs(model, enc):
    """What gigaam's CTC decode argmaxes: log_softmax of the head, (T_enc, classes)."""
    return model.head(encoder_output=enc.T[None])[0]


def ctc_raw(model, enc):
    return model.head.decoder_layers(enc.T[None])[0].T


def rnnt_predict(head, tok, state):
    return head.decoder.predict(None if tok is None else torch.tensor([[tok]]), state)


def rnnt_joint(head, enc_t, g):
    """gigaam's joint (log_softmax) for one frame and one predictor output."""
    return head.joint.joint(enc_t[None, None], g)[0, 0, 0]


def rnnt_raw(head, enc_t, g):
    j = head.joint
    return j.joint_net(j.enc(enc_t[None, None]).unsqueeze(2) + j.pred(g).unsqueeze(1))[0, 0, 0]


def rnnt_steps(head, enc):
    """gigaam's greedy rules, step by step: every joint step, token and frame."""
    g, state = rnnt_predict(head, None, None)
    steps, margins, ids, frames, forced = [], [], [], [], 0
    for t in range(enc.shape[0]):
        for _ in range(MAX_SYMBOLS):
            lp = rnnt_joint(head, enc[t], g)
            k = int(lp.argmax())
            steps.append([k, t])
            margins.append(margin(lp))
            if k == BLANK:
                break
            ids.append(k)
            frames.append(t)
            g, state = rnnt_predict(head, k, state)
        else:
            forced += 1
    return steps, margins, ids, frames, forced


def rnnt_teacher_forced(head, enc, steps):
    """Raw joint logits of every step of `steps`, the predictor fed the same decisions."""
    g, state = rnnt_predict(head, None, None)
    out = []
    for k, t in steps:
        out.append(rnnt_raw(head, enc[t], g))
        if k != BLANK:
            g, state = rnnt_predict(head, k, state)
    return torch.stack(out)


def reference(model, kind, feats):
    """Encoder output and the greedy result of one clip (gigaam's decode, cross-checked)."""
    enc = encode(model, feats)
    text, ids, frames = model.decoding.decode(model.head, enc.T[None], torch.tensor([enc.shape[0]]))[0]
    r = {"ids": ids, "frames": frames, "text": text}
    if kind == "ctc":
        lp = ctc_log_probs(model, enc)
        am = lp.argmax(-1).tolist()
        mine = [(k, t) for t, k in enumerate(am) if k != BLANK and (t == 0 or am[t - 1] != k)]
        assert [k for k, _ in mine] == ids and [t for _, t in mine] == frames
        margins = [margin(row) for row in lp]
        r["n_blank_frames"] = sum(1 for k in am if k == BLANK)
    else:
        steps, margins, mids, mframes, forced = rnnt_steps(model.head, enc)
        assert (mids, mframes) == (ids, frames), (mids, ids)
        r["steps"] = steps
        r["n_blank_steps"] = sum(1 for k, _ in steps if k == BLANK)
        r["n_forced_advances"] = forced
    assert text == "".join(VOCAB[k] for k in ids)
    r["min_margin"] = min(margins)
    r["margins"] = margins
    return enc, r


def e2e(model, wav):
    """gigaam's full path: FeatureExtractor on the raw waveform, encoder, greedy decode."""
    encoded, enc_len = model(wav[None], torch.tensor([wav.shape[0]]))
    text, ids, frames = model.decoding.decode(model.head, encoded, enc_len)[0]
    enc = encoded[0].T.contiguous()
    r = {"ids": ids, "frames": frames, "text": text, "encoder_frames": int(enc_len[0])}
    if hasattr(model.head, "decoder_layers"):
        margins = [margin(row) for row in ctc_log_probs(model, enc)]
    else:
        steps, margins, mids, _, _ = rnnt_steps(model.head, enc)
        assert mids == ids
        r["steps"] = steps
    r["min_margin"] = min(margins)
    r["margins"] = margins
    return enc, r


# ---- GPU lane emulation -------------------------------------------------------------------------

def q8_rows(w):
    """CUDA's q8 weight: the lane's 32-blocks (amax/127, f16 scale) re-quantized per row."""
    n, k = w.shape
    wp = torch.nn.functional.pad(w, (0, (-k) % 32)).view(n, -1, 32)
    scale = wp.abs().amax(-1, keepdim=True) / 127
    inv = torch.where(scale > 0, 1 / scale, torch.zeros_like(scale))
    blocks = ((wp * inv).round().clamp(-127, 127) * scale.half().float()).view(n, -1)[:, :k]
    return quantize_rows(blocks)


def quantize_rows(x):
    """int8 with one amax/127 scale per row (last dimension), back to float."""
    s = x.abs().amax(-1, keepdim=True) / 127
    inv = torch.where(s > 0, 1 / s, torch.zeros_like(s))
    return (x * inv).round().clamp(-127, 127) * s


def emulated(model, lane):
    """A copy of `model` computing as a GPU lane would: every Linear and 1x1 convolution
    (the GEMMs) sees its input rounded to f16 (lane f16) or quantized per row to int8 with q8
    weights (lane q8; LSTM weights q8 too)."""
    m = copy.deepcopy(model)
    for mod in m.modules():
        is_conv = isinstance(mod, (torch.nn.Conv1d, torch.nn.Conv2d))
        pointwise = is_conv and mod.groups == 1 and all(k == 1 for k in mod.kernel_size)
        if not (isinstance(mod, torch.nn.Linear) or pointwise):
            continue
        if lane == "q8":
            w = mod.weight.data
            mod.weight.data = q8_rows(w.reshape(w.shape[0], -1)).reshape(w.shape)

        def pre(mod, args):
            x = args[0]
            if lane == "f16":
                return (round16(x),) + args[1:]
            xr = x if isinstance(mod, torch.nn.Linear) else x.movedim(1, -1)
            xr = quantize_rows(xr)
            return (xr if isinstance(mod, torch.nn.Linear) else xr.movedim(-1, 1),) + args[1:]

        mod.register_forward_pre_hook(pre)
    if lane == "q8":
        for mod in m.modules():
            if isinstance(mod, torch.nn.LSTM):
                for name, p in mod.named_parameters():
                    if name.startswith("weight"):
                        p.data = q8_rows(p.data)
    return m.eval()


def lane_errors(model, kind, feats, r, lanes):
    """Largest |raw logit change| of each emulated lane (name -> model) along the decisions."""
    def logits(m):
        enc = encode(m, feats)
        return ctc_raw(m, enc) if kind == "ctc" else rnnt_teacher_forced(m.head, enc, r["steps"])

    want = logits(model)
    return {lane: float((logits(m) - want).abs().max()) for lane, m in lanes.items()}


# ---- head search ---------------------------------------------------------------------------------
# With the encoder fixed, its f32 outputs `e` and its f16-lane outputs `e16` (encoder emulated,
# then rounded as the head's GEMM input) are computed once per frame set (the clips, and the
# raw-audio jfk case); a head is then judged on them alone: the greedy decisions and margins from
# `e`, the f16 error from `e16`, exactly as the full emulation computes them. Many heads are
# drawn per encoder, and the first one meeting every condition is checked end to end with gigaam.


def draw_ctc_heads(seeds, mu, spread):
    """Unit-scale CTC heads: W (n, classes, d), b (n, classes), centred on the clips' mean."""
    ws, bs = [], []
    for s in seeds:
        g = torch.Generator().manual_seed(s)
        w = torch.randn(NUM_CLASSES, D_MODEL, generator=g) * (WEIGHT_STD / D_MODEL**0.5) / spread
        b = 0.05 * torch.randn(NUM_CLASSES, generator=g) - w @ mu
        ws.append(w)
        bs.append(b)
    return torch.stack(ws), torch.stack(bs)


def collapse(am):
    return [k for t, k in enumerate(am) if k != BLANK and (t == 0 or am[t - 1] != k)]


def ctc_head_search(sets, clips, mu, spread, first_seed, n):
    """Yield (head seed, W, b, min margin, f16 error) of each CTC head meeting the conditions."""
    for at in range(0, n, CTC_HEAD_BATCH):
        seeds = list(range(first_seed + at, first_seed + min(n, at + CTC_HEAD_BATCH)))
        w, b = draw_ctc_heads(seeds, mu, spread)
        w, b = round16(w), round16(b)
        logits = {k: torch.einsum("tc,nkc->ntk", e, w) + b[:, None] for k, (e, _) in sets.items()}
        logits16 = {k: torch.einsum("tc,nkc->ntk", e16, w) + b[:, None] for k, (_, e16) in sets.items()}
        # Blank shift: the widest gap between sorted leads within the quantile window.
        lead = torch.cat([logits[c][..., :BLANK].max(-1).values - logits[c][..., BLANK] for c in clips], 1)
        srt = lead.sort(1).values
        lo, hi = (int(q * srt.shape[1]) for q in CTC_BLANK_QUANTILES)
        gaps = srt[:, lo + 1 : hi + 1] - srt[:, lo:hi]
        i = gaps.argmax(1) + lo
        shift = (srt[torch.arange(len(seeds)), i] + srt[torch.arange(len(seeds)), i + 1]) / 2
        nb = round16(b[:, BLANK] + shift)
        delta = nb - b[:, BLANK]
        b[:, BLANK] = nb
        for d in (logits, logits16):
            for k in d:
                d[k][..., BLANK] += delta[:, None]
        err = torch.stack([(logits16[k] - logits[k]).abs().amax((1, 2)) for k in sets]).amax(0)
        mins = torch.stack([(lambda t: t[..., 0] - t[..., 1])(logits[k].topk(2, -1).values).amin(1)
                            for k in sets]).amin(0)
        for j in torch.nonzero(mins >= F16_SAFETY * err).flatten().tolist():
            seqs = {}
            for k in sets:
                am = logits[k][j].argmax(-1).tolist()
                seqs[k] = collapse(am)
                if len(seqs[k]) < MIN_IDS or sum(1 for a in am if a == BLANK) < 3:
                    break
            else:
                clip_seqs = [tuple(seqs[c]) for c in clips]
                if len(set(clip_seqs)) == len(clips) and len({i for s in clip_seqs for i in s}) >= 5:
                    yield seeds[j], (w[j], b[j]), float(mins[j]), float(err[j])


def draw_rnnt_head(seed, mu, spread, blank_bias):
    """Unit-scale RNNT head (predictor and joint), joint.enc centred on the clips' mean."""
    g = torch.Generator().manual_seed(seed)
    h = RNNT_HEAD["decoder"]["pred_hidden"]
    j = RNNT_HEAD["joint"]["joint_hidden"]

    def lin(o, i, scale=1.0):
        return torch.randn(o, i, generator=g) * (WEIGHT_STD / i**0.5) * scale, 0.05 * torch.randn(o, generator=g)

    emb = torch.randn(NUM_CLASSES, h, generator=g)
    emb[BLANK] = 0.0  # padding_idx
    w_ih, b_ih = lin(4 * h, h)
    w_hh, b_hh = lin(4 * h, h)
    w_p, b_p = lin(j, h, PRED_GAIN)
    w_e, b_e = lin(j, D_MODEL, 1.0 / spread)
    b_e = b_e - w_e @ mu
    w_o, b_o = lin(NUM_CLASSES, j)
    b_o[BLANK] += blank_bias
    p = dict(emb=emb, w_ih=w_ih, b_ih=b_ih, w_hh=w_hh, b_hh=b_hh, w_p=w_p, b_p=b_p, w_e=w_e,
             b_e=b_e, w_o=w_o, b_o=b_o)
    return {k: round16(v) for k, v in p.items()}


def lstm_step(p, x, h, c):
    gates = p["w_ih"] @ x + p["b_ih"] + p["w_hh"] @ h + p["b_hh"]
    i, f, gg, o = gates.chunk(4)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
    h = torch.sigmoid(o) * torch.tanh(c)
    return h, c


def rnnt_cheap(p, e, e16, floor_ratio):
    """gigaam's RNNT greedy with head `p` on one frame set, and the f16 lane's joint error along
    it (teacher forced). Stops early (None) once a margin is below floor_ratio x the error so far."""
    enc = e @ p["w_e"].T + p["b_e"]
    enc16 = e16 @ p["w_e"].T + p["b_e"]
    hdim = p["w_p"].shape[1]
    h, c = lstm_step(p, torch.zeros(hdim), torch.zeros(hdim), torch.zeros(hdim))
    ids, steps, mins, err = [], 0, float("inf"), 0.0
    blanks = most = 0
    for t in range(e.shape[0]):
        for n in range(MAX_SYMBOLS):
            most = max(most, n)
            logits = p["w_o"] @ torch.relu(enc[t] + p["w_p"] @ h + p["b_p"]) + p["b_o"]
            z16 = round16(torch.relu(enc16[t] + p["w_p"] @ round16(h) + p["b_p"]))
            logits16 = p["w_o"] @ z16 + p["b_o"]
            err = max(err, float((logits16 - logits).abs().max()))
            top = logits.topk(2)
            mins = min(mins, float(top.values[0] - top.values[1]))
            if mins < floor_ratio * err:
                return None
            k = int(top.indices[0])
            steps += 1
            if k == BLANK:
                blanks += 1
                break
            ids.append(k)
            h, c = lstm_step(p, p["emb"][k], h, c)
    return ids, blanks, mins, err, most


def rnnt_head_search(sets, clips, mu, spread, first_seed, n):
    for s in range(first_seed, first_seed + n):
        for bias in RNNT_BLANK_BIASES:
            p = draw_rnnt_head(s, mu, spread, bias)
            res = {}
            for k, (e, e16) in sets.items():
                r = rnnt_cheap(p, e, e16, F16_SAFETY)
                # Enough tokens, of several kinds, but not more than frames (no runaway).
                if r is None or not MIN_IDS <= len(r[0]) <= e.shape[0] or len(set(r[0])) < 3:
                    break
                res[k] = r
            else:
                clip_seqs = [tuple(res[c][0]) for c in clips]
                multi = max(res[c][4] for c in clips) >= 2  # some frame emits 2+ tokens
                if len(set(clip_seqs)) == len(clips) and len({i for q in clip_seqs for i in q}) >= 5 and multi:
                    mins = min(r[2] for r in res.values())
                    err = max(r[3] for r in res.values())
                    if mins >= F16_SAFETY * err:
                        yield (s, bias), p, mins, err


def install_ctc_head(model, w, b, gain):
    with torch.no_grad():
        conv = model.head.decoder_layers[0]
        conv.weight.copy_((w * gain).view_as(conv.weight))
        conv.bias.copy_(b * gain)


def install_rnnt_head(model, p, gain):
    hd = model.head
    with torch.no_grad():
        hd.decoder.embed.weight.copy_(p["emb"])
        hd.decoder.lstm.weight_ih_l0.copy_(p["w_ih"])
        hd.decoder.lstm.bias_ih_l0.copy_(p["b_ih"])
        hd.decoder.lstm.weight_hh_l0.copy_(p["w_hh"])
        hd.decoder.lstm.bias_hh_l0.copy_(p["b_hh"])
        hd.joint.pred.weight.copy_(p["w_p"])
        hd.joint.pred.bias.copy_(p["b_p"])
        hd.joint.enc.weight.copy_(p["w_e"])
        hd.joint.enc.bias.copy_(p["b_e"])
        hd.joint.joint_net[1].weight.copy_(p["w_o"] * gain)
        hd.joint.joint_net[1].bias.copy_(p["b_o"] * gain)


def full_check(model, kind, feats, e2e_wav):
    """Everything with gigaam itself: decode, margins, lane errors; raises AssertionError."""
    results, encs = {}, {}
    for clip, f in feats.items():
        encs[clip], results[clip] = reference(model, kind, f)
        assert len(results[clip]["ids"]) >= MIN_IDS, clip
    ee = None
    if e2e_wav is not None:
        _, ee = e2e(model, e2e_wav)
        assert len(ee["ids"]) >= MIN_IDS
    lanes = {"f16": emulated(model, "f16"), "q8": emulated(model, "q8")}
    for clip, f in feats.items():
        results[clip]["lane_logit_error"] = lane_errors(model, kind, f, results[clip], lanes)
    f16 = max(r["lane_logit_error"]["f16"] for r in results.values())
    floor = max(MIN_MARGIN, F16_SAFETY * f16)
    worst = min([r["min_margin"] for r in results.values()] + ([ee["min_margin"]] if ee else []))
    assert worst >= floor, f"margin {worst:.4f} below the floor {floor:.4f}"
    return results, encs, ee, floor


def batched(model, feats_list):
    """One padded batch (pad value log(1e-9), what zero audio gives) through the encoder with
    lengths; the valid rows of each item, and the padded rows."""
    lengths = torch.tensor([f.shape[0] for f in feats_list])
    x = torch.full((len(feats_list), int(lengths.max()), 64), float(np.log(1e-9)))
    for i, f in enumerate(feats_list):
        x[i, : f.shape[0]] = f
    enc, enc_len = model.encoder(x.transpose(1, 2).contiguous(), lengths)
    out = [enc[i, :, : int(n)].T.contiguous() for i, n in enumerate(enc_len)]
    pad_rows = [enc[i, :, int(n):].T for i, n in enumerate(enc_len)]
    return out, pad_rows


def search(GigaAMASR, name, feats, e2e_feats, e2e_wav):
    """Encoder seeds x heads until one model meets every condition (see the module docs)."""
    kind = "rnnt" if name.endswith("rnnt") else "ctc"
    cfg = __import__("omegaconf").OmegaConf.create(cfg_dict(name))
    clips = list(feats)
    tried = 0
    for enc_seed in ENCODER_SEEDS:
        model = randomize_encoder(GigaAMASR(cfg), enc_seed, feats)
        lane16 = emulated(model, "f16")
        frame_sets = dict(feats)
        if e2e_feats is not None:
            frame_sets["e2e"] = e2e_feats
        sets = {k: (encode(model, f), round16(encode(lane16, f))) for k, f in frame_sets.items()}
        allc = torch.cat([sets[c][0] for c in clips])
        mu, spread = allc.mean(0), float((allc - allc.mean(0)).std())
        first = enc_seed * 100_000
        if kind == "ctc":
            found = ctc_head_search(sets, clips, mu, spread, first, HEADS_PER_ENCODER[kind])
        else:
            found = rnnt_head_search(sets, clips, mu, spread, first, HEADS_PER_ENCODER[kind])
        n_here = 0
        for head_seed, head, mins, err in found:
            n_here += 1
            gain = 1.0
            while mins * gain < MARGIN_SLACK * MIN_MARGIN:
                gain *= 2.0
            if kind == "ctc":
                install_ctc_head(model, head[0], head[1], gain)
            else:
                install_rnnt_head(model, head, gain)
            model.eval()
            tried += 1
            try:
                results, encs, ee, floor = full_check(model, kind, feats, e2e_wav)
            except AssertionError as e:
                print(f"{name} encoder {enc_seed} head {head_seed}: full check: {e}", flush=True)
                continue
            info = dict(encoder_seed=enc_seed, head_seed=head_seed if kind == "ctc" else head_seed[0],
                        head_gain=gain, encoder_spread=spread, margin_floor=floor,
                        cheap_search={"min_margin_unit_gain": mins, "f16_error_unit_gain": err})
            if kind == "ctc":
                info["blank_logit_bias"] = float(head[1][BLANK] * gain)
            else:
                info["blank_bias_unit_gain"] = head_seed[1]
            return model, cfg, info, results, encs, ee
        print(f"{name} encoder {enc_seed}: no head of {HEADS_PER_ENCODER[kind]} passed", flush=True)
    raise SystemExit(f"no usable seed for {name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gigaam-src", required=True, help="folder holding the gigaam package")
    ap.add_argument("--gigaam-commit", help="recorded only (default: git rev-parse HEAD)")
    ap.add_argument("--out", default=os.environ.get("GIGAAM_FIXTURE_OUT", DEFAULT_OUT), type=Path)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.gigaam_src).resolve()))
    import omegaconf
    from gigaam.model import GigaAMASR

    commit = args.gigaam_commit
    for repo in (Path(args.gigaam_src), MIRROR):
        if commit is None:
            r = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True)
            commit = r.stdout.strip() or None
    torch.set_grad_enabled(False)
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    out = args.out
    out.mkdir(parents=True, exist_ok=True)

    audio, clip_info = {}, {}
    for clip, path in CLIPS.items():
        audio[clip] = read_wav(path)
        clip_info[clip] = {
            "source": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else
                          "$STAPES_CACHE/" + str(path.relative_to(CACHE))),
            "samples": int(audio[clip].shape[0]),
        }
    # Features of each front end, from gigaam's FeatureExtractor (model.preprocessor).
    feats, e2e_feats, fe_info = {}, {}, {}
    for fe_name, pre in (("v3", PRE_V3), ("v1", PRE_V1)):
        fe = __import__("hydra").utils.instantiate(omegaconf.OmegaConf.create(pre)).eval()
        feats[fe_name] = {}
        for clip, x in audio.items():
            f, n = fe(x[None].clone(), torch.tensor([x.shape[0]]))
            n = int(n[0])
            assert n <= f.shape[2]
            full = f[0, :, :n].T.contiguous()
            feats[fe_name][clip] = full.half().float()
            clip_info[clip][f"frames_{fe_name}"] = n
            if clip == "jfk":
                e2e_feats[fe_name] = full
        fe_info[fe_name] = {"n_fft": fe.n_fft, "win_length": fe.win_length, "hop_length": fe.hop_length,
                            "center": fe.center, "window": "hann (periodic)", "power": 2.0,
                            "mel_scale": "htk", "mel_norm": None, "f_min": 0.0, "f_max": 8000.0,
                            "log": "ln(clamp(power_mel, 1e-9, 1e9))",
                            "pad_mode": "reflect" if fe.center else None}

    expected = {"clips": clip_info, "clip_seconds": CLIP_SECONDS, "front_ends": fe_info,
                "vocabulary": VOCAB, "blank_id": BLANK, "min_margin_floor": MIN_MARGIN,
                "f16_safety": F16_SAFETY, "models": {}}
    tensors = {f"e2e_features.{k}.jfk": v for k, v in e2e_feats.items()}
    for name, fe_name in MODELS.items():
        kind = "rnnt" if name.endswith("rnnt") else "ctc"
        v3 = fe_name == "v3"
        model, cfg, found, results, encs, ee = search(
            GigaAMASR, name, feats[fe_name], e2e_feats[fe_name] if v3 else None, audio["jfk"] if v3 else None)
        errors = {lane: max(r["lane_logit_error"][lane] for r in results.values()) for lane in ("f16", "q8")}
        print(name, found, "errors", errors,
              {k: (len(v["ids"]), round(v["min_margin"], 4), v["text"]) for k, v in results.items()}, flush=True)
        for r in results.values():
            r["margins"] = [round(m, 4) for m in r["margins"]]
        # Save in GigaAM's format and reload through its own path: same weights, same outputs.
        path = out / f"{name}.ckpt"
        torch.save({"cfg": cfg, "state_dict": model.state_dict()}, path)
        ck = torch.load(path, map_location="cpu", weights_only=False)
        assert isinstance(ck["cfg"], omegaconf.DictConfig)
        again = GigaAMASR(ck["cfg"])
        again.load_state_dict(ck["state_dict"])  # strict
        again.eval()
        for clip, f in feats[fe_name].items():
            enc2, r2 = reference(again, kind, f)
            assert torch.equal(enc2, encs[clip]), clip
            assert (r2["ids"], r2["frames"]) == (results[clip]["ids"], results[clip]["frames"]), clip
        entry = {"checkpoint": path.name, "front_end": fe_name, "kind": kind,
                 "cfg": omegaconf.OmegaConf.to_container(cfg), "blank_id": BLANK,
                 "num_classes": NUM_CLASSES, "encoder_dim": D_MODEL,
                 "max_symbols_per_step": MAX_SYMBOLS if kind == "rnnt" else None,
                 **found, "min_margin": min(r["min_margin"] for r in results.values()),
                 "lane_logit_error": errors, "results": results}
        if ee is not None:
            _, again_ee = e2e(again, audio["jfk"])
            assert again_ee["ids"] == ee["ids"] and again_ee["frames"] == ee["frames"]
            ee["margins"] = [round(m, 4) for m in ee["margins"]]
            ee["clip"] = "jfk"
            ee["samples"] = int(audio["jfk"].shape[0])
            ee["feature_frames"] = int(e2e_feats[fe_name].shape[0])
            entry["e2e"] = ee
        for clip, e in encs.items():
            tensors[f"{name}.encoder.{clip}"] = e
        if name == "v3_ctc":
            clips = list(feats[fe_name])
            entry["batched"] = {}
            cases = {
                "encoder_batched": {c: feats[fe_name][c] for c in clips},
                "encoder_batched_prefix": {c: feats[fe_name][c][: PREFIX_FRAMES[c]] for c in clips},
            }
            for case, fl in cases.items():
                outs, pad_rows = batched(model, list(fl.values()))
                singles = [encs[c] if case == "encoder_batched" else encode(model, fl[c]) for c in clips]
                diffs = {c: float((o - s).abs().max()) for c, o, s in zip(clips, outs, singles)}
                ok = all(o.shape == s.shape for o, s in zip(outs, singles)) and max(diffs.values()) <= BATCH_TOL
                info = {"feature_frames": {c: int(fl[c].shape[0]) for c in clips},
                        "encoder_frames": {c: int(o.shape[0]) for c, o in zip(clips, outs)},
                        "batch_feature_frames": max(int(fl[c].shape[0]) for c in clips),
                        "pad_value": float(np.log(1e-9)),
                        "max_abs_diff_vs_single": diffs, "tolerance": BATCH_TOL, "stored": ok,
                        "pad_rows_finite": all(bool(torch.isfinite(p).all()) for p in pad_rows)}
                # The batch's decode too (gigaam's CTC decode with lengths).
                if ok:
                    for c, o in zip(clips, outs):
                        tensors[f"v3_ctc.{case}.{c}"] = o
                    info["ids"] = {c: model.decoding.decode(model.head, o.T[None], torch.tensor([o.shape[0]]))[0][1]
                                   for c, o in zip(clips, outs)}
                entry["batched"][case] = info
                print(case, info["encoder_frames"], diffs, "stored" if ok else "NOT stored", flush=True)
        expected["models"][name] = entry

    save_file({f"features.{fe}.{c}": v.half().contiguous() for fe, d in feats.items() for c, v in d.items()},
              out / "inputs.safetensors")
    save_file({k: v.float().contiguous() for k, v in tensors.items()}, out / "expected.safetensors")
    expected["provenance"] = {
        "script": "tools/reference/gigaam_ckpt.py",
        "gigaam_repo": "salute-developers/GigaAM",
        "gigaam_commit": commit,
        "torch": torch.__version__,
        "torchaudio": __import__("torchaudio").__version__,
        "omegaconf": omegaconf.__version__,
        "weights": "fan-in scaled normals rounded to f16 values, stored float32",
        "weight_std": WEIGHT_STD,
        "subs_in_gain": SUBS_IN_GAIN,
        "feat_mean": FEAT_MEAN,
        "f16_safety": F16_SAFETY,
        "encoder_seeds": [ENCODER_SEEDS.start, ENCODER_SEEDS.stop],
        "heads_per_encoder": HEADS_PER_ENCODER,
        "ctc_blank_quantiles": CTC_BLANK_QUANTILES,
        "rnnt_blank_biases": RNNT_BLANK_BIASES,
        "pred_gain": PRED_GAIN,
        "margin_slack": MARGIN_SLACK,
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
