#!/usr/bin/env python3
"""Dump Gemma 4 audio tower reference fixtures (transformers 5.17, `Gemma4AudioModel`).

Runs with a venv holding torch 2.15 (CPU is enough) and transformers 5.17.0:

    /tmp/tv/bin/python tools/reference/gemma4_audio_hf.py

What it writes under crates/stapes-models/tests/fixtures/gemma4a/ (or $GEMMA4A_FIXTURE_OUT):
  model/               a tiny random-weight `Gemma4AudioModel` (model_type `gemma4_audio`) saved
                       with `save_pretrained` in float16, and the extractor's
                       `preprocessor_config.json`
  full/                a tiny `Gemma4ForConditionalGeneration` (text model, audio tower, no vision
                       tower) saved the same way: the layout of a whole Gemma 4 checkpoint, where
                       the tower lives under `model.audio_tower.` and its projection into the text
                       model under `model.embed_audio.`
  inputs.safetensors   `features.<clip>`: (n_frames, 128) log-mel frames from transformers'
                       `Gemma4AudioFeatureExtractor` (every frame it returns, the masked tail
                       included), rounded to float16: the references below ran on exactly these
  expected.safetensors `tower.<clip>`: (n_tokens, output_proj_dims) `model/`'s output, every
                       token the tower returns (the masked tail too), float32;
                       `full_tower.<clip>` the same for `full/`'s tower and `embed.<clip>`:
                       (valid tokens, text hidden) what `get_audio_features` hands the text model
                       (the valid tokens of `embed_audio`'s output), float32
  expected.json        per clip: samples, feature frames, valid frames, tokens, valid tokens

Random weights: fan-in scaled normals, norms near 1, rounded to float16 before the reference runs.
The clip bounds of the clippable linears are set from the ranges their inputs and outputs take on
the jfk clip (so some values really are clamped), a few of them left at +-inf as transformers
initialises them; `gradient_clipping` and `attention_logit_cap` are lowered so that the tower's
clamps and the attention's tanh soft-cap change the output. The script checks that each of those
changes the result.

Clips (16 kHz mono int16):
  jfk       samples/jfk.wav, whole (11 s)
  beckett   $STAPES_CACHE/audio/beckett.wav, first 4.37 s (not a whole number of frames)
  lv0870    $STAPES_CACHE/audio/librivox/sense_and_sensibility_01_austen_64kb-0870.wav, whole
  short     jfk.wav from 1.0 s, 0.3 s long
"""
import json
import os
import wave
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import (
    Gemma4AudioConfig,
    Gemma4AudioFeatureExtractor,
    Gemma4AudioModel,
    Gemma4Config,
    Gemma4ForConditionalGeneration,
)

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("GEMMA4A_FIXTURE_OUT", ROOT / "crates/stapes-models/tests/fixtures/gemma4a"))
CACHE = Path(os.environ.get("STAPES_CACHE", Path.home() / ".cache/stapes"))
CLIPS = {
    "jfk": (ROOT / "samples/jfk.wav", 0.0, None),
    "beckett": (CACHE / "audio/beckett.wav", 0.0, 4.37),
    "lv0870": (CACHE / "audio/librivox/sense_and_sensibility_01_austen_64kb-0870.wav", 0.0, None),
    "short": (ROOT / "samples/jfk.wav", 1.0, 0.3),
}
SEED = 7
GRAD_CLIP = 6.0
LOGIT_CAP = 2.0


def read_clip(path, start_s, dur_s):
    with wave.open(str(path), "rb") as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    a = int(round(start_s * 16000))
    b = len(pcm) if dur_s is None else a + int(round(dur_s * 16000))
    return pcm[a:b].astype(np.float32) / 32768.0


def audio_config(**over):
    base = dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        subsampling_conv_channels=[128, 8],
        output_proj_dims=48,
        conv_kernel_size=5,
        attention_chunk_size=12,
        attention_context_left=13,
        attention_context_right=0,
        attention_logit_cap=LOGIT_CAP,
        gradient_clipping=GRAD_CLIP,
    )
    base.update(over)
    return Gemma4AudioConfig(**base)


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("per_dim_scale"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) * (1.2 / fan_in**0.5))
            elif name.endswith("norm.weight") or "layer_norm" in name or "norm_" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
        for p in model.state_dict().values():
            if p.dtype == torch.float32:
                p.copy_(p.half().float())
    return model.eval()


def clippables(tower):
    return [(n, m) for n, m in tower.named_modules() if type(m).__name__ == "Gemma4ClippableLinear"]


def set_clip_bounds(tower, feats, mask):
    """Bounds at 90% of each side's extreme on the jfk clip; every fifth linear keeps +-inf."""
    seen = {}
    hooks = []
    for name, m in clippables(tower):
        def hook(mod, args, out, name=name):
            seen[name] = (args[0].min().item(), args[0].max().item(), out.min().item(), out.max().item())
        hooks.append(m.register_forward_hook(hook))
    with torch.no_grad():
        tower(feats, mask)
    for h in hooks:
        h.remove()
    with torch.no_grad():
        for i, (name, m) in enumerate(clippables(tower)):
            if i % 5 == 4:
                continue
            lo_in, hi_in, lo_out, hi_out = seen[name]
            m.input_min.fill_(float(np.float16(0.9 * lo_in)))
            m.input_max.fill_(float(np.float16(0.9 * hi_in)))
            m.output_min.fill_(float(np.float16(0.9 * lo_out)))
            m.output_max.fill_(float(np.float16(0.9 * hi_out)))


def sync_config(tower):
    """Copies `gradient_clipping` and `attention_logit_cap` from the config into the modules,
    which read them once at construction."""
    g = tower.config.gradient_clipping
    for layer in tower.layers:
        for m in (layer, layer.feed_forward1, layer.feed_forward2, layer.lconv1d):
            m.gradient_clipping = g
        layer.self_attn.softcap.fill_(tower.config.attention_logit_cap)


def run(tower, feats, mask):
    with torch.no_grad():
        out = tower(feats, mask)
    return out.last_hidden_state[0], out.attention_mask[0]


def main():
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    fe = Gemma4AudioFeatureExtractor()
    clips = {name: read_clip(*spec) for name, spec in CLIPS.items()}
    inputs = {}
    for name, x in clips.items():
        # a list of one clip: the extractor reads a bare 1-D array as a batch of 1-sample clips
        f = fe([x], sampling_rate=16000, return_tensors="pt")
        feats = f["input_features"].half().float()
        inputs[name] = (feats, f["input_features_mask"])

    model = randomize(Gemma4AudioModel(audio_config()), SEED)
    jfk = inputs["jfk"]
    plain, _ = run(model, *jfk)
    set_clip_bounds(model, *jfk)
    clipped, _ = run(model, *jfk)
    assert (plain - clipped).norm() > 1e-2 * plain.norm(), "the clip bounds change nothing"
    # the lowered gradient clipping and soft-cap must matter too
    for key, value in [("gradient_clipping", 1e10), ("attention_logit_cap", 50.0)]:
        keep = getattr(model.config, key)
        setattr(model.config, key, value)
        sync_config(model)
        other, _ = run(model, *jfk)
        setattr(model.config, key, keep)
        sync_config(model)
        assert (other - clipped).norm() > 1e-3 * clipped.norm(), f"{key} changes nothing"
    again, _ = run(model, *jfk)
    assert torch.equal(again, clipped)

    # the whole-checkpoint layout: a smaller tower and a tiny text model beside it
    text = dict(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        vocab_size_per_layer_input=300,
        hidden_size_per_layer_input=8,
        layer_types=["full_attention"],
        global_head_dim=16,
    )
    small = audio_config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         subsampling_conv_channels=[128, 4], output_proj_dims=40)
    full = randomize(Gemma4ForConditionalGeneration(
        Gemma4Config(text_config=text, audio_config=small.to_dict(), vision_config=None)), SEED + 1)
    set_clip_bounds(full.model.audio_tower, *jfk)

    tensors_in, tensors_out, records = {}, {}, {}
    for name, (feats, mask) in inputs.items():
        tensors_in[f"features.{name}"] = feats[0].contiguous().half()
        hidden, out_mask = run(model, feats, mask)
        tensors_out[f"tower.{name}"] = hidden.contiguous()
        with torch.no_grad():
            a = full.model.get_audio_features(feats, mask, return_dict=True)
        valid = a.attention_mask[0]
        tensors_out[f"full_tower.{name}"] = a.last_hidden_state[0].contiguous()
        tensors_out[f"embed.{name}"] = a.pooler_output[0][valid].contiguous()
        assert torch.equal(valid, out_mask)
        n_valid = int(out_mask.sum())
        assert bool(out_mask[:n_valid].all()), "valid tokens are a prefix"
        records[name] = dict(
            samples=len(clips[name]),
            frames=int(feats.shape[1]),
            valid_frames=int(mask.sum()),
            tokens=int(hidden.shape[0]),
            valid_tokens=n_valid,
        )

    OUT.mkdir(parents=True, exist_ok=True)
    for sub, m in [("model", model), ("full", full)]:
        d = OUT / sub
        m.half().save_pretrained(d, safe_serialization=True)
        fe.save_pretrained(d)
        for extra in ["generation_config.json"]:
            if (d / extra).exists():
                (d / extra).unlink()
    again = Gemma4AudioModel.from_pretrained(OUT / "model", dtype=torch.float32).eval()
    for k, v in again.state_dict().items():
        assert torch.equal(v.float(), model.state_dict()[k].float()), k
    save_file(tensors_in, str(OUT / "inputs.safetensors"))
    save_file(tensors_out, str(OUT / "expected.safetensors"))
    meta = dict(
        generator="tools/reference/gemma4_audio_hf.py",
        transformers=__import__("transformers").__version__,
        torch=torch.__version__,
        seed=SEED,
        clips={k: dict(path=str(v[0].relative_to(ROOT) if v[0].is_relative_to(ROOT) else v[0].name),
                       start_s=v[1], seconds=v[2]) for k, v in CLIPS.items()},
        results=records,
    )
    (OUT / "expected.json").write_text(json.dumps(meta, indent=1) + "\n")
    for name, r in records.items():
        print(name, r)


if __name__ == "__main__":
    main()
