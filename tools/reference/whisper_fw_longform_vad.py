#!/usr/bin/env python3
"""faster-whisper's own VAD route on the long-form file, for the `--vad` long-form test's report.

Builds the 190 s file of whisper_fw.py (the 7 clips three times, each after 2.5 s of silence,
2.5 s at the end), runs faster-whisper 1.2.1 float32 greedy with vad_filter=True (its default
VadOptions) and word timestamps, and records every segment and word. Each word goes to the clip
whose file span, widened to the middle of the silences around it, holds the word's middle; per
clip occurrence the script records the text, the first word's start and the last word's end, and
those against the clip's speech span (speech_bounds.json, Silero on the clip alone).

Writes crates/stapes-models/tests/fixtures/whisper/fw_longform_vad.json.
"""
import json
import sys
from pathlib import Path

import faster_whisper
from faster_whisper import WhisperModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from whisper_fw import CACHE, COMMON, LONG_GAP, MODELS, OUT, longform  # noqa: E402


def main():
    audio, bounds = longform()
    speech = json.loads((OUT / "speech_bounds.json").read_text())["clips"]
    common = {**COMMON, "vad_filter": True}
    out = {
        "generator": f"faster-whisper {faster_whisper.__version__}",
        "options": {**common, "beam_size": 1, "word_timestamps": True},
        "models": {},
    }
    for name in MODELS:
        model = WhisperModel(str(CACHE / "models" / name), device="cpu", compute_type="float32", cpu_threads=2)
        segs, _ = model.transcribe(audio, beam_size=1, word_timestamps=True, **common)
        segs = list(segs)
        words = [w for s in segs for w in s.words]
        clips = []
        for i, (clip, a, b) in enumerate(bounds):
            hi = b + LONG_GAP / 2 if i + 1 < len(bounds) else float("inf")
            lo = a - LONG_GAP / 2 if i > 0 else float("-inf")
            mine = [w for w in words if lo <= (w.start + w.end) / 2 < hi]
            s0, e0 = a + speech[clip][0], a + speech[clip][1]
            row = {"clip": clip, "start": a, "speech": [s0, e0], "text": "".join(w.word for w in mine).strip()}
            if mine:
                row["first_word"] = round(mine[0].start - s0, 3)
                row["last_word"] = round(mine[-1].end - e0, 3)
            clips.append(row)
            print(name, clip, f"{a:7.2f}", row.get("first_word"), row.get("last_word"), row["text"], file=sys.stderr)
        out["models"][name] = {
            "segments": [{"start": s.start, "end": s.end, "text": s.text} for s in segs],
            "clips": clips,
        }
    with open(OUT / "fw_longform_vad.json", "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
