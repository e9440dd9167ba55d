#!/usr/bin/env python3
"""Write the tiny TDT fixture (crates/stapes-models/tests/fixtures/fastconformer/tdt, an HF
ParakeetForTDT directory) as whisper.cpp Parakeet files, the layout of whisper.cpp's
models/convert-parakeet-to-ggml.py (the files ggml-org/parakeet-GGUF ships):

  i32 magic 'ggml' | i32 x 15 hparams (n_vocab, n_audio_ctx 5000, d_model, heads, layers, n_mels,
  ftype, n_fft, subsampling factor, subsampling channels, conv kernel, pred hidden, pred layers,
  TDT durations count, max symbols) | i32 n_mel, i32 n_fft/2+1, f32 filterbank | i32 n_window,
  f32 window | u32 durations | i32 n_tokens, {i32 len, bytes} | tensors: i32 n_dims, i32 name
  length, i32 type (0 f32, 1 f16), i32 ne (innermost first), name, data

with the converter's treatment of NeMo's state dict: NeMo names; 1-sized dimensions squeezed except
in 4-D conv weights; the subsampling conv biases as (1, C, 1, 1); the prediction LSTM's bias_ih
folded into bias_hh (renamed bias_h_l{N}) and the gate blocks of its weights and bias reordered
from PyTorch's (i, f, g, o) to (i, f, o, g); in the f16 file, matrices f16 except 4-D subsampling
convs and depthwise conv weights, everything 1-D, every bias and norm f32. The filterbank (Slaney
mel, 512-point FFT) and the 400-point symmetric Hann window are NeMo's, as the converter copies
them from the checkpoint.

Outputs tdt-wcpp-f16.bin beside the fixture directory (with --f32 also the f32 file, not kept). Needs numpy and
safetensors. The HF fixture's weights are f16 values, so both files hold the same weights.
"""
import json
import struct
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

ROOT = Path(__file__).resolve().parents[2]
FX = ROOT / "crates/stapes-models/tests/fixtures/fastconformer"

# transformers -> NeMo name pieces (the fixture's names; prefixes first)
PREFIXES = [
    ("encoder.subsampling.layers.", "encoder.pre_encode.conv."),
    ("encoder.subsampling.linear.", "encoder.pre_encode.out."),
    ("decoder.embedding.", "decoder.prediction.embed."),
    ("decoder.lstm.", "decoder.prediction.dec_rnn.lstm."),
    ("encoder_projector.", "joint.enc."),
    ("decoder.decoder_projector.", "joint.pred."),
    ("joint.head.", "joint.joint_net.2."),
]
PIECES = [
    (".conv.norm.", ".conv.batch_norm."),
    (".self_attn.q_proj.", ".self_attn.linear_q."),
    (".self_attn.k_proj.", ".self_attn.linear_k."),
    (".self_attn.v_proj.", ".self_attn.linear_v."),
    (".self_attn.o_proj.", ".self_attn.linear_out."),
    (".self_attn.relative_k_proj.", ".self_attn.linear_pos."),
    (".self_attn.bias_u", ".self_attn.pos_bias_u"),
    (".self_attn.bias_v", ".self_attn.pos_bias_v"),
]
LSTM = "decoder.prediction.dec_rnn.lstm."


def nemo_name(hf):
    for a, b in PREFIXES:
        if hf.startswith(a):
            hf = b + hf[len(a):]
            break
    for a, b in PIECES:
        hf = hf.replace(a, b)
    return hf


def slaney_mel(sr, n_fft, n_mels):
    """librosa.filters.mel(sr, n_fft, n_mels, fmin 0, fmax sr/2, htk False, norm 'slaney')."""
    def hz_to_mel(f):
        f = np.asarray(f, dtype=np.float64)
        lin = f / (200.0 / 3)
        log_start, log_step = 1000.0 / (200.0 / 3), np.log(6.4) / 27.0
        return np.where(f >= 1000.0, log_start + np.log(np.maximum(f, 1e-10) / 1000.0) / log_step, lin)

    def mel_to_hz(m):
        m = np.asarray(m, dtype=np.float64)
        lin = m * (200.0 / 3)
        log_start, log_step = 1000.0 / (200.0 / 3), np.log(6.4) / 27.0
        return np.where(m >= log_start, 1000.0 * np.exp(log_step * (m - log_start)), lin)

    freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    pts = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2))
    fb = np.zeros((n_mels, len(freqs)))
    for i in range(n_mels):
        lo, c, hi = pts[i], pts[i + 1], pts[i + 2]
        up = (freqs - lo) / (c - lo)
        down = (hi - freqs) / (hi - c)
        fb[i] = np.maximum(0, np.minimum(up, down)) * (2.0 / (hi - lo))
    return fb.astype(np.float32)


def tensor(fout, name, data, f16):
    n = data.ndim
    keep_f32 = (n < 2 or "bias" in name or "norm" in name
                or ("pre_encode.conv" in name and n == 4) or "depthwise_conv.weight" in name)
    if f16 and not keep_f32:
        data, code = data.astype(np.float16), 1
    else:
        data, code = data.astype(np.float32), 0
    raw = name.encode()
    fout.write(struct.pack("<iii", n, len(raw), code))
    for d in reversed(data.shape):
        fout.write(struct.pack("<i", d))
    fout.write(raw)
    fout.write(np.ascontiguousarray(data).tobytes())


def write(out, f16):
    cfg = json.loads((FX / "tdt/config.json").read_text())
    enc = cfg["encoder_config"]
    sd = load_file(str(FX / "tdt/model.safetensors"))
    vocab = [p for p, _ in json.loads((FX / "tdt/tokenizer.json").read_text())["model"]["vocab"]]
    n_vocab = cfg["vocab_size"] - 1  # NeMo's decoder.vocab_size leaves the blank out
    assert len(vocab) == n_vocab
    durations = cfg["durations"]
    n_mels, n_fft = enc["num_mel_bins"], 512
    hp = [n_vocab, 5000, enc["hidden_size"], enc["num_attention_heads"], enc["num_hidden_layers"],
          n_mels, 1 if f16 else 0, n_fft, enc["subsampling_factor"], enc["subsampling_conv_channels"],
          enc["conv_kernel_size"], cfg["decoder_hidden_size"], cfg["num_decoder_layers"],
          len(durations), cfg["max_symbols_per_step"]]
    with open(out, "wb") as f:
        f.write(struct.pack("<I", 0x67676D6C))
        f.write(struct.pack("<15i", *hp))
        fb = slaney_mel(16000, n_fft, n_mels)
        f.write(struct.pack("<ii", *fb.shape))
        f.write(fb.tobytes())
        n = np.arange(400)
        window = (0.5 - 0.5 * np.cos(2 * np.pi * n / 399)).astype(np.float32)
        f.write(struct.pack("<i", 400))
        f.write(window.tobytes())
        for d in durations:
            f.write(struct.pack("<I", d))
        f.write(struct.pack("<i", len(vocab)))
        for p in vocab:
            b = p.encode()
            f.write(struct.pack("<i", len(b)))
            f.write(b)
        names = {nemo_name(k): k for k in sd}
        bias_ih = {}
        for name, hf in names.items():
            if name.startswith(LSTM + "bias_ih_l"):
                bias_ih[int(name.rsplit("_l", 1)[1])] = sd[hf].astype(np.float32)
        for name in sorted(names):
            hf = names[name]
            t = sd[hf]
            if name.startswith(LSTM + "bias_ih_l"):
                continue
            if t.ndim == 4 and "conv" in name:
                data = t
            else:
                data = np.squeeze(t)
            if "pre_encode.conv" in name and "bias" in name and data.ndim == 1:
                data = data.reshape(1, -1, 1, 1)
            if name.startswith(LSTM):
                if "bias_hh_l" in name:
                    layer = int(name.rsplit("_l", 1)[1])
                    data = data.astype(np.float32) + bias_ih[layer]
                    name = name.replace("bias_hh_l", "bias_h_l")
                h = data.shape[0] // 4
                data = np.concatenate([data[:h], data[h:2 * h], data[3 * h:], data[2 * h:3 * h]], axis=0)
            tensor(f, name, data, f16)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    import sys
    if "--f32" in sys.argv[1:]:
        write(FX / "tdt-wcpp-f32.bin", False)
    write(FX / "tdt-wcpp-f16.bin", True)
