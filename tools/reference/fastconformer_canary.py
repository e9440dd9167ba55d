#!/usr/bin/env python3
"""Dump a tiny Canary (AED: FastConformer encoder + Transformer decoder) reference fixture.

Runs with torch 2.15 and transformers 5.17 (the versions are written to the fixture's json),
sentencepiece 0.2.

Tokenizer. A real SentencePiece BPE model is trained here (`tokenizer.model`, vocab 64) with
Canary's special tokens as user-defined pieces in canary-1b-v2's order (`<unk>` 0,
`<|nospeech|>` 1, `<pad>` 2, `<|endoftext|>` 3, `<|startoftranscript|>` 4, `<|pnc|>` 5,
`<|nopnc|>` 6, `<|startofcontext|>` 7, itn / timestamp / diarize pairs, emotions, languages,
task tokens), then converted to `tokenizer.json` exactly as transformers'
`convert_canary_nemo_to_hf.py` does (`CanaryConverter` + `TokenizersBackend.save_pretrained`).

Prompts. NeMo's canary2 prompt format (nemo/collections/common/prompts/canary2.py):
  <|startofcontext|> [context] <|startoftranscript|> <|emo:undefined|> <|src|> <|tgt|>
  <|pnc|>|<|nopnc|> <|itn|>|<|noitn|> <|timestamp|>|<|notimestamp|> <|diarize|>|<|nodiarize|>
The ids of a few requests are resolved here by piece name through `sentencepiece` and written
to expected_canary.json (`prompts`), for the Rust prompt builder's test.

Model. A random-weight `CanaryForConditionalGeneration` (encoder as the Parakeet fixtures: d 64,
2 layers; decoder d 64, 2 layers, 4 heads of 16, 32 positions, vocab 64) saved with
`save_pretrained` (float16 weights; the reference runs in float32 on the same rounded values,
proj_out tied to the embedding as Canary checkpoints are). Decoder matrices are drawn at
3/sqrt(fan-in) (the encoder's at 1.5) and the decoder's final norm has gain 2 (LOGIT_GAIN): at
the 1.5/sqrt(fan-in) everywhere of the first version, a random decoder repeated one piece for
every clip ("53 53 53 ..."), which tests little.
The output bias of the control tokens is lowered (end-of-text's raised a little) so decoding
yields text pieces and some hypotheses end early.

Expected outputs (expected_canary.json, expected_canary.safetensors):
  results.<clip>.generated   greedy `generate` ids (max_new_tokens 10) after the en->en pnc
                             prompt, on the three clips' features (inputs.safetensors)
  results.<clip>.beam4       `generate(num_beams=4)` ids (length_penalty 1.0, early_stopping
                             False: transformers' defaults), max_new_tokens 10, and the score
  end_to_end_jfk             the first 3 s of samples/jfk.wav through transformers' own
                             feature extractor, greedy and beam 4, to the end of the positions
                             (max_new_tokens = 32 - prompt), and the decoded text
Seeds are searched until: every greedy decision (three clips and end_to_end_jfk) has a
top-1/top-2 logit margin of at least MIN_MARGIN (0.05, as the Parakeet fixtures); every greedy
output is varied (at least 5 tokens, 4 distinct, no piece more than 4 times in a row; 10 for
the 23 end-to-end steps) and the clips' outputs differ; beam 4 differs from greedy somewhere and
end-of-text occurs somewhere; only text pieces and end-of-text are emitted; the emulated f16
logit error (see `lanes`) is at most a quarter of the smallest margin and q8's at most
Q8_MAX_ERROR (3.0: these decoder weights make q8 move logits by 1-2.5). Beam results are checked to be the same with the model run in
float64 (no near-ties in the accumulated scores).
"""
import copy
import itertools
import json
import os
import wave
from pathlib import Path

import numpy as np
import sentencepiece as spm
import torch
from safetensors.torch import load_file, save_file
from transformers import CanaryConfig, CanaryForConditionalGeneration, ParakeetFeatureExtractor, TokenizersBackend
from transformers.convert_slow_tokenizer import CanaryConverter

ROOT = Path(__file__).resolve().parents[2]
# FC_FIXTURES: write (and read) the fixtures elsewhere, e.g. a scratch copy
FX = Path(os.environ.get("FC_FIXTURES", ROOT / "crates/stapes-models/tests/fixtures/fastconformer"))
VOCAB = 64
POSITIONS = 32
MIN_MARGIN = 0.05
# Decoder matrices at WEIGHT_SCALE/sqrt(fan-in), the encoder's at ENCODER_SCALE (larger ones
# there blow up the lanes' rounding through its layers: q8 moved logits by ~8); logits scaled by
# LOGIT_GAIN (final norm). At 2.0 and no gain no seed of 100 gave varied outputs.
WEIGHT_SCALE = 3.0
ENCODER_SCALE = 1.5
LOGIT_GAIN = 2.0
# the largest logit change q8's emulated arithmetic may make along the greedy steps: these larger
# decoder weights move logits by 1-2.5 in q8 (the q8 ids rule then compares only the steps whose
# margin exceeds twice that)
Q8_MAX_ERROR = 3.0
SPECIALS = [
    "<|nospeech|>", "<pad>", "<|endoftext|>", "<|startoftranscript|>", "<|pnc|>", "<|nopnc|>",
    "<|startofcontext|>", "<|itn|>", "<|noitn|>", "<|timestamp|>", "<|notimestamp|>", "<|diarize|>",
    "<|nodiarize|>", "<|emo:undefined|>", "<|emo:neutral|>", "<|en|>", "<|de|>", "<|fr|>", "<|es|>",
    "<|transcribe|>", "<|translate|>",
]
TEXT = """and so my fellow americans ask not what your country can do for you ask what you can do
for your country the family of dashwood had long been settled in sussex their estate was large
and their residence was at norland park in the centre of their property where for many
generations they had lived in so respectable a manner as to engage the general good opinion of
their surrounding acquaintance"""


def train_tokenizer(out: Path) -> spm.SentencePieceProcessor:
    text = out.with_suffix(".txt")
    text.write_text("\n".join(l.strip() for l in TEXT.splitlines()) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(out.with_suffix("")), model_type="bpe",
        vocab_size=VOCAB, user_defined_symbols=SPECIALS, unk_id=0, bos_id=-1, eos_id=-1,
        pad_id=-1, character_coverage=1.0, byte_fallback=False, minloglevel=2,
        hard_vocab_limit=True, normalization_rule_name="identity")
    text.unlink()
    out.with_suffix(".vocab").unlink()
    sp = spm.SentencePieceProcessor(model_file=str(out))
    assert sp.get_piece_size() == VOCAB
    for i, s in enumerate(SPECIALS):
        assert sp.piece_to_id(s) == i + 1, s
    return sp


def prompt_ids(sp, src, tgt, pnc=True, itn=False, timestamps=False, diarize=False):
    names = ["<|startofcontext|>", "<|startoftranscript|>", "<|emo:undefined|>", f"<|{src}|>",
             f"<|{tgt}|>", "<|pnc|>" if pnc else "<|nopnc|>", "<|itn|>" if itn else "<|noitn|>",
             "<|timestamp|>" if timestamps else "<|notimestamp|>",
             "<|diarize|>" if diarize else "<|nodiarize|>"]
    ids = [sp.piece_to_id(n) for n in names]
    assert 0 not in ids
    return ids


def randomize(model, g, control_ids):
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            scale = ENCODER_SCALE if name.startswith("model.encoder.") else WEIGHT_SCALE
            p.copy_(torch.randn(p.shape, generator=g) * (scale / p[0].numel() ** 0.5))
        elif "norm" in name and name.endswith("weight"):
            p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
        elif "bias_u" in name or "bias_v" in name:
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
        else:
            p.copy_(0.05 * torch.randn(p.shape, generator=g))
    for name, b in model.named_buffers():
        if name.endswith("running_mean"):
            b.copy_(0.2 * torch.randn(b.shape, generator=g))
        elif name.endswith("running_var"):
            b.copy_(0.5 + torch.rand(b.shape, generator=g))
    # Tied embeddings make a random decoder echo its input token; louder attention / MLP
    # outputs let the audio steer the residual stream.
    for layer in model.model.decoder.layers:
        for lin in (layer.self_attn.o_proj, layer.encoder_attn.o_proj, layer.mlp.fc2):
            lin.weight.mul_(4.0)
    final = model.model.decoder.norm
    final.weight.mul_(LOGIT_GAIN)
    final.bias.mul_(LOGIT_GAIN)
    model.proj_out.bias[control_ids] -= 8.0
    model.proj_out.bias[3] += 4.0  # some hypotheses end before the length limit
    for t in model.state_dict().values():
        if t.dtype == torch.float32:
            t.copy_(t.half().float())


def varied(ids, max_run=4):
    """At least 5 tokens, 4 of them distinct (end-of-text counts), none more than `max_run` times
    in a row."""
    run = max((len(list(g)) for _, g in itertools.groupby(ids)), default=0)
    return len(ids) >= 5 and len(set(ids)) >= 4 and run <= max_run


def lane_errors(model, feats, prompt, gens):
    """Per clip: the top-1/top-2 margins (f32) of the greedy steps `gens[clip]`, and how far the
    CUDA home's f16 and q8 arithmetic move the logits along those decisions (teacher forced),
    emulated as fastconformer_hf.py does for Parakeet (f16: GEMM inputs rounded to float16; q8:
    per-row int8 weights re-laid from the 32-blocks and per-row int8 activations)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("fastconformer_hf", Path(__file__).with_name("fastconformer_hf.py"))
    hf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hf)
    emulated = {lane: hf.emulated(model, lane) for lane in ("f16", "q8")}
    out = {}
    for clip, f in feats.items():
        dec_in = torch.tensor([prompt + gens[clip][:-1]])

        def logits(m):
            return m(input_features=f[None], decoder_input_ids=dec_in).logits[0, len(prompt) - 1:]

        want = logits(model)
        top = torch.topk(want, 2, dim=-1).values
        out[clip] = {
            "margins": [round(float(m), 4) for m in top[:, 0] - top[:, 1]],
            "lane_logit_error": {lane: float((logits(m) - want).abs().max()) for lane, m in emulated.items()},
        }
    errors = {lane: max(r["lane_logit_error"][lane] for r in out.values()) for lane in ("f16", "q8")}
    return out, errors


def greedy(model, feats, prompt, n):
    out = model.generate(input_features=feats[None], decoder_input_ids=torch.tensor([prompt]),
                         max_new_tokens=n, do_sample=False, num_beams=1, output_scores=True,
                         return_dict_in_generate=True)
    margin = min(float(torch.topk(s[0], 2).values[0] - torch.topk(s[0], 2).values[1]) for s in out.scores)
    return out.sequences[0, len(prompt):].tolist(), margin


def beam(model, feats, prompt, n, dtype=torch.float32):
    out = model.to(dtype).generate(input_features=feats[None].to(dtype), decoder_input_ids=torch.tensor([prompt]),
                                   max_new_tokens=n, do_sample=False, num_beams=4, output_scores=True,
                                   return_dict_in_generate=True)
    model.float()
    return out.sequences[0, len(prompt):].tolist(), float(out.sequences_scores[0])


def main():
    torch.set_grad_enabled(False)
    d = FX / "canary"
    d.mkdir(exist_ok=True)
    sp = train_tokenizer(d / "tokenizer.model")
    prompt = prompt_ids(sp, "en", "en")
    # <unk> and every control token but end-of-text are made unlikely (bias -8).
    control = [i for i in range(0, len(SPECIALS) + 1) if i != 3]
    enc = json.loads((FX / "tdt/config.json").read_text())["encoder_config"]
    cfg = CanaryConfig(
        encoder_config=enc,
        decoder_config=dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=4, head_dim=16, intermediate_size=128,
                            max_position_embeddings=POSITIONS, pad_token_id=2, eos_token_id=3, bos_token_id=4),
        vocab_size=VOCAB, pad_token_id=2, eos_token_id=3, bos_token_id=4, decoder_start_token_id=7,
    )
    feats = {k.split(".")[1]: v.float() for k, v in load_file(FX / "inputs.safetensors").items()}
    with wave.open(str(ROOT / "samples/jfk.wav"), "rb") as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")[:48000].astype(np.float32) / 32768.0
    fx = ParakeetFeatureExtractor(feature_size=80)(pcm, sampling_rate=16000, return_tensors="pt")
    e2e_feats = fx.input_features[0, : int(fx.attention_mask[0].sum())]
    e2e_new = POSITIONS - len(prompt)
    # FC_SEEDS=a,b: search seeds a..b (several searches can split the range)
    first, last = map(int, os.environ.get("FC_SEEDS", "600,6000").split(","))
    for seed in range(first, last):
        g = torch.Generator().manual_seed(seed)
        model = CanaryForConditionalGeneration(cfg).eval()
        randomize(model, g, control)
        # the cheap conditions first: greedy on the clips, then end to end
        greedy_ids, worst = {}, 1e9
        for clip, f in feats.items():
            greedy_ids[clip], m = greedy(model, f, prompt, 10)
            worst = min(worst, m)
        if (worst < MIN_MARGIN or not all(varied(v) for v in greedy_ids.values())
                or len({tuple(v) for v in greedy_ids.values()}) != len(greedy_ids)):
            continue
        e_ids, e_margin = greedy(model, e2e_feats, prompt, e2e_new)
        # a random decoder tends to settle into one piece over 23 steps: longer runs allowed
        if e_margin < MIN_MARGIN or not varied(e_ids, 10):
            print(f"seed {seed}: end to end margin {e_margin:.4f}, {e_ids}")
            continue
        results, encs = {}, {}
        for clip, f in feats.items():
            b_ids, b_score = beam(model, f, prompt, 10)
            results[clip] = {"generated": greedy_ids[clip], "beam4": b_ids, "beam4_score": b_score}
            encs[f"canary.encoder.{clip}"] = model.model.encoder(input_features=f[None]).last_hidden_state[0].contiguous()
        eb_ids, eb_score = beam(model, e2e_feats, prompt, e2e_new)
        beam_differs = any(r["beam4"] != r["generated"] for r in results.values()) or eb_ids != e_ids
        eos_somewhere = any(3 in r["beam4"] + r["generated"] for r in results.values()) or 3 in e_ids + eb_ids
        texts_only = all(i == 3 or i > len(SPECIALS)
                         for i in sum((r["beam4"] + r["generated"] for r in results.values()), e_ids + eb_ids))
        ok = beam_differs and eos_somewhere and texts_only
        if ok:
            # Beam results must not hinge on float32 rounding.
            ok = all(beam(model, f.double(), prompt, 10, torch.float64)[0] == results[c]["beam4"]
                     for c, f in feats.items())
            ok = ok and beam(model, e2e_feats.double(), prompt, e2e_new, torch.float64)[0] == eb_ids
        if ok:
            # f16 ids must be exact (margins >= 4x its logit error); q8 must keep something to
            # compare (its rule stops at the first margin under 2x its error)
            _, lane_err = lane_errors(model, feats, prompt, greedy_ids)
            if lane_err["f16"] * 4 <= worst and lane_err["q8"] <= Q8_MAX_ERROR:
                break
            print(f"seed {seed}: lane errors {lane_err}, margin {worst:.4f}")
            continue
        print(f"seed {seed}: beam differs {beam_differs}, eos {eos_somewhere}, text pieces only "
              f"{texts_only}, or beam not stable in f64")
    else:
        raise SystemExit("no seed satisfied the fixture conditions")
    print("seed", seed, "margin", worst, json.dumps(results))
    copy.deepcopy(model).half().save_pretrained(d)
    again = CanaryForConditionalGeneration.from_pretrained(d, dtype=torch.float32).eval()
    assert greedy(again, feats["jfk"], prompt, 10)[0] == results["jfk"]["generated"], "saved model differs"
    # tokenizer.json as transformers' Canary conversion writes it.
    tok = TokenizersBackend(tokenizer_object=CanaryConverter(str(d / "tokenizer.model")).converted(),
                            clean_up_tokenization_spaces=False, bos_token="<|startoftranscript|>",
                            eos_token="<|endoftext|>", pad_token="<pad>", unk_token="<unk>")
    tok.save_pretrained(d)
    text = tok.decode([i for i in e_ids if i != 3], skip_special_tokens=True)
    beam_text = tok.decode([i for i in eb_ids if i != 3], skip_special_tokens=True)
    assert text == sp.decode([i for i in e_ids if i > len(SPECIALS)]), (text, sp.decode(e_ids))
    results["end_to_end_jfk"] = {"samples": 48000, "generated": e_ids, "text": text, "min_margin": e_margin,
                                 "beam4": eb_ids, "beam4_text": beam_text, "beam4_score": eb_score,
                                 "max_new_tokens": e2e_new}
    prompts = [
        {"source": "en", "target": "en", "pnc": True, "ids": prompt},
        {"source": "en", "target": "de", "pnc": False, "ids": prompt_ids(sp, "en", "de", pnc=False)},
        {"source": "fr", "target": "en", "pnc": True, "itn": True, "timestamps": True, "diarize": True,
         "ids": prompt_ids(sp, "fr", "en", True, True, True, True)},
    ]
    save_file(encs, FX / "expected_canary.safetensors")
    (FX / "expected_canary.json").write_text(json.dumps(
        {"transformers": __import__("transformers").__version__, "sentencepiece": spm.__version__,
         "seed": seed, "prompt": prompt, "prompts": prompts, "max_new_tokens": 10, "eos": 3,
         "min_margin": worst, "results": results}, indent=1) + "\n")


def lid():
    """`python fastconformer_canary.py lid`: on the saved fixture, the two greedy ids after NeMo's
    canary2 `user_partial` prompt (<|startofcontext|><|startoftranscript|>: the model predicts the
    emotion, then the language token), per clip, written to expected_canary_lid.json (this random
    model names no language; the ids still must match), with the ids of a few prompts in NeMo's
    first (canary-1b) prompt format resolved by name through sentencepiece."""
    torch.set_grad_enabled(False)
    d = FX / "canary"
    sp = spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model"))
    partial = [sp.piece_to_id("<|startofcontext|>"), sp.piece_to_id("<|startoftranscript|>")]
    model = CanaryForConditionalGeneration.from_pretrained(d, dtype=torch.float32).eval()
    feats = {k.split(".")[1]: v.float() for k, v in load_file(FX / "inputs.safetensors").items()}
    out, worst = {}, 1e9
    for clip, f in feats.items():
        ids, m = greedy(model, f, partial, 2)
        out[clip] = ids
        worst = min(worst, m)
    assert worst >= MIN_MARGIN, worst
    # NeMo's first Canary prompt format (prompts/canary.py, canary-1b):
    # <|startoftranscript|> <|src|> <|transcribe|>|<|translate|> <|tgt|> <|pnc|>|<|nopnc|>
    canary1 = []
    for src, tgt, pnc in (("en", "en", True), ("en", "de", False), ("fr", "en", True)):
        names = ["<|startoftranscript|>", f"<|{src}|>", "<|transcribe|>" if src == tgt else "<|translate|>",
                 f"<|{tgt}|>", "<|pnc|>" if pnc else "<|nopnc|>"]
        canary1.append({"source": src, "target": tgt, "pnc": pnc, "ids": [sp.piece_to_id(n) for n in names]})
    (FX / "expected_canary_lid.json").write_text(json.dumps(
        {"transformers": __import__("transformers").__version__, "prompt": partial,
         "min_margin": worst, "ids": out, "canary1_prompts": canary1}, indent=1) + "\n")


def lanes():
    """`python fastconformer_canary.py lanes`: on the saved fixture, each clip's greedy per-step
    top-1/top-2 margins (f32) and how far the CUDA home's f16 and q8 arithmetic move the logits
    along those decisions (teacher forced), emulated as fastconformer_hf.py does for Parakeet
    (f16: GEMM inputs rounded to float16; q8: per-row int8 weights re-laid from the 32-blocks and
    per-row int8 activations), written to expected_canary_lanes.json for the CUDA ids rules."""
    torch.set_grad_enabled(False)
    exp = json.loads((FX / "expected_canary.json").read_text())
    prompt, max_new = exp["prompt"], exp["max_new_tokens"]
    model = CanaryForConditionalGeneration.from_pretrained(FX / "canary", dtype=torch.float32).eval()
    feats = {k.split(".")[1]: v.float() for k, v in load_file(FX / "inputs.safetensors").items()}
    gens = {}
    for clip, f in feats.items():
        gens[clip], _ = greedy(model, f, prompt, max_new)
        assert gens[clip] == exp["results"][clip]["generated"], clip
    out, errors = lane_errors(model, feats, prompt, gens)
    print(errors, {c: min(r["margins"]) for c, r in out.items()})
    (FX / "expected_canary_lanes.json").write_text(json.dumps(
        {"transformers": __import__("transformers").__version__, "lane_logit_error": errors,
         "results": out}, indent=1) + "\n")


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["lid"]:
        lid()
    elif sys.argv[1:] == ["lanes"]:
        lanes()
    else:
        main()
