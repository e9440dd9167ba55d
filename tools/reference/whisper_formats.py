#!/usr/bin/env python3
"""Dumps tokenizer expectations for stapes' Whisper format tests from the peers' own code.

Reference: faster-whisper's Tokenizer over HF `tokenizers` (tokenizer.json of the real
checkpoints fetched by scripts/fetch-models.sh), the CTranslate2 config.json, and OpenAI's own
tokenizer (tiktoken over the vocabularies in the openai-whisper sdist; what a checkpoint without
tokenizer.json, e.g. a whisper.cpp file, must reproduce) and its mel_filters.npz.

    pip install faster-whisper==1.2.1 tokenizers tiktoken numpy
    python tools/reference/whisper_formats.py [--cache ~/.cache/stapes]

Writes crates/stapes-models/tests/fixtures/whisper-formats/tokenizer_<model>.json and
mel_filters.json (the non-zero entries of OpenAI's 80- and 128-bin filterbanks).
"""
import argparse
import json
import os
import importlib.util
import random
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

import tokenizers
from faster_whisper.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/stapes-models/tests/fixtures/whisper-formats"

SENTENCES = [
    " And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.",
    " Ever tried. Ever failed. No matter. Try again. Fail again. Fail better.",
    " I'll say it's 1,234.5 dollars -- don't you think?  Yes!!",
    " Grüße aus München, wir schließen um 18:00 Uhr.",
    " ¿Dónde está la biblioteca? Está aquí.",
    " 日本語のテキストです。",
    " Привет, как дела?",
    " ♪♪ (music) [DAVID] Hey there 🎉",
    "leading no space\n\nnew  lines\tand tabs   ",
]


OPENAI_WHISPER = "openai-whisper==20250625"


def openai_whisper_src(dest):
    """OpenAI's sdist (tokenizer.py + assets), fetched with pip and unpacked into dest."""
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                    OPENAI_WHISPER, "-d", dest], check=True)
    sdist = next(Path(dest).glob("openai_whisper-*.tar.gz"))
    with tarfile.open(sdist) as t:
        t.extractall(dest, filter="data")
    return next(Path(dest).glob("openai_whisper-*/whisper"))


def load_openai_tokenizer_module(whisper_dir):
    # whisper/__init__.py imports torch; tokenizer.py alone needs only tiktoken.
    spec = importlib.util.spec_from_file_location("openai_whisper_tokenizer", whisper_dir / "tokenizer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default=os.environ.get("STAPES_CACHE", os.path.expanduser("~/.cache/stapes")))
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp()
    wdir = openai_whisper_src(tmp)
    oa = load_openai_tokenizer_module(wdir)
    mel = np.load(wdir / "assets" / "mel_filters.npz")
    mel_out = {}
    for key in ["mel_80", "mel_128"]:
        m = mel[key].astype(np.float32)
        nz = [[int(r), int(c), float(m[r, c])] for r, c in zip(*np.nonzero(m))]
        mel_out[key] = {"shape": list(m.shape), "nonzero": nz}
    (OUT / "mel_filters.json").write_text(json.dumps(mel_out) + "\n")
    print("wrote", OUT / "mel_filters.json")
    for name in ["whisper-tiny.en", "whisper-base", "whisper-base-newconv"]:
        d = Path(args.cache) / "models" / name
        hf = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
        if (d / "vocabulary.json").is_file():
            vocab_size = len(json.load(open(d / "vocabulary.json", encoding="utf-8")))
        else:
            vocab_size = sum(1 for _ in open(d / "vocabulary.txt", encoding="utf-8"))
        multilingual = vocab_size >= 51865
        tok = Tokenizer(hf, multilingual, task="transcribe", language="en")
        ct2_config = json.load(open(d / "config.json"))
        rng = random.Random(1234)
        decode_cases = []
        for s in SENTENCES:
            ids = tok.encode(s)
            decode_cases.append({"ids": ids, "text": tok.decode(ids), "with_ts": tok.decode_with_timestamps(ids)})
        for _ in range(6):
            ids = [rng.randrange(0, tok.eot) for _ in range(rng.randrange(1, 12))]
            decode_cases.append({"ids": ids, "text": tok.decode(ids), "with_ts": tok.decode_with_timestamps(ids)})
        ts = tok.timestamp_begin
        mixed = [tok.sot] + ([tok.language, tok.task] if multilingual else []) + [ts] + tok.encode(" Hello world.") + [ts + 50, ts + 51] + tok.encode(" Again") + [ts + 1500, tok.eot]
        decode_cases.append({"ids": mixed, "text": tok.decode(mixed), "with_ts": tok.decode_with_timestamps(mixed)})
        oa_tok = oa.get_tokenizer(multilingual, language="en", task="transcribe")
        texts = SENTENCES + [" ", " -", " '", "hello", "  two spaces", "x's y'll z'VE"]
        encode_cases = [{"text": s, "ids": tok.encode(s), "openai_ids": oa_tok.encode(s)} for s in texts]
        words = []
        for lang, s in [("en", SENTENCES[0]), ("en", SENTENCES[2]), ("ja", SENTENCES[5]), ("en", SENTENCES[7])]:
            t = Tokenizer(hf, multilingual, task="transcribe", language=lang) if multilingual else tok
            if not multilingual and lang != "en":
                continue
            ids = t.encode(s) + [t.eot]
            w, wt = t.split_to_word_tokens(ids)
            words.append({"language": lang, "ids": ids, "words": w, "word_tokens": wt})
        special = {
            "eot": tok.eot, "sot": tok.sot, "sot_prev": tok.sot_prev, "sot_lm": tok.sot_lm,
            "translate": tok.translate, "transcribe": tok.transcribe, "no_timestamps": tok.no_timestamps,
            "no_speech": tok.no_speech, "timestamp_begin": tok.timestamp_begin,
        }
        langs = []
        if multilingual:
            from faster_whisper.tokenizer import _LANGUAGE_CODES
            for code in _LANGUAGE_CODES:
                i = hf.token_to_id(f"<|{code}|>")
                if i is not None:
                    langs.append([code, i])
        out = {
            "model": name,
            "vocab_size": vocab_size,
            "multilingual": multilingual,
            "special": special,
            "languages": langs,
            "non_speech_tokens": list(tok.non_speech_tokens),
            "ct2_suppress_ids": ct2_config["suppress_ids"],
            "ct2_suppress_ids_begin": ct2_config["suppress_ids_begin"],
            "token_strs": {str(i): hf.id_to_token(i) for i in [0, 11, 220, 262, 1169, 50000, tok.eot, tok.sot]},
            "decode": decode_cases,
            "encode": encode_cases,
            "words": words,
        }
        path = OUT / f"tokenizer_{name.replace('whisper-', '')}.json"
        path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print("wrote", path)


if __name__ == "__main__":
    main()
