#!/usr/bin/env python3
"""Speech boundaries of the Whisper test clips, the ground truth of the long-form timestamp test.

The clip files are not cut at speech: each starts with 0.2-0.35 s of room tone and several end
with 0.3-1.3 s of it (jfk: applause noise, beckett: a long tail). The "true clip boundaries" a word
or segment timestamp should hit are therefore where speech starts and ends inside each file, which
Silero VAD v6 finds independently of Whisper: onnxruntime runs `silero_vad_16k_op15.onnx` exactly
as the silero-vad 6.2.3 package does, and the package's own `get_speech_timestamps_from_probs`
(default parameters: threshold 0.5, speech_pad_ms 30) turns the probabilities into segments
(tools/reference/silero_ort.py holds the shared helpers). A clip's speech span is its first
segment's start to its last segment's end.

Needs onnxruntime, soundfile, faster-whisper (for `decode_audio`, as whisper_fw.py reads clips),
`scripts/fetch-models.sh silero-vad audio`, the silero-vad wheel in $STAPES_CACHE/downloads.
Writes crates/stapes-models/tests/fixtures/whisper/speech_bounds.json:
  {"clip": [speech_start_s, speech_end_s, clip_duration_s], ...}
"""
import glob
import json
import sys
from pathlib import Path

import onnxruntime as ort
from faster_whisper.audio import decode_audio

sys.path.insert(0, str(Path(__file__).resolve().parent))
import silero_ort  # noqa: E402
from whisper_fw import CLIPS, OUT  # noqa: E402


def main():
    wheel = sorted(glob.glob(str(silero_ort.CACHE / "downloads/silero_vad-6.2.3-*.whl")))[-1]
    utils = silero_ort.load_package_utils(wheel)
    opts = ort.SessionOptions()
    opts.inter_op_num_threads = 1
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(
        str(silero_ort.MODELS / "silero_vad_16k_op15.onnx"), sess_options=opts, providers=["CPUExecutionProvider"]
    )
    out = {
        "generator": f"silero-vad 6.2.3 (onnxruntime {ort.__version__}), get_speech_timestamps defaults",
        "clips": {},
    }
    for clip, path in CLIPS.items():
        a = decode_audio(str(path), sampling_rate=16000)
        probs = silero_ort.ort_probs(sess, a, 16000)
        segs = utils.get_speech_timestamps_from_probs(probs, sampling_rate=16000, audio_length_samples=len(a))
        assert segs, f"{clip}: no speech found"
        out["clips"][clip] = [segs[0]["start"] / 16000, segs[-1]["end"] / 16000, len(a) / 16000]
        print(clip, out["clips"][clip], file=sys.stderr)
    with open(OUT / "speech_bounds.json", "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
