#!/usr/bin/env python3
"""Check a `stapes transcribe --vad --word-timestamps -f verbose_json` run on the long-form file
against issue 3's bars, independently of the Rust test (crates/stapes/tests/whisper_longform_vad.rs).

Usage:
  python3 whisper_longform_vad_check.py --wav OUT.wav          # write the 190 s file (16-bit PCM)
  stapes transcribe -m whisper-tiny.en --device cpu --vad --word-timestamps --beam-size 1 \\
      --temperature 0 -f verbose_json OUT.wav > run.json
  python3 whisper_longform_vad_check.py MODEL run.json

The file is whisper_fw.py's long-form signal. Per clip occurrence: the words whose middle lies in
the clip's file span widened to the middle of the silences around it, their text against
faster-whisper float32's text of the clip alone (fw_decode.json; word edits after lower-casing and
dropping punctuation), the first word's start and last word's end against the clip's Silero speech
span (speech_bounds.json), and the segment start/end nearest those. Prints the misses of the bars
(> 1 word edit, words > 0.3 s, segments > 0.5 s) and the worst distances.
"""
import json
import re
import sys
import wave
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from whisper_fw import LONG_GAP, OUT, longform  # noqa: E402


def norm(s):
    out = []
    for w in s.split():
        w = re.sub(r"[^\w]", "", w.lower())
        if w:
            out.append(w)
    return out


def edits(a, b):
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a):
        cur = [i + 1] * (len(b) + 1)
        for j, y in enumerate(b):
            cur[j + 1] = min(prev[j] + (x != y), prev[j + 1] + 1, cur[j] + 1)
        prev = cur
    return prev[-1]


def write_wav(path):
    audio, _ = longform()
    pcm = (np.clip(audio, -1, 1) * 32767).round().astype("<i2")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm.tobytes())


def check(model, run):
    speech = json.loads((OUT / "speech_bounds.json").read_text())["clips"]
    ref = json.loads((OUT / "fw_decode.json").read_text())
    _, bounds = longform()
    segs = json.loads(Path(run).read_text())["segments"]
    words = [w for s in segs for w in (s.get("words") or [])]
    misses, worst = [], [0.0] * 4
    for i, (clip, a, e) in enumerate(bounds):
        lo = a - LONG_GAP / 2 if i else float("-inf")
        hi = e + LONG_GAP / 2 if i + 1 < len(bounds) else float("inf")
        mine = [w for w in words if lo <= (w["start"] + w["end"]) / 2 < hi]
        near = [s for s in segs if lo <= s["start"] < hi]
        s0, e0 = a + speech[clip][0], a + speech[clip][1]
        n = edits(norm("".join(w["word"] for w in mine)), norm(ref["models"][model]["clips"][clip]["greedy"]["text"]))
        if not mine or not near:
            misses.append(f"{clip} at {a:.2f}: nothing heard ({n} word edits)")
            continue
        d = [
            mine[0]["start"] - s0,
            mine[-1]["end"] - e0,
            min((s["start"] for s in near), key=lambda t: abs(t - s0)) - s0,
            min((s["end"] for s in near), key=lambda t: abs(t - e0)) - e0,
        ]
        worst = [max(x, abs(y)) for x, y in zip(worst, d)]
        if n > 1 or abs(d[0]) > 0.3 or abs(d[1]) > 0.3 or abs(d[2]) > 0.5 or abs(d[3]) > 0.5:
            misses.append(
                f"{clip} at {a:.2f}: {n} word edits, first word {d[0]:+.2f} s, last word {d[1]:+.2f} s, "
                f"segment start {d[2]:+.2f} s, end {d[3]:+.2f} s"
            )
    print(f"{model}: {len(segs)} segments, {len(words)} words, {len(misses)} of {len(bounds)} clips miss a bar")
    print("worst (clips heard): first word %.2f s, last word %.2f s, segment start %.2f s, end %.2f s" % tuple(worst))
    print("\n".join(misses))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--wav":
        write_wav(sys.argv[2])
    elif len(sys.argv) == 3:
        check(sys.argv[1], sys.argv[2])
    else:
        sys.exit(__doc__)
