#!/usr/bin/env python3
"""Dump FastConformer (Parakeet) reference fixtures for the stapes parity tests.

Runs with /tmp/audio-venv (torch 2.15 CPU, transformers 5.24.0, tokenizers 0.23). The design
brief names transformers 5.17; the Parakeet modelling code (encoder, CTC/RNNT/TDT heads, greedy
generation) is the same architecture in 5.24, which is what produced the committed fixtures.

What it writes under crates/stapes-models/tests/fixtures/fastconformer/:
  ctc/, rnnt/, tdt/   tiny random-weight `ParakeetForCTC` / `ParakeetForRNNT` / `ParakeetForTDT`
                      saved with `save_pretrained` (config.json + model.safetensors, weights stored
                      as float16 to keep the fixture small) and a tiny `tokenizer.json`
  inputs.safetensors  `features.<clip>`: (T, 80) log-mel features of each clip from transformers'
                      `ParakeetFeatureExtractor` (valid frames only), rounded to float16
  expected.safetensors `<model>.encoder.<clip>`: (T_enc, d) encoder output, float32
  expected.json       clip provenance, greedy ids, TDT/RNNT per-step tokens and durations,
                      decoded text, and the smallest top-1/top-2 logit margins of every decision

The weights are rounded to float16 *before* the reference runs, and the models run in float32 on
exactly the float16-rounded features the fixture stores, so the Rust side sees bit-identical
inputs. Random weights use fan-in scaled normals (not the HF init, whose std 0.02 makes every
output blank); biases are shifted so that blank and non-blank steps both occur.

Greedy references:
  CTC   `ParakeetForCTC.generate` (frame-wise argmax) -> collapse repeats, drop blank
  RNNT  `ParakeetForRNNT.generate` (label looping, `max_symbols_per_step`)
  TDT   `ParakeetForTDT.generate` (durations; a blank with duration 0 advances one frame)
Each is cross-checked against an independent step-by-step loop written here from NeMo's greedy
rules. Note on transformers' TDT generate: it takes the argmax over the whole joint output
(tokens + durations), so a step whose best duration logit beats every token logit crashes it
(IndexError); the joint bias of the duration head is lowered until that never happens. NeMo's
TDT loop also has a max-symbols guard transformers lacks; the script checks it never fires here.

A last case runs the full transformers pipeline (feature extractor on raw audio, unrounded) on
the jfk clip with the TDT model, for the end-to-end test that uses stapes' own front end.

Clips (16 kHz mono int16, first CLIP_SECONDS seconds):
  jfk       samples/jfk.wav (in the repo)
  beckett   $STAPES_CACHE/audio/beckett.wav
  lv0880    $STAPES_CACHE/audio/librivox/sense_and_sensibility_01_austen_64kb-0880.wav
"""
import copy
import json
import os
import wave
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    ParakeetCTCConfig,
    ParakeetFeatureExtractor,
    ParakeetForCTC,
    ParakeetForRNNT,
    ParakeetForTDT,
    ParakeetRNNTConfig,
    ParakeetTDTConfig,
)

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/stapes-models/tests/fixtures/fastconformer"
CACHE = Path(os.environ.get("STAPES_CACHE", Path.home() / ".cache/stapes"))
CLIP_SECONDS = 3.0
CLIPS = {
    "jfk": ROOT / "samples/jfk.wav",
    "beckett": CACHE / "audio/beckett.wav",
    "lv0880": CACHE / "audio/librivox/sense_and_sensibility_01_austen_64kb-0880.wav",
}
VOCAB = 48
BLANK = VOCAB - 1
ENCODER = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    subsampling_conv_channels=16,
    num_mel_bins=80,
    conv_kernel_size=9,
)
# Decisions closer than this are near-ties that float rounding could flip.
MIN_MARGIN = 2e-3

# SentencePiece-style pieces: "▁" marks a word start.
PIECES = ["<unk>"] + [
    "▁" + w for w in "the a and so my fel low ask not what you can do for ever try fail".split()
] + list("abcdefghijklmnopqrstuvwxyz") + ["'", ",", "."]
assert len(PIECES) == VOCAB - 1


def read_wav(path):
    with wave.open(str(path), "rb") as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    n = int(CLIP_SECONDS * 16000)
    return pcm[:n].astype(np.float32) / 32768.0


def tokenizer_json():
    tok = Tokenizer(models.Unigram([(p, -1.0 - 0.01 * i) for i, p in enumerate(PIECES)], 0))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.add_special_tokens(["<pad>"])  # id 47: CTC blank / pad, as Parakeet CTC tokenizers have
    assert tok.token_to_id("<pad>") == BLANK
    return tok


def randomize(model, seed, blank_bias, dur_bias=0.0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) * (1.5 / fan_in**0.5))
            elif name.endswith("norm.weight") or ".norm_" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif "bias_u" in name or "bias_v" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            else:
                # Small biases: large ones add a frame-independent part that swamps the speech.
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.2 * torch.randn(b.shape, generator=g))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))
        if hasattr(model, "ctc_head"):
            model.ctc_head.bias[BLANK] += blank_bias
        else:
            model.joint.head.bias[BLANK] += blank_bias
            model.joint.head.bias[VOCAB:] += dur_bias
        # Round to float16 so the saved file and the reference agree exactly.
        # (state-dict entries only: the non-persistent inv_freq buffer is recomputed at load)
        for p in model.state_dict().values():
            if p.dtype == torch.float32:
                p.copy_(p.half().float())
    return model.eval()


def check_reload(model, d):
    """The saved directory must reproduce the reference exactly."""
    cls = type(model)
    again = cls.from_pretrained(d, dtype=torch.float32).eval()
    ref = model.state_dict()
    for k, v in again.state_dict().items():
        assert torch.equal(v.float(), ref[k].float()), k
    for k, v in again.named_buffers():
        assert torch.equal(v, dict(model.named_buffers())[k]), k


def margin(v):
    top = torch.topk(v, 2).values
    return float(top[0] - top[1])


def ctc_reference(model, feats):
    enc = model.encoder(input_features=feats[None]).last_hidden_state[0]
    logits = model.ctc_head(enc[None])[0]
    frames = model.generate(input_features=feats[None])[0].tolist()
    assert frames == logits.argmax(-1).tolist()
    ids, prev = [], None
    for f in frames:
        if f != prev and f != BLANK:
            ids.append(f)
        prev = f
    m = min(margin(r) for r in logits)
    return enc, {"frames": frames, "ids": ids, "min_margin": m}


def transducer_reference(model, feats, tdt):
    """Step-by-step greedy written from NeMo's rules, then compared with generate()."""
    cfg = model.config
    enc = model.encoder(input_features=feats[None]).last_hidden_state
    proj = model.encoder_projector(enc)[0]
    T = proj.shape[0]
    dec = model.decoder
    n_layers = cfg.num_decoder_layers
    h = torch.zeros(n_layers, 1, cfg.decoder_hidden_size)
    c = torch.zeros_like(h)

    def run_decoder(tok, h, c):
        e = dec.embedding(torch.tensor([[tok]]))
        o, (h2, c2) = dec.lstm(e, (h, c))
        return dec.decoder_projector(o)[0, 0], h2, c2

    g, h, c = run_decoder(cfg.decoder_start_token_id, h, c)
    t, steps, durs, margins, at_frame, guard_fired = 0, [], [], [], 0, False
    while t < T and len(steps) < cfg.max_symbols_per_step * T - 1:
        logits = model.joint(decoder_hidden_states=g, encoder_hidden_states=proj[t])
        tok_logits = logits[:VOCAB]
        k = int(tok_logits.argmax())
        margins.append(margin(tok_logits))
        if tdt:
            dl = logits[VOCAB:]
            d = cfg.durations[int(dl.argmax())]
            margins.append(margin(dl))
            assert float(tok_logits.max()) > float(dl.max()) + MIN_MARGIN, "generate() would crash"
            if k == BLANK and d == 0:
                d = 1
            at_frame = at_frame + 1 if d == 0 else 0
            if at_frame >= cfg.max_symbols_per_step:
                guard_fired = True  # NeMo would force a frame here; transformers does not
        else:
            at_frame = 0 if k == BLANK else at_frame + 1
            forced = at_frame >= cfg.max_symbols_per_step
            d = 1 if (k == BLANK or forced) else 0
            if forced:
                at_frame = 0
        steps.append(k)
        durs.append(d)
        if k != BLANK:
            g, h, c = run_decoder(k, h, c)
        t += d
    assert not guard_fired, "TDT max-symbols guard would fire: pick another seed"
    out = model.generate(input_features=feats[None], return_dict_in_generate=True)
    gen_tokens = out.sequences[0].tolist()
    gen_durs = out.durations[0].tolist()
    assert gen_tokens == [cfg.decoder_start_token_id] + steps, (gen_tokens, steps)
    assert gen_durs == [0] + durs, (gen_durs, durs)
    ids = [k for k in steps if k != BLANK]
    # Frame of each step: durations summed before it (what transformers' decode uses).
    frames = list(np.cumsum([0] + durs[:-1]))
    return enc[0], {
        "steps": steps,
        "durations": durs,
        "ids": ids,
        "frames": [int(f) for f in frames],
        "min_margin": min(margins),
        "n_blank_steps": sum(1 for k in steps if k == BLANK),
    }


def save_model(model, name, tok):
    d = OUT / name
    d.mkdir(parents=True, exist_ok=True)
    # A copy: half() would also round the reference's non-persistent inv_freq buffer.
    copy.deepcopy(model).half().save_pretrained(d)
    tok.save(str(d / "tokenizer.json"))
    return d


def main():
    torch.set_grad_enabled(False)
    OUT.mkdir(parents=True, exist_ok=True)
    fe = ParakeetFeatureExtractor(feature_size=80)
    tok = tokenizer_json()
    audio, feats, clip_info = {}, {}, {}
    for name, path in CLIPS.items():
        x = read_wav(path)
        audio[name] = x
        f = fe(x, sampling_rate=16000, return_tensors="pt")
        n_valid = int(f.attention_mask[0].sum())
        feats[name] = f.input_features[0, :n_valid].half().float()
        clip_info[name] = {
            "source": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name),
            "samples": len(x),
            "frames": n_valid,
        }

    configs = {
        "ctc": (ParakeetForCTC, ParakeetCTCConfig(
            encoder_config=ENCODER, vocab_size=VOCAB, pad_token_id=BLANK)),
        "rnnt": (ParakeetForRNNT, ParakeetRNNTConfig(
            encoder_config=ENCODER, vocab_size=VOCAB, blank_token_id=BLANK, pad_token_id=BLANK,
            decoder_start_token_id=BLANK, decoder_hidden_size=32, num_decoder_layers=1,
            max_symbols_per_step=2)),
        "tdt": (ParakeetForTDT, ParakeetTDTConfig(
            encoder_config=ENCODER, vocab_size=VOCAB, blank_token_id=BLANK, pad_token_id=BLANK,
            decoder_start_token_id=BLANK, decoder_hidden_size=32, num_decoder_layers=2,
            max_symbols_per_step=10, durations=[0, 1, 2, 3, 4])),
    }
    biases = {"ctc": (1.0, 0.0), "rnnt": (2.0, 0.0), "tdt": (1.0, -1.0)}
    expected = {"clips": clip_info, "models": {}}
    tensors = {}
    for mname, (cls, cfg) in configs.items():
        for seed in range(100, 200):
            model = randomize(cls(cfg), seed, *biases[mname])
            try:
                results, encs = {}, {}
                for clip, f in feats.items():
                    if mname == "ctc":
                        enc, r = ctc_reference(model, f)
                    else:
                        enc, r = transducer_reference(model, f, mname == "tdt")
                    if r["min_margin"] < MIN_MARGIN:
                        raise AssertionError(f"near-tie {r['min_margin']}")
                    # The same output with transformers' length mask over the padded frame.
                    fm = fe(audio[clip], sampling_rate=16000, return_tensors="pt")
                    fm.input_features[0, : f.shape[0]] = f
                    masked = model.encoder(**fm).last_hidden_state[0, : enc.shape[0]]
                    assert torch.allclose(masked, enc, atol=1e-4), "masked run differs"
                    r["text"] = tok.decode(r["ids"], skip_special_tokens=True)
                    results[clip] = r
                    encs[clip] = enc
                break
            except AssertionError as e:
                print(f"{mname} seed {seed}: {e}")
        else:
            raise SystemExit(f"no usable seed for {mname}")
        print(mname, "seed", seed, {k: (len(v["ids"]), round(v["min_margin"], 4)) for k, v in results.items()})
        check_reload(model, save_model(model, mname, tok))
        expected["models"][mname] = {"seed": seed, "results": results}
        for clip, e in encs.items():
            tensors[f"{mname}.encoder.{clip}"] = e.contiguous()
        if mname == "tdt":
            # End to end from raw audio through transformers' own (unrounded) front end.
            fx = fe(audio["jfk"], sampling_rate=16000, return_tensors="pt")
            n_valid = int(fx.attention_mask[0].sum())
            _, r = transducer_reference(model, fx.input_features[0, :n_valid], True)
            r["text"] = tok.decode(r["ids"], skip_special_tokens=True)
            expected["models"]["tdt"]["end_to_end_jfk"] = r
            print("tdt e2e jfk", len(r["ids"]), r["min_margin"])

    save_file({f"features.{k}": v.half().contiguous() for k, v in feats.items()}, OUT / "inputs.safetensors")
    save_file(tensors, OUT / "expected.safetensors")
    expected["transformers"] = __import__("transformers").__version__
    expected["torch"] = torch.__version__
    (OUT / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
