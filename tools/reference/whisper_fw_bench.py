#!/usr/bin/env python3
"""Time faster-whisper on jfk (the peer numbers for the Whisper rows of the perf ledger).

Same work as `cargo test --release -p stapes-models --test whisper_bench -- --ignored`:
transcribe 11 s of speech from samples (feature extraction included, model load excluded),
temperature 0, no previous-text conditioning, no VAD; best of N runs after one warm-up.
"""
import os
import sys
import time
from pathlib import Path

from faster_whisper import WhisperModel
from faster_whisper.audio import decode_audio

CACHE = Path(os.environ.get("STAPES_CACHE", Path.home() / ".cache/stapes"))
JFK = Path(__file__).resolve().parents[2] / "samples/jfk.wav"
ITERS = int(os.environ.get("ITERS", "5"))

audio = decode_audio(str(JFK), sampling_rate=16000)
for name in sys.argv[1:] or ["whisper-tiny.en", "whisper-base"]:
    for ct in ("float32", "int8"):
        m = WhisperModel(str(CACHE / "models" / name), device="cpu", compute_type=ct, cpu_threads=2)
        for beam in (1, 5):
            def run():
                segs, _ = m.transcribe(audio, beam_size=beam, temperature=0.0, condition_on_previous_text=False)
                return "".join(s.text for s in segs)
            run()
            best = float("inf")
            for _ in range(ITERS):
                t = time.perf_counter()
                text = run()
                best = min(best, time.perf_counter() - t)
            print(f"faster-whisper {name} {ct} beam {beam}: {best * 1e3:.0f} ms — {text.strip()}", flush=True)
