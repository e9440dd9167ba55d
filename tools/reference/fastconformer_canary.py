#!/usr/bin/env python3
"""Dump a tiny Canary (AED: FastConformer encoder + Transformer decoder) reference fixture.

Runs with /tmp/audio-venv (torch 2.15 CPU, transformers 5.24.0; the brief names 5.17, same
architecture). A random-weight `CanaryForConditionalGeneration` (encoder as the Parakeet
fixtures: d 64, 2 layers; decoder d 64, 2 layers, 4 heads of 16, vocab 48) is saved with
`save_pretrained` (float16 weights; the reference runs in float32 on the same rounded values,
proj_out tied to the embedding as Canary checkpoints are) under
crates/stapes-models/tests/fixtures/fastconformer/canary/, then `generate` (greedy,
`max_new_tokens` 10) runs on the fixture's three clips (inputs.safetensors from
fastconformer_hf.py) after a fixed prompt of decoder ids (the multitask prompt tokens are only
ids to the model). The end-of-text bias is lowered so decoding runs to max_new_tokens; the
smallest top-1/top-2 logit margin over all steps is recorded and must exceed 2e-3.

Writes canary/{config.json, generation_config.json, model.safetensors, tokenizer.json (the
Parakeet fixtures' tiny tokenizer)}, expected_canary.json
(prompt, generated ids, margins) and adds `canary.encoder.<clip>` to nothing: the encoder output
is dumped to expected_canary.safetensors.
"""
import copy
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import CanaryConfig, CanaryForConditionalGeneration

ROOT = Path(__file__).resolve().parents[2]
FX = ROOT / "crates/stapes-models/tests/fixtures/fastconformer"
VOCAB = 48
EOS = 3
PROMPT = [7, 4, 10, 11, 12, 13, 5]
MIN_MARGIN = 2e-3


def main():
    torch.set_grad_enabled(False)
    enc = json.loads((FX / "tdt/config.json").read_text())["encoder_config"]
    cfg = CanaryConfig(
        encoder_config=enc,
        decoder_config=dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=4, head_dim=16, intermediate_size=128,
                            max_position_embeddings=64, pad_token_id=2, eos_token_id=EOS, bos_token_id=4),
        vocab_size=VOCAB, pad_token_id=2, eos_token_id=EOS, bos_token_id=4, decoder_start_token_id=7,
    )
    feats = {k.split(".")[1]: v.float() for k, v in load_file(FX / "inputs.safetensors").items()}
    for seed in range(300, 400):
        g = torch.Generator().manual_seed(seed)
        model = CanaryForConditionalGeneration(cfg).eval()
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * (1.5 / p[0].numel() ** 0.5))
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
        model.proj_out.bias[EOS] -= 4.0
        for t in model.state_dict().values():
            if t.dtype == torch.float32:
                t.copy_(t.half().float())
        results, encs, worst = {}, {}, 1e9
        for clip, f in feats.items():
            out = model.generate(input_features=f[None], decoder_input_ids=torch.tensor([PROMPT]),
                                 max_new_tokens=10, do_sample=False, num_beams=1,
                                 output_scores=True, return_dict_in_generate=True)
            ids = out.sequences[0, len(PROMPT):].tolist()
            for s in out.scores:
                top = torch.topk(s[0], 2).values
                worst = min(worst, float(top[0] - top[1]))
            results[clip] = {"generated": ids}
            encs[f"canary.encoder.{clip}"] = model.model.encoder(input_features=f[None]).last_hidden_state[0].contiguous()
        distinct = {t for r in results.values() for t in r["generated"]}
        seqs = {tuple(r["generated"]) for r in results.values()}
        if worst >= MIN_MARGIN and len(distinct) >= 5 and len(seqs) == len(results):
            break
        print(f"seed {seed}: margin {worst:.4f}, {len(distinct)} distinct ids, {len(seqs)} sequences")
    print("seed", seed, "margin", worst, {k: v["generated"] for k, v in results.items()})
    d = FX / "canary"
    copy.deepcopy(model).half().save_pretrained(d)
    again = CanaryForConditionalGeneration.from_pretrained(d, dtype=torch.float32).eval()
    check = again.generate(input_features=feats["jfk"][None], decoder_input_ids=torch.tensor([PROMPT]),
                           max_new_tokens=10, do_sample=False, num_beams=1)
    assert check[0, len(PROMPT):].tolist() == results["jfk"]["generated"], "saved model differs"
    # End to end from raw samples (first 3 s of samples/jfk.wav) through transformers' own
    # feature extractor, for the test that uses stapes' front end.
    import wave
    import numpy as np
    from transformers import ParakeetFeatureExtractor
    with wave.open(str(ROOT / "samples/jfk.wav"), "rb") as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")[:48000].astype(np.float32) / 32768.0
    fx = ParakeetFeatureExtractor(feature_size=80)(pcm, sampling_rate=16000, return_tensors="pt")
    n_valid = int(fx.attention_mask[0].sum())
    e2e = model.generate(input_features=fx.input_features[:, :n_valid], decoder_input_ids=torch.tensor([PROMPT]),
                         max_new_tokens=10, do_sample=False, num_beams=1, output_scores=True,
                         return_dict_in_generate=True)
    e2e_margin = min(float(torch.topk(sc[0], 2).values[0] - torch.topk(sc[0], 2).values[1]) for sc in e2e.scores)
    tok = json.loads((FX / "tdt/tokenizer.json").read_text())
    (d / "tokenizer.json").write_text(json.dumps(tok))
    from tokenizers import Tokenizer
    e2e_ids = e2e.sequences[0, len(PROMPT):].tolist()
    text = Tokenizer.from_file(str(d / "tokenizer.json")).decode([i for i in e2e_ids if i != EOS])
    results["end_to_end_jfk"] = {"samples": 48000, "generated": e2e_ids, "text": text, "min_margin": e2e_margin}
    save_file(encs, FX / "expected_canary.safetensors")
    (FX / "expected_canary.json").write_text(json.dumps(
        {"transformers": __import__("transformers").__version__, "seed": seed, "prompt": PROMPT,
         "max_new_tokens": 10, "eos": EOS, "min_margin": worst, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
