#!/usr/bin/env python3
"""Dump Silero VAD v6 reference outputs for the stapes parity tests.

Needs `pip install onnxruntime numpy soundfile` (tested with onnxruntime 1.32.0, numpy 2.4.6, soundfile 0.14.0) and
`scripts/fetch-models.sh silero-vad audio` (the ONNX files, Noise.wav, the LibriVox clips); the
silero-vad 6.2.3 wheel itself is read from $STAPES_CACHE/downloads (fetch-models leaves it there)
or any path given as the first argument.

Probabilities: onnxruntime (1 thread, CPU) runs the ONNX files exactly as the package's
`OnnxWrapper.__call__` does: state (2, 1, 128) zeros and a zero context at the start of a stream,
each window is `context ++ chunk` (context 64 samples at 16 kHz, 32 at 8 kHz, the last samples of
the previous model input), a short last chunk is zero padded (as `get_speech_timestamps` does).

Segments: the package's own `get_speech_timestamps_from_probs` (the function
`get_speech_timestamps` ends with), imported from the wheel's `utils_vad.py`. torch is not
installed here (the PyPI build pulls gigabytes of CUDA libraries), so a stub `torch` module is put
in `sys.modules` before the import; the timestamp code itself never touches torch (it works on a
list of floats). `get_speech_timestamps`' own preamble — decimation of a multiple of 16 kHz by
`audio[::step]`, 512/256-sample windows — is reproduced here and in the Rust API.

Streaming events: the package's `VADIterator` driven with a stand-in model that replays the
onnxruntime probabilities window by window.

Inputs (all int16 PCM WAV, converted as x/32768 like soundfile and torchaudio do):
  jfk        samples/jfk.wav (16 kHz)
  noise      alsa-utils Noise.wav (48 kHz): handed to the timestamp logic at 48 kHz, so the
             package's own `[::3]` decimation makes the 16 kHz model input
  lv-NNNN    the five pocketsphinx LibriVox clips (16 kHz)
  mix        jfk ++ 1 s of zeros ++ noise[::3] ++ lv-0870 ++ 0.5 s of zeros ++ lv-0880 (16 kHz)
8 kHz versions of each are made by plain decimation of the 16 kHz material (`x[::2]`; Noise:
`x48[::6]`), which the Rust test reproduces; there is no filtering on either side.

Writes crates/stapes-models/tests/fixtures/silero/silero_ort.json.
"""
import glob
import hashlib
import importlib.util
import json
import os
import sys
import types
import zipfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import soundfile as sf

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/stapes-models/tests/fixtures/silero/silero_ort.json"
CACHE = Path(os.environ.get("STAPES_CACHE", Path.home() / ".cache/stapes"))
MODELS = CACHE / "models/silero-vad"
LV = str(CACHE / "audio/librivox/sense_and_sensibility_01_austen_64kb-{}.wav")


def load_package_utils(wheel):
    """Import silero_vad/utils_vad.py from the wheel with a stand-in torch."""
    torch = types.ModuleType("torch")
    torch.Tensor = object
    torch.device = lambda *a, **k: None
    torch.no_grad = lambda: (lambda f: f)
    torch.is_tensor = lambda x: True
    torch.set_num_threads = lambda n: None
    sys.modules["torch"] = torch
    src = zipfile.ZipFile(wheel).read("silero_vad/utils_vad.py")
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "stapes_silero_utils_vad.py"
    tmp.write_bytes(src)
    spec = importlib.util.spec_from_file_location("silero_utils_vad", tmp)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def read_pcm16(path):
    x, sr = sf.read(str(path), dtype="int16", always_2d=False)
    assert x.ndim == 1, f"{path}: expected mono"
    return x.astype(np.float32) / 32768.0, sr


def ort_probs(sess, audio, sr):
    """Per-window probabilities, as OnnxWrapper.__call__ over get_speech_timestamps' loop."""
    win = 512 if sr == 16000 else 256
    ctx_len = 64 if sr == 16000 else 32
    state = np.zeros((2, 1, 128), dtype=np.float32)
    context = np.zeros((1, ctx_len), dtype=np.float32)
    probs = []
    for start in range(0, len(audio), win):
        chunk = audio[start:start + win]
        if len(chunk) < win:
            chunk = np.pad(chunk, (0, win - len(chunk)))
        x = np.concatenate([context, chunk[None, :].astype(np.float32)], axis=1)
        out, state = sess.run(None, {"input": x, "state": state, "sr": np.array(sr, dtype=np.int64)})
        context = x[:, -ctx_len:]
        probs.append(float(out.reshape(-1)[0]))
    return probs


class ReplayModel:
    """Stands in for the ONNX model inside VADIterator: replays precomputed probabilities."""

    def __init__(self, probs):
        self.probs = probs
        self.i = 0

    def reset_states(self):
        self.i = 0

    def __call__(self, x, sr):
        p = self.probs[self.i]
        self.i += 1
        return types.SimpleNamespace(item=lambda: p)


class Chunk:
    def __init__(self, n):
        self.n = n

    def dim(self):
        return 1

    def __len__(self):
        return self.n


def stream_events(utils, probs, sr, n_samples, **kw):
    win = 512 if sr == 16000 else 256
    it = utils.VADIterator(ReplayModel(probs), sampling_rate=sr, **kw)
    events = []
    for i, start in enumerate(range(0, n_samples, win)):
        ev = it(Chunk(win))
        if ev:
            kind, at = next(iter(ev.items()))
            events.append({"window": i, kind: at})
    return events


def short(v):
    """The shortest decimal that reads back as the same float32 (keeps the fixture small)."""
    return float(np.format_float_positional(np.float32(v), unique=True, trim="-"))


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def main():
    wheel = sys.argv[1] if len(sys.argv) > 1 else sorted(glob.glob(str(CACHE / "downloads/silero_vad-6.2.3-*.whl")))[-1]
    utils = load_package_utils(wheel)
    opts = ort.SessionOptions()
    opts.inter_op_num_threads = 1
    opts.intra_op_num_threads = 1
    sessions = {
        name: ort.InferenceSession(str(MODELS / name), sess_options=opts, providers=["CPUExecutionProvider"])
        for name in ("silero_vad_16k_op15.onnx", "silero_vad.onnx")
    }

    jfk, _ = read_pcm16(ROOT / "samples/jfk.wav")
    noise48, nsr = read_pcm16(CACHE / "audio/Noise.wav")
    assert nsr == 48000
    lv = {n: read_pcm16(LV.format(n))[0] for n in ("0870", "0880", "0890", "0920", "0930")}
    mix = np.concatenate([jfk, np.zeros(16000, np.float32), noise48[::3], lv["0870"], np.zeros(8000, np.float32), lv["0880"]])

    # (name, samples at the rate handed to the timestamp logic, that rate, recipe for the Rust side)
    inputs16 = [("jfk", jfk, 16000), ("noise", noise48, 48000)] + [(f"lv-{n}", a, 16000) for n, a in lv.items()] + [("mix", mix, 16000)]
    cases = []
    segment_params = [
        {},
        {"max_speech_duration_s": 3.0},
        {"threshold": 0.3, "min_silence_duration_ms": 300, "speech_pad_ms": 100},
    ]
    for name, audio, call_sr in inputs16:
        for model_sr in (16000, 8000):
            if model_sr == 16000:
                step = call_sr // 16000
                model_in, call_audio, call_rate, pre = audio[::step], audio, call_sr, 1
            else:
                pre = call_sr // 8000
                model_in = audio[::pre]
                call_audio, call_rate, step = model_in, 8000, 1
            models = ["silero_vad_16k_op15.onnx", "silero_vad.onnx"] if model_sr == 16000 else ["silero_vad.onnx"]
            runs = [ort_probs(sessions[m], model_in, model_sr) for m in models]
            # Both files carry the same 16 kHz weights; one list serves both Rust loads.
            assert all(r == runs[0] for r in runs), f"{name}: the ONNX files disagree at {model_sr} Hz"
            ref = runs[0]
            segs = []
            for p in segment_params:
                got = utils.get_speech_timestamps_from_probs(
                    ref, sampling_rate=model_sr, audio_length_samples=len(model_in), step=step, **p
                )
                segs.append({"params": p, "segments": [[s["start"], s["end"]] for s in got]})
            cases.append({
                "name": name,
                "model_rate": model_sr,
                "decimate_first": pre,
                "call_rate": call_rate,
                "n_samples": len(call_audio),
                "models": models,
                "probs": [short(p) for p in ref],
                "segments": segs,
                "stream_events": stream_events(utils, ref, model_sr, len(model_in)),
            })
            print(f"{name}@{model_sr}: {len(ref)} windows, mean p {np.mean(ref):.3f}, segments {segs[0]['segments']}")

    # Synthetic probability sequences: exercise the max-speech split and padding rules harder
    # than real speech does. Values are float32 so both sides compare the same numbers.
    rng = np.random.default_rng(6)
    synthetic = []
    for k in range(4):
        n = 1200
        levels = []
        while len(levels) < n:
            run = int(rng.integers(1, 60))
            hi = rng.random() < 0.5
            lo_v, hi_v = (0.55, 1.0) if hi else (0.0, 0.45)
            levels.extend(rng.uniform(lo_v, hi_v, run))
        probs = [short(v) for v in levels[:n]]
        for sr in (16000, 8000):
            for p in [
                {},
                {"max_speech_duration_s": 2.0},
                {"max_speech_duration_s": 1.5, "use_max_poss_sil_at_max_speech": False},
                {"threshold": 0.6, "neg_threshold": 0.4, "min_speech_duration_ms": 100, "min_silence_duration_ms": 50, "speech_pad_ms": 60},
                {"max_speech_duration_s": 1.0, "min_silence_at_max_speech": 40, "speech_pad_ms": 0},
            ]:
                n_samples = n * (512 if sr == 16000 else 256) - int(rng.integers(0, 200))
                got = utils.get_speech_timestamps_from_probs(probs, sampling_rate=sr, audio_length_samples=n_samples, **p)
                synthetic.append({
                    "seed_index": k,
                    "rate": sr,
                    "n_samples": n_samples,
                    "params": p,
                    "probs_index": k,
                    "segments": [[s["start"], s["end"]] for s in got],
                })
        synthetic.append({"probs_values": probs})

    prob_sets = [s["probs_values"] for s in synthetic if "probs_values" in s]
    synthetic = [s for s in synthetic if "probs_values" not in s]
    doc = {
        "generator": "tools/reference/silero_ort.py",
        "onnxruntime": ort.__version__,
        "silero_vad_wheel": Path(wheel).name,
        "model_sha256": {m: sha256(MODELS / m) for m in sessions},
        "cases": cases,
        "synthetic_probs": prob_sets,
        "synthetic": synthetic,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, separators=(",", ":")))
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
