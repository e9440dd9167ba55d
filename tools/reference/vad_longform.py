#!/usr/bin/env python3
"""Reference speech spans for the 10-minute VAD long-form test (crates/stapes/tests/vad_longform.rs).

Builds the test's file sample for sample: 4 rounds of the 7 clips (jfk, beckett, the five
pocketsphinx LibriVox clips), each after 12 s of digital silence, and after every second clip 2 s
of silence and 6 s of alsa-utils Noise.wav (48 kHz, decimated `[::3]`, cycled, halved), then
silence up to 600 s. All inputs are int16 PCM read as x/32768 (as stapes' WAV decoder does).

On that file it runs the `silero-vad` 6.2.3 package's `get_speech_timestamps` logic with its
default parameters over onnxruntime probabilities (the machinery of tools/reference/silero_ort.py)
and records, for each clip, where the speech it holds starts and ends: a clip file opens and
closes on up to a second of room tone, so its first sample is not where its text starts, and
what the VAD heard before (noise, silence) moves the onset by up to 0.2 s. The test checks the
transcript's segment bounds against these spans, and a checksum that its file is this one.

Needs what silero_ort.py needs (onnxruntime, numpy, soundfile, the silero-vad wheel in
$STAPES_CACHE/downloads, `scripts/fetch-models.sh all`).

Writes crates/stapes/tests/fixtures/vad_longform.json.
"""
import glob
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))
import silero_ort  # noqa: E402  (the stub-torch import of the package's timestamp code)

ROOT = silero_ort.ROOT
CACHE = silero_ort.CACHE
OUT = ROOT / "crates/stapes/tests/fixtures/vad_longform.json"
SR = 16000
CLIPS = ["jfk", "beckett"] + [f"librivox-{n}" for n in ("0870", "0880", "0890", "0920", "0930")]


def clip_path(name):
    if name == "jfk":
        return ROOT / "samples/jfk.wav"
    if name == "beckett":
        return CACHE / "audio/beckett.wav"
    return Path(silero_ort.LV.format(name.split("-")[1]))


def build():
    clips = []
    for name in CLIPS:
        a, sr = silero_ort.read_pcm16(clip_path(name))
        assert sr == SR, f"{name}: {sr} Hz"
        clips.append((name, a))
    n48, sr = silero_ort.read_pcm16(CACHE / "audio/Noise.wav")
    assert sr == 48000
    noise = np.resize(n48[::3], 6 * SR) * np.float32(0.5)
    silence = np.zeros(12 * SR, np.float32)
    parts, spans, noises, at = [], [], [], 0
    for _ in range(4):
        for i, (name, a) in enumerate(clips):
            parts += [silence, a]
            spans.append((name, at + len(silence), at + len(silence) + len(a)))
            at += len(silence) + len(a)
            if i % 2 == 1:
                parts += [silence[: 2 * SR], noise]
                noises.append((at + 2 * SR, at + 2 * SR + len(noise)))
                at += 2 * SR + len(noise)
    audio = np.concatenate(parts).astype(np.float32)
    audio = np.concatenate([audio, np.zeros(max(0, 600 * SR - len(audio)), np.float32)])
    return audio, spans, noises


def main():
    wheel = sys.argv[1] if len(sys.argv) > 1 else sorted(glob.glob(str(CACHE / "downloads/silero_vad-6.2.3-*.whl")))[-1]
    utils = silero_ort.load_package_utils(wheel)
    opts = ort.SessionOptions()
    opts.inter_op_num_threads = 1
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(
        str(silero_ort.MODELS / "silero_vad.onnx"), sess_options=opts, providers=["CPUExecutionProvider"]
    )
    audio, spans, noises = build()
    probs = silero_ort.ort_probs(sess, audio, SR)
    segs = utils.get_speech_timestamps_from_probs(probs, sampling_rate=SR, audio_length_samples=len(audio), step=1)
    clips = []
    for name, a, b in spans:
        inside = [s for s in segs if s["end"] > a and s["start"] < b]
        assert inside, f"{name} at {a / SR:.2f} s: the reference VAD hears no speech"
        clips.append({
            "name": name,
            "start": a / SR,
            "end": b / SR,
            "speech_start": min(s["start"] for s in inside) / SR,
            "speech_end": max(s["end"] for s in inside) / SR,
        })
    stray = [s for s in segs if not any(s["end"] > a and s["start"] < b for _, a, b in spans)]
    assert not stray, f"the reference VAD hears speech outside the clips: {stray}"
    x = audio.astype(np.float64)
    doc = {
        "generator": "tools/reference/vad_longform.py",
        "package": Path(wheel).name,
        "onnxruntime": ort.__version__,
        "samples": len(audio),
        "sum": float(x.sum()),
        "sum_squares": float((x * x).sum()),
        "noise": [[a / SR, b / SR] for a, b in noises],
        "clips": clips,
        "speech_samples": [[s["start"], s["end"]] for s in segs],
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes): {len(segs)} speech segments")
    for c in clips:
        print(f"{c['name']:>14} {c['start']:8.3f} speech {c['speech_start'] - c['start']:+.3f} .. {c['speech_end'] - c['end']:+.3f}")


if __name__ == "__main__":
    main()
