#!/usr/bin/env python3
"""A GigaAM checkpoint whose vocabulary is a SentencePiece model (the layout of the v3 `e2e`
models: `decoding.vocabulary` None, `decoding.model_path` naming `<name>_tokenizer.model`), for the
stapes test of the tokenizer path.

Run after tools/reference/gigaam_ckpt.py, with the same environment:

    /tmp/tv/bin/python tools/reference/gigaam_e2e_tokenizer.py --gigaam-src /tmp/giga

It reads fixtures/gigaam/v3_rnnt.ckpt and writes beside it:
  v3_e2e_rnnt.ckpt               the same weights; cfg.decoding = RNNTGreedyDecoding with
                                 vocabulary None and model_path
                                 /root/.cache/gigaam/v3_e2e_rnnt_tokenizer.model (where the gigaam
                                 package caches it; a loader looks beside the checkpoint when that
                                 path is absent), model_name v3_e2e_rnnt
  v3_e2e_rnnt_tokenizer.model    a SentencePiece unigram model of 33 pieces (so the head's 34
                                 classes are the pieces and blank), trained here on a few English
                                 sentences (lower case, no punctuation) with `sentencepiece`
  expected_e2e.json              per clip: the ids and text gigaam's own RNNTGreedyDecoding gives
                                 with that tokenizer (Tokenizer(model_path) -> SentencePiece
                                 decode) on the clip's stored v3 features (inputs.safetensors)
"""
import argparse
import io
import json
import sys
from pathlib import Path

import sentencepiece as spm
import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]
FX = ROOT / "crates/stapes-models/tests/fixtures/gigaam"
CACHED = "/root/.cache/gigaam/v3_e2e_rnnt_tokenizer.model"
TEXT = [
    "And so my fellow Americans ask not what your country can do for you",
    "ask what you can do for your country",
    "Ever tried. Ever failed. No matter. Try again. Fail again. Fail better.",
    "The family of Dashwood had long been settled in Sussex.",
    "Their estate was large, and their residence was at Norland Park.",
    "go forward ten meters, then turn left and stop",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gigaam-src", required=True)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.gigaam_src).resolve()))
    from gigaam.model import GigaAMASR

    model_bytes = io.BytesIO()
    spm.SentencePieceTrainer.train(
        # lower case without punctuation: few enough characters for 33 pieces
        sentence_iterator=iter(["".join(c for c in t.lower() if c.isalpha() or c == " ")
                                for t in TEXT] * 20),
        model_writer=model_bytes,
        vocab_size=33,
        model_type="unigram",
        character_coverage=1.0,
        hard_vocab_limit=True,
    )
    tok_path = FX / "v3_e2e_rnnt_tokenizer.model"
    tok_path.write_bytes(model_bytes.getvalue())
    sp = spm.SentencePieceProcessor(model_file=str(tok_path))
    assert len(sp) == 33, len(sp)

    ck = torch.load(FX / "v3_rnnt.ckpt", map_location="cpu", weights_only=False)
    cfg = ck["cfg"]
    cfg.decoding = {"_target_": "gigaam.decoding.RNNTGreedyDecoding", "vocabulary": None,
                    "model_path": CACHED}
    cfg.model_name = "v3_e2e_rnnt"
    torch.save({"cfg": cfg, "state_dict": ck["state_dict"]}, FX / "v3_e2e_rnnt.ckpt")

    # gigaam's own loading and decoding, with the tokenizer where this machine has it
    ck2 = torch.load(FX / "v3_e2e_rnnt.ckpt", map_location="cpu", weights_only=False)
    ck2["cfg"].decoding.model_path = str(tok_path)
    model = GigaAMASR(ck2["cfg"]).eval()
    model.load_state_dict(ck2["state_dict"])
    feats = load_file(str(FX / "inputs.safetensors"))
    out = {"tokenizer": {"pieces": [sp.id_to_piece(i) for i in range(len(sp))]}, "clips": {}}
    with torch.inference_mode():
        for clip in ("jfk", "beckett", "lv0880"):
            f = feats[f"features.v3.{clip}"].float().T[None].contiguous()
            enc, n = model.encoder(f, torch.tensor([f.shape[2]]))
            text, ids, frames = model.decoding.decode(model.head, enc, n)[0]
            assert text == sp.decode(ids)
            out["clips"][clip] = {"ids": ids, "frames": frames, "text": text}
            print(clip, repr(text))
    (FX / "expected_e2e.json").write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main()
