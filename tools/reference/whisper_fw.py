#!/usr/bin/env python3
"""Dump faster-whisper / CTranslate2 reference outputs for the Whisper parity tests.

Needs `pip install faster-whisper` (tested with faster-whisper 1.2.1, ctranslate2 4.8.5) and the
weights fetched by `scripts/fetch-models.sh whisper-tiny.en whisper-base audio`.

Writes into crates/stapes-models/tests/fixtures/whisper/:
  fw_decode.json   per model and clip: greedy (beam 1, temperature 0) and beam-5 segments with
                   token ids, text, times, avg_logprob, no_speech_prob; base's language
                   probabilities on jfk; the options used.
  fw_encoder.safetensors   the log-mel of jfk as faster-whisper computes it (n_mels, frames) and
                   CTranslate2's float32 encoder output on it for both models (first 64 and last
                   16 of the 1500 positions, to stay small).

Everything is computed in float32 (compute_type="float32") so the f32 CPU lane can match ids.
"""
import json
import os
import struct
import sys
from pathlib import Path

import ctranslate2
import faster_whisper
import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.audio import decode_audio, pad_or_trim

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/stapes-models/tests/fixtures/whisper"
CACHE = Path(os.environ.get("STAPES_CACHE", Path.home() / ".cache/stapes"))
SHARED_AUDIO = ROOT.parent / "shared/audio"

CLIPS = {
    "jfk": SHARED_AUDIO / "jfk.wav",
    "beckett": CACHE / "audio/beckett.wav",
}
for n in ("0870", "0880", "0890", "0920", "0930"):
    CLIPS[f"librivox-{n}"] = CACHE / f"audio/librivox/sense_and_sensibility_01_austen_64kb-{n}.wav"

MODELS = ["whisper-tiny.en", "whisper-base"]

# The exact options of the acceptance runs (everything else at faster-whisper's defaults).
COMMON = dict(
    temperature=0.0,
    condition_on_previous_text=False,
    vad_filter=False,
    without_timestamps=False,
    initial_prompt=None,
)


def seg_json(s):
    return {
        "start": round(s.start, 4),
        "end": round(s.end, 4),
        "text": s.text,
        "tokens": list(s.tokens),
        "avg_logprob": s.avg_logprob,
        "no_speech_prob": s.no_speech_prob,
        "compression_ratio": s.compression_ratio,
        "temperature": s.temperature,
    }


def save_safetensors(path, tensors):
    """Minimal safetensors writer (f32 only), so the script needs no extra package."""
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr, dtype="<f4")
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    out = {
        "generator": f"faster-whisper {faster_whisper.__version__}, ctranslate2 {ctranslate2.__version__}",
        "options": {k: v for k, v in COMMON.items()},
        "models": {},
    }
    tensors = {}
    for name in MODELS:
        mdir = CACHE / "models" / name
        model = WhisperModel(str(mdir), device="cpu", compute_type="float32", cpu_threads=2)
        per_model = {"clips": {}}
        for clip, path in CLIPS.items():
            audio = decode_audio(str(path), sampling_rate=16000)
            entry = {}
            for label, beam in (("greedy", 1), ("beam5", 5)):
                segs, info = model.transcribe(audio, beam_size=beam, **COMMON)
                segs = [seg_json(s) for s in segs]
                entry[label] = {
                    "language": info.language,
                    "text": "".join(s["text"] for s in segs).strip(),
                    "segments": segs,
                }
            per_model["clips"][clip] = entry
            print(name, clip, entry["greedy"]["text"], file=sys.stderr)

        audio = decode_audio(str(CLIPS["jfk"]), sampling_rate=16000)
        mel = model.feature_extractor(audio)  # (n_mels, frames)
        if name == MODELS[0]:
            tensors["jfk.mel"] = mel.astype(np.float32)
        seg = pad_or_trim(mel[:, : mel.shape[-1] - 1])
        enc = model.model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(seg[None])))
        enc = np.array(enc)[0]  # (1500, d)
        tensors[f"{name}.enc_head"] = enc[:64]
        tensors[f"{name}.enc_tail"] = enc[-16:]

        if model.model.is_multilingual:
            res = model.model.detect_language(
                ctranslate2.StorageView.from_array(np.ascontiguousarray(np.array(enc)[None]))
            )[0]
            per_model["jfk_language_probs"] = [[tok[2:-2], p] for tok, p in res[:10]]
        out["models"][name] = per_model

    with open(OUT / "fw_decode.json", "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    save_safetensors(OUT / "fw_encoder.safetensors", tensors)


if __name__ == "__main__":
    main()
