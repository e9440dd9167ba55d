#!/usr/bin/env python3
"""faster-whisper outputs under non-default options (prompt construction paths), float32.

Writes crates/stapes-models/tests/fixtures/whisper/fw_options.json: for tiny.en and base on jfk,
greedy (temperature 0) segments with `without_timestamps`, `initial_prompt` and `prefix`; and
tiny.en on the long-form signal of whisper_fw.py with `condition_on_previous_text=True`.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import whisper_fw as fw  # noqa: E402
from faster_whisper import WhisperModel  # noqa: E402
from faster_whisper.audio import decode_audio  # noqa: E402

CASES = {
    "without_timestamps": dict(without_timestamps=True),
    "initial_prompt": dict(initial_prompt="President Kennedy's inaugural address."),
    "prefix": dict(prefix="And so, my fellow"),
}


def main():
    out = {"models": {}}
    jfk = decode_audio(str(fw.CLIPS["jfk"]), sampling_rate=16000)
    for name in fw.MODELS:
        model = WhisperModel(str(fw.CACHE / "models" / name), device="cpu", compute_type="float32", cpu_threads=2)
        per = {}
        for case, kw in CASES.items():
            opts = {**fw.COMMON, **kw}
            segs, _ = model.transcribe(jfk, beam_size=1, **opts)
            per[case] = [fw.seg_json(s) for s in segs]
            print(name, case, [s["text"] for s in per[case]], file=sys.stderr)
        if name == "whisper-tiny.en":
            long_audio, _ = fw.longform()
            opts = {**fw.COMMON, "condition_on_previous_text": True}
            segs, _ = model.transcribe(long_audio, beam_size=1, **opts)
            per["longform_conditioned"] = [fw.seg_json(s) for s in segs]
        out["models"][name] = per
    with open(fw.OUT / "fw_options.json", "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
