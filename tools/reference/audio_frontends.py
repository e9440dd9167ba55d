#!/usr/bin/env python3
"""Dump the front-end reference numbers the stapes-audio tests compare against.

Every expected value comes from the peers' own code:
  * Whisper: faster-whisper's FeatureExtractor (pip faster-whisper==1.2.1) and OpenAI's
    mel_filters.npz (sdist openai-whisper==20250625, whisper/assets/).
  * NeMo / Parakeet: transformers' ParakeetFeatureExtractor (pip transformers, torch), plus a
    float64 numpy transcription of the same formulas, so the test can tell float32 noise in the
    reference apart from a real deviation.
  * GigaAM v2: gigaam.preprocess.FeatureExtractor from the PyPI wheel gigaam==0.1.0 (torchaudio
    MelSpectrogram, 64 mels, n_fft 400, center=True, log(clamp(1e-9, 1e9))).
  * GigaAM v3: the same class as at GitHub HEAD of salute-developers/GigaAM, configured as the v3
    checkpoints are (n_fft = win = 320, hop 160, center=False); the v3 checkpoints carry the
    window and mel matrix as bfloat16 buffers, so they are rounded to bfloat16 here as loading
    such a checkpoint does.

Set-up (a throwaway venv is fine):
  pip install numpy faster-whisper==1.2.1 transformers torch torchaudio safetensors
  pip download --no-deps -d /tmp/ref gigaam==0.1.0
  pip download --no-deps --no-binary :all: -d /tmp/ref openai-whisper==20250625
Run from the repository root:
  python tools/reference/audio_frontends.py --downloads /tmp/ref
Writes crates/stapes-audio/tests/fixtures/{whisper,nemo,gigaam}_ref.safetensors.
"""

import argparse
import importlib.util
import io
import sys
import tarfile
import wave
import zipfile
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import save_file

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/stapes-audio/tests/fixtures"


def read_wav_s16(path):
    with wave.open(str(path), "rb") as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1 and w.getframerate() == 16000
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return pcm.astype(np.float32) / 32768.0


def f32(a):
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32))


def whisper(jfk, downloads):
    from faster_whisper.feature_extractor import FeatureExtractor

    sdist = next(Path(downloads).glob("openai_whisper-20250625.tar.gz"))
    with tarfile.open(sdist) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("whisper/assets/mel_filters.npz"))
        npz = np.load(io.BytesIO(tf.extractfile(member).read()))
    out = {"mel_80": f32(npz["mel_80"]), "mel_128": f32(npz["mel_128"])}
    # Full clip, faster-whisper's default padding of 160 samples.
    out["jfk_80_pad160"] = f32(FeatureExtractor(feature_size=80)(jfk, padding=160).T)
    # 128 bins (large-v3) on the first 4 s with no padding.
    out["jfk4s_128_pad0"] = f32(FeatureExtractor(feature_size=128)(jfk[:64000], padding=0).T)
    # A short odd-length clip with extra zero padding: the reflection then mirrors zeros.
    out["jfk_head_80_pad3200"] = f32(FeatureExtractor(feature_size=80)(jfk[:16001], padding=3200).T)
    return out


def nemo_f64(x, n_mels, n_fft=512, win=400, hop=160, preemph=0.97):
    """NeMo's FilterbankFeatures in float64: the truth the float32 references approximate."""
    from transformers.audio_utils import mel_filter_bank

    x = np.asarray(x, dtype=np.float64)
    y = np.concatenate([x[:1], x[1:] - preemph * x[:-1]])
    padded = np.pad(y, (n_fft // 2, n_fft // 2))
    n_frames = 1 + (len(padded) - n_fft) // hop
    window = np.zeros(n_fft)
    off = (n_fft - win) // 2
    window[off : off + win] = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(win) / (win - 1))
    frames = np.stack([padded[i * hop : i * hop + n_fft] * window for i in range(n_frames)])
    power = np.abs(np.fft.rfft(frames, axis=-1)) ** 2
    fb = mel_filter_bank(
        num_frequency_bins=n_fft // 2 + 1,
        num_mel_filters=n_mels,
        min_frequency=0.0,
        max_frequency=8000.0,
        sampling_rate=16000,
        norm="slaney",
        mel_scale="slaney",
        dtype=np.float64,
    )
    logmel = np.log(power @ fb + 2.0**-24)
    valid = len(x) // hop
    logmel = logmel[:valid]
    mean = logmel.mean(axis=0)
    std = np.sqrt(((logmel - mean) ** 2).sum(axis=0) / (valid - 1))
    return (logmel - mean) / (std + 1e-5)


def nemo(jfk):
    from transformers import ParakeetFeatureExtractor

    out = {}
    for name, x, n_mels in [("jfk_80", jfk, 80), ("jfk3s_128", jfk[:48000], 128)]:
        fe = ParakeetFeatureExtractor(feature_size=n_mels)
        r = fe(x, sampling_rate=16000, return_tensors="np", return_attention_mask=True)
        valid = int(r["attention_mask"][0].sum())
        hf = r["input_features"][0][:valid]
        truth = nemo_f64(x, n_mels)
        assert truth.shape == hf.shape, (truth.shape, hf.shape)
        print(f"nemo {name}: transformers(f32) vs f64 port: max abs {np.abs(hf - truth).max():.3e}, "
              f"mean abs {np.abs(hf - truth).mean():.3e}")
        out[name] = f32(hf)
        if n_mels == 128:  # one float64 truth is enough to calibrate the bar; keep fixtures small
            out[name + "_f64port"] = f32(truth)
    return out


def load_module_from_wheel(wheel, inner, name):
    with zipfile.ZipFile(wheel) as z:
        src = z.read(inner).decode()
    spec = importlib.util.spec_from_loader(name, loader=None)
    mod = importlib.util.module_from_spec(spec)
    exec(compile(src, f"{wheel}!{inner}", "exec"), mod.__dict__)
    return mod


def gigaam(jfk, downloads):
    import torchaudio
    from torch import nn

    wheel = next(Path(downloads).glob("gigaam-0.1.0-*.whl"))
    pre = load_module_from_wheel(wheel, "gigaam/preprocess.py", "gigaam_preprocess")
    out = {}
    fe = pre.FeatureExtractor(16000, 64)
    x = torch.from_numpy(jfk[:80000])[None]
    feats, lens = fe(x, torch.tensor([x.shape[1]]))
    assert feats.shape[-1] == int(lens[0])
    out["v2_jfk5s"] = f32(feats[0].T.numpy())
    # The same module run in float64: the truth the float32 reference approximates.
    fe64 = pre.FeatureExtractor(16000, 64).double()
    truth = fe64(x.double(), torch.tensor([x.shape[1]]))[0][0].T.numpy()
    d = np.abs(out["v2_jfk5s"] - truth)
    print(f"gigaam v2: package(f32) vs float64: max abs {d.max():.3e}, mean abs {d.mean():.3e}")
    out["v2_jfk5s_f64"] = f32(truth)

    # v3: GitHub HEAD's FeatureExtractor with n_fft=win=320, center=False is exactly this module
    # stack; the checkpoint's bfloat16 buffers replace the float32 ones.
    mel = torchaudio.transforms.MelSpectrogram(
        sample_rate=16000, n_mels=64, win_length=320, hop_length=160, n_fft=320, center=False
    )
    mel.spectrogram.window = mel.spectrogram.window.bfloat16().float()
    mel.mel_scale.fb = mel.mel_scale.fb.bfloat16().float()
    x3 = torch.from_numpy(jfk[:48000])[None]
    v3 = torch.log(mel(x3).clamp_(1e-9, 1e9))
    assert v3.shape[-1] == (48000 - 320) // 160 + 1
    out["v3_jfk3s"] = f32(v3[0].T.numpy())
    v3_64 = torch.log(mel.double()(x3.double()).clamp_(1e-9, 1e9))[0].T.numpy()
    d = np.abs(out["v3_jfk3s"] - v3_64)
    print(f"gigaam v3: torchaudio(f32) vs float64: max abs {d.max():.3e}, mean abs {d.mean():.3e}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--downloads", required=True, help="folder with the gigaam wheel and whisper sdist")
    args = ap.parse_args()
    torch.set_num_threads(1)
    jfk = read_wav_s16(ROOT / "samples/jfk.wav")
    OUT.mkdir(parents=True, exist_ok=True)
    for name, tensors in [
        ("whisper_ref", whisper(jfk, args.downloads)),
        ("nemo_ref", nemo(jfk)),
        ("gigaam_ref", gigaam(jfk, args.downloads)),
    ]:
        path = OUT / f"{name}.safetensors"
        save_file(tensors, str(path))
        print(path.relative_to(ROOT), {k: v.shape for k, v in tensors.items()})


if __name__ == "__main__":
    sys.exit(main())
