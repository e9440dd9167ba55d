#!/usr/bin/env python3
"""Does faster-whisper's own int8 keep its float32 text on the Whisper test clips?

The q8 lane's acceptance asks for "the same text as float32" on every clip. This script measures
what faster-whisper 1.2.1 (CTranslate2 4.8.5) itself delivers with its int8 compute types: for
each model and clip it runs greedy decoding (the options of whisper_fw.py, beam 1) with
compute_type float32, int8 (int8 GEMMs, float32 elsewhere on CPU) and int8_float32 (the same on
CPU; named explicitly), and records the text and token ids of each, and whether int8's text equals
float32's.

Writes crates/stapes-models/tests/fixtures/whisper/fw_int8.json:
  {"generator": ..., "models": {model: {clip: {compute_type: {"text", "ids"}}}},
   "summary": {model: {compute_type: {"same_text": n, "same_ids": n, "clips": n, "differ": [clip]}}}}
"""
import json
import sys
from pathlib import Path

import ctranslate2
import faster_whisper
from faster_whisper import WhisperModel
from faster_whisper.audio import decode_audio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from whisper_fw import CACHE, CLIPS, COMMON, MODELS, OUT  # noqa: E402

TYPES = ["float32", "int8", "int8_float32"]


def main():
    out = {
        "generator": f"faster-whisper {faster_whisper.__version__}, ctranslate2 {ctranslate2.__version__}",
        "options": {**COMMON, "beam_size": 1},
        "models": {},
        "summary": {},
    }
    audio = {c: decode_audio(str(p), sampling_rate=16000) for c, p in CLIPS.items()}
    for name in MODELS:
        per = {c: {} for c in CLIPS}
        for ct in TYPES:
            model = WhisperModel(str(CACHE / "models" / name), device="cpu", compute_type=ct, cpu_threads=2)
            for clip, a in audio.items():
                segs, _ = model.transcribe(a, beam_size=1, **COMMON)
                segs = list(segs)
                per[clip][ct] = {
                    "text": "".join(s.text for s in segs).strip(),
                    "ids": [t for s in segs for t in s.tokens],
                }
                print(name, ct, clip, per[clip][ct]["text"], file=sys.stderr)
        out["models"][name] = per
        summ = {}
        for ct in TYPES[1:]:
            differ = [c for c in CLIPS if per[c][ct]["text"] != per[c]["float32"]["text"]]
            summ[ct] = {
                "clips": len(CLIPS),
                "same_text": len(CLIPS) - len(differ),
                "same_ids": sum(per[c][ct]["ids"] == per[c]["float32"]["ids"] for c in CLIPS),
                "differ": differ,
            }
        out["summary"][name] = summ
    with open(OUT / "fw_int8.json", "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    print(json.dumps(out["summary"], indent=1))


if __name__ == "__main__":
    main()
