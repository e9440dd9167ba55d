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
SAMPLES = ROOT / "samples"

CLIPS = {
    "jfk": SAMPLES / "jfk.wav",
    "beckett": CACHE / "audio/beckett.wav",
}
for n in ("0870", "0880", "0890", "0920", "0930"):
    CLIPS[f"librivox-{n}"] = CACHE / f"audio/librivox/sense_and_sensibility_01_austen_64kb-{n}.wav"

MODELS = ["whisper-tiny.en", "whisper-base"]

# Long-form input: the clips above in order, three times, each preceded by LONG_GAP s of silence,
# LONG_GAP s of silence at the end (about 190 s). The Rust test builds the same signal.
LONG_GAP = 2.5
LONG_REPEAT = 3

# espeak-ng sentences for language detection and translation (written to $STAPES_CACHE/audio).
ESPEAK = {
    "de": "Guten Morgen. Heute ist das Wetter sehr schön, und wir gehen zusammen in den Park.",
    "es": "Buenos días. Hoy hace muy buen tiempo y vamos juntos al parque.",
}

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


def word_json(w):
    return {"start": w.start, "end": w.end, "word": w.word, "probability": w.probability}


def longform():
    parts, bounds, t = [], [], 0.0
    gap = np.zeros(int(LONG_GAP * 16000), dtype=np.float32)
    for _ in range(LONG_REPEAT):
        for clip, path in CLIPS.items():
            a = decode_audio(str(path), sampling_rate=16000)
            parts.append(gap)
            t += len(gap) / 16000
            bounds.append([clip, t, t + len(a) / 16000])
            parts.append(a)
            t += len(a) / 16000
    parts.append(gap)
    return np.concatenate(parts), bounds


def espeak_clips():
    import subprocess
    import tempfile
    out = {}
    for lang, text in ESPEAK.items():
        # Committed beside the fixtures so the test hears exactly the audio the reference heard.
        dst = OUT / f"espeak-{lang}.wav"
        if not dst.exists():
            with tempfile.TemporaryDirectory() as tmp:
                raw = Path(tmp) / "raw.wav"
                subprocess.run(["espeak-ng", "-v", lang, "-w", str(raw), text], check=True)
                subprocess.run(["sox", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(dst)], check=True)
        out[lang] = dst
    return out


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
                if info.all_language_probs and clip == "jfk" and label == "greedy":
                    # transcribe's own detection (first 30 s of features, all frames)
                    per_model["jfk_language_probs"] = [[c, p] for c, p in info.all_language_probs[:10]]
                entry[label] = {
                    "language": info.language,
                    "text": "".join(s["text"] for s in segs).strip(),
                    "segments": segs,
                }
            per_model["clips"][clip] = entry
            print(name, clip, entry["greedy"]["text"], file=sys.stderr)

        audio = decode_audio(str(CLIPS["jfk"]), sampling_rate=16000)
        segs, _ = model.transcribe(audio, beam_size=1, word_timestamps=True, **COMMON)
        per_model["jfk_words"] = [
            {**seg_json(x), "words": [word_json(w) for w in x.words]} for x in segs
        ]

        long_audio, bounds = longform()
        out["longform_bounds"] = bounds
        for label, words in (("longform", False), ("longform_words", True)):
            segs, _ = model.transcribe(long_audio, beam_size=1, word_timestamps=words, **COMMON)
            per_model[label] = [
                {**seg_json(x), "words": [word_json(w) for w in x.words] if words else None}
                for x in segs
            ]

        if model.model.is_multilingual:
            for lang, path in espeak_clips().items():
                a = decode_audio(str(path), sampling_rate=16000)
                for task in ("transcribe", "translate"):
                    segs, info = model.transcribe(a, beam_size=5, task=task, **COMMON)
                    per_model[f"espeak-{lang}-{task}"] = {
                        "language": info.language,
                        "language_probability": info.language_probability,
                        "text": "".join(x.text for x in segs).strip(),
                        "segments": [seg_json(x) for x in segs],
                    }

        mel = model.feature_extractor(audio)  # (n_mels, frames)
        if name == MODELS[0]:
            tensors["jfk.mel"] = mel.astype(np.float32)
        seg = pad_or_trim(mel[:, : mel.shape[-1] - 1])
        enc = model.model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(seg[None])))
        enc = np.array(enc)[0]  # (1500, d)
        tensors[f"{name}.enc_head"] = enc[:64]
        tensors[f"{name}.enc_tail"] = enc[-16:]

        out["models"][name] = per_model

    with open(OUT / "fw_decode.json", "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    save_safetensors(OUT / "fw_encoder.safetensors", tensors)


if __name__ == "__main__":
    main()
