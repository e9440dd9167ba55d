#!/usr/bin/env python3
"""Dump Qwen3-ASR reference fixtures (transformers 5.17, `Qwen3ASRForConditionalGeneration`).

Runs with a venv holding torch 2.15 (CPU is enough), transformers 5.17.0 and tokenizers 0.23:

    /tmp/tv/bin/python tools/reference/qwen3_asr_hf.py

What it writes under crates/stapes-models/tests/fixtures/qwen3a/ (or $QWEN3A_FIXTURE_OUT):
  model/               a tiny random-weight `Qwen3ASRForConditionalGeneration` saved with
                       `save_pretrained` (config.json + model.safetensors, weights stored as
                       float16 to keep the fixture small), its `preprocessor_config.json` from
                       `Qwen3ASRFeatureExtractor.save_pretrained`, and a small byte-level BPE
                       `tokenizer.json` carrying the Qwen chat and audio special tokens
  inputs.safetensors   `features.<clip>`: (n_frames, 128) log-mel frames from transformers'
                       feature extractor, the valid frames and the rest of the last 100-frame
                       chunk, rounded to float16 (the encoder references below ran on exactly these)
  expected.safetensors `tower.<clip>`: (n_tokens, d_model) the audio tower's output (after ln_post);
                       `audio.<clip>`: (n_tokens, text hidden) the projector's output, float32
  expected.json        per clip: samples, valid mel frames, audio tokens, the prompt ids, the greedy
                       ids of `generate` from the f16-rounded features (`ids`) and from the feature
                       extractor's own f32 features of the raw clip (`ids_e2e`), and the smallest
                       top-1/top-2 logit margin of each run's decisions

The prompt is the Qwen3-ASR chat prompt with an empty system turn,
  <|im_start|>system\\n<|im_end|>\\n<|im_start|>user\\n<|audio_start|><|audio_pad|>xN<|audio_end|>
  <|im_end|>\\n<|im_start|>assistant\\n
and, for the forced-language case, `language English<asr_text>` after it (what the processor's
`apply_transcription_request(language=...)` appends). It is encoded by the fixture's own
tokenizer.json, which is what stapes reads too.

model_original/ holds the same weights in Qwen's original layout (the Qwen/Qwen3-ASR-0.6B
repository's, as third-party readers of it describe it: `thinker_config` with `audio_config`,
`text_config` and the token ids inside, the text rotary given as `rope_theta` plus multimodal
`rope_scaling` sections; tensors `thinker.audio_tower.*` with the projector as `proj1`/`proj2`,
`thinker.model.*`, `thinker.lm_head.weight`), written by renaming this script's own save, so a
loader of that layout must give exactly the transformers directory's outputs.

Random weights: fan-in scaled normals, norms near 1, small biases; rounded to float16 before the
reference runs. The seed is searched until every greedy decision has a top-1/top-2 margin of at
least MIN_MARGIN logits, so exact ids are a fair bar for an f32 implementation.

Clips (16 kHz mono int16):
  jfk       samples/jfk.wav, whole (11 s: 143 audio tokens, two attention windows of 104 + 39)
  beckett   $STAPES_CACHE/audio/beckett.wav, first 4.37 s (not a whole number of frames)
  lv0870    $STAPES_CACHE/audio/librivox/sense_and_sensibility_01_austen_64kb-0870.wav, whole (7.1 s)
  short     jfk.wav from 1.0 s, 0.3 s long (under the extractor's 0.5 s minimum: zero-padded)
"""
import json
import re
import os
import wave
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import Qwen3ASRConfig, Qwen3ASRFeatureExtractor, Qwen3ASRForConditionalGeneration

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("QWEN3A_FIXTURE_OUT", ROOT / "crates/stapes-models/tests/fixtures/qwen3a"))
CACHE = Path(os.environ.get("STAPES_CACHE", Path.home() / ".cache/stapes"))
CLIPS = {
    "jfk": (ROOT / "samples/jfk.wav", 0.0, None),
    "beckett": (CACHE / "audio/beckett.wav", 0.0, 4.37),
    "lv0870": (CACHE / "audio/librivox/sense_and_sensibility_01_austen_64kb-0870.wav", 0.0, None),
    "short": (ROOT / "samples/jfk.wav", 1.0, 0.3),
}
SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
    "<asr_text>",
]
TRAIN_TEXT = (
    "system user assistant language English Chinese German French <asr_text> "
    "And so my fellow Americans, ask not what your country can do for you; ask what you can do "
    "for your country. Ever tried. Ever failed. No matter. Try again. Fail again. Fail better. "
    "The family of Dashwood had long been settled in Sussex. Their estate was large, and their "
    "residence was at Norland Park, in the centre of their property."
)
BPE_VOCAB = 360
MAX_NEW_TOKENS = 16
MIN_MARGIN = 0.05
# The text layers' output projections are scaled up: with tied embeddings and small layer outputs
# a random model repeats its last token forever, which would hide a broken KV cache.
# Each run must emit this many different ids: a model that repeats one token would not show a
# broken KV cache or rotary position.
MIN_DISTINCT = 4
QK_GAIN = float(os.environ.get("QWEN3A_QK_GAIN", "3.0"))
AUDIO_GAIN = float(os.environ.get("QWEN3A_AUDIO_GAIN", "0.3"))
HEAD_GAIN = float(os.environ.get("QWEN3A_HEAD_GAIN", "8.0"))
LAYER_OUT_GAIN = float(os.environ.get("QWEN3A_GAIN", "2.0"))


def read_clip(path, start_s, dur_s):
    with wave.open(str(path), "rb") as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    a = int(round(start_s * 16000))
    b = len(pcm) if dur_s is None else a + int(round(dur_s * 16000))
    return pcm[a:b].astype(np.float32) / 32768.0


def tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([TRAIN_TEXT, "\n"] * 4, trainer=trainer)
    tok.add_special_tokens(SPECIALS)
    return tok


def config(tok):
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    audio = dict(
        num_mel_bins=128,
        encoder_layers=2,
        encoder_attention_heads=4,
        encoder_ffn_dim=128,
        d_model=64,
        downsample_hidden_size=16,
        output_dim=48,
        n_window=50,
        n_window_infer=800,
        max_position_embeddings=13,
    )
    text = dict(
        vocab_size=tok.get_vocab_size(),
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        tie_word_embeddings=True,
        max_position_embeddings=4096,
    )
    return Qwen3ASRConfig(
        audio_config=audio,
        text_config=text,
        audio_token_id=ids["<|audio_pad|>"],
        pad_token_id=ids["<|im_end|>"],
        eos_token_id=[ids["<|endoftext|>"], ids["<|im_end|>"]],
        tie_word_embeddings=True,
    )


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                gain = LAYER_OUT_GAIN if re.search(r"language_model.*(o_proj|down_proj)", name) else 1.0
                p.copy_(torch.randn(p.shape, generator=g) * (1.2 * gain / fan_in**0.5))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
        # Logits of a trained model span tens of units; a random one's only a few, which leaves
        # near-ties among the vocabulary. The final norm's gain sets the logit scale.
        model.model.language_model.norm.weight.mul_(HEAD_GAIN)
        # Sharper text attention (larger q/k norms) lets rotary positions pick what a step reads,
        # and a quieter projector keeps the long audio prompt from fixing every step's output.
        for layer in model.model.language_model.layers:
            layer.self_attn.q_norm.weight.mul_(QK_GAIN)
            layer.self_attn.k_norm.weight.mul_(QK_GAIN)
        model.model.multi_modal_projector.linear_2.weight.mul_(AUDIO_GAIN)
        model.model.multi_modal_projector.linear_2.bias.mul_(AUDIO_GAIN)
        for p in model.state_dict().values():
            if p.dtype == torch.float32:
                p.copy_(p.half().float())
    return model.eval()


def prompt_ids(tok, n_audio, language=None):
    text = (
        "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|audio_start|>"
        + "<|audio_pad|>" * n_audio
        + "<|audio_end|><|im_end|>\n<|im_start|>assistant\n"
    )
    if language is not None:
        text += f"language {language}<asr_text>"
    return tok.encode(text).ids


def generate(model, features, mask, ids):
    inp = torch.tensor([ids])
    out = model.generate(
        input_ids=inp,
        attention_mask=torch.ones_like(inp),
        input_features=features,
        input_features_mask=mask,
        max_new_tokens=MAX_NEW_TOKENS,
        do_sample=False,
        num_beams=1,
        output_scores=True,
        return_dict_in_generate=True,
    )
    new = out.sequences[0, len(ids):].tolist()
    margins = []
    for s in out.scores:
        top = torch.topk(s[0].float(), 2).values
        margins.append(float(top[0] - top[1]))
    return new, margins


def write_original(hf_dir, out_dir):
    """The same weights and config in Qwen's original layout (see the module docstring)."""
    from safetensors.torch import load_file
    cfg = json.loads((hf_dir / "config.json").read_text())
    text = dict(cfg["text_config"])
    rope = text.pop("rope_parameters")
    text["rope_theta"] = rope["rope_theta"]
    half = text["head_dim"] // 2
    text["rope_scaling"] = {"rope_type": "default", "interleaved": True,
                            "mrope_section": [half - 2 * (half // 4), half // 4, half // 4]}
    original = {
        "architectures": ["Qwen3ASRForConditionalGeneration"],
        "model_type": "qwen3_asr",
        "thinker_config": {
            "audio_config": cfg["audio_config"],
            "text_config": text,
            "audio_token_id": cfg["audio_token_id"],
        },
    }
    renames = {"model.multi_modal_projector.linear_1.": "thinker.audio_tower.proj1.",
               "model.multi_modal_projector.linear_2.": "thinker.audio_tower.proj2.",
               "model.audio_tower.": "thinker.audio_tower.",
               "model.language_model.": "thinker.model."}
    tensors = {}
    for k, v in load_file(str(hf_dir / "model.safetensors")).items():
        for a, b in renames.items():
            if k.startswith(a):
                k = b + k[len(a):]
                break
        tensors[k] = v
    # tied: Qwen's files still carry the head
    tensors["thinker.lm_head.weight"] = tensors["thinker.model.embed_tokens.weight"].clone()
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / "model.safetensors"))
    (out_dir / "config.json").write_text(json.dumps(original, indent=1) + "\n")
    gen = json.loads((hf_dir / "generation_config.json").read_text())
    (out_dir / "generation_config.json").write_text(
        json.dumps({"eos_token_id": gen.get("eos_token_id", cfg["eos_token_id"])}, indent=1) + "\n")
    (out_dir / "tokenizer.json").write_bytes((hf_dir / "tokenizer.json").read_bytes())


def main():
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    tok = tokenizer()
    fe = Qwen3ASRFeatureExtractor()
    clips = {name: read_clip(*spec) for name, spec in CLIPS.items()}
    extracted = {}
    for name, x in clips.items():
        f = fe(x, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
        extracted[name] = (f["input_features"], f["attention_mask"])

    for seed in range(100):
        model = randomize(Qwen3ASRForConditionalGeneration(config(tok)), seed)
        ok = True
        records = {}
        tensors_in, tensors_out = {}, {}
        with torch.no_grad():
            for name, (feat, mask) in extracted.items():
                valid = int(mask.sum())
                keep = min(feat.shape[-1], -(-valid // 100) * 100)
                rounded = feat.half().float()
                # Frames past the last chunk with valid frames never reach a kept position.
                tensors_in[f"features.{name}"] = rounded[0, :, :keep].T.contiguous().half()
                tower = model.model.audio_tower(input_features=rounded, input_features_mask=mask)
                hidden = tower.last_hidden_state
                audio = model.model.multi_modal_projector(hidden)
                tensors_out[f"tower.{name}"] = hidden.contiguous()
                tensors_out[f"audio.{name}"] = audio.contiguous()
                n_audio = hidden.shape[0]
                runs = {}
                for key, (fe_in, lang) in {
                    "ids": (rounded, None),
                    "ids_e2e": (feat, None),
                    "ids_english": (rounded, "English"),
                }.items():
                    ids = prompt_ids(tok, n_audio, lang)
                    new, margins = generate(model, fe_in, mask, ids)
                    if min(margins) < MIN_MARGIN or len(set(new)) < MIN_DISTINCT:
                        ok = False
                    runs[key] = dict(prompt=ids, ids=new, min_margin=min(margins))
                records[name] = dict(
                    samples=len(clips[name]),
                    valid_frames=valid,
                    stored_frames=keep,
                    audio_tokens=n_audio,
                    runs=runs,
                    text=tok.decode(runs["ids"]["ids"], skip_special_tokens=True),
                )
        if ok:
            break
        print(f"seed {seed}: a margin under {MIN_MARGIN} or a repetitive run, next seed")
    else:
        raise SystemExit("no seed gave clear greedy decisions")

    OUT.mkdir(parents=True, exist_ok=True)
    mdir = OUT / "model"
    model.half().save_pretrained(mdir, safe_serialization=True)
    fe.save_pretrained(mdir)
    tok.save(str(mdir / "tokenizer.json"))
    again = Qwen3ASRForConditionalGeneration.from_pretrained(mdir, dtype=torch.float32).eval()
    for k, v in again.state_dict().items():
        assert torch.equal(v.float(), model.state_dict()[k].float()), k
    write_original(mdir, OUT / "model_original")
    save_file(tensors_in, str(OUT / "inputs.safetensors"))
    save_file(tensors_out, str(OUT / "expected.safetensors"))
    meta = dict(
        generator="tools/reference/qwen3_asr_hf.py",
        transformers=__import__("transformers").__version__,
        torch=torch.__version__,
        seed=seed,
        max_new_tokens=MAX_NEW_TOKENS,
        min_margin=MIN_MARGIN,
        clips={k: dict(path=str(v[0].relative_to(ROOT) if v[0].is_relative_to(ROOT) else v[0].name),
                       start_s=v[1], seconds=v[2]) for k, v in CLIPS.items()},
        results=records,
    )
    (OUT / "expected.json").write_text(json.dumps(meta, indent=1) + "\n")
    for name, r in records.items():
        print(name, r["audio_tokens"], "tokens;", {k: (v["ids"][:8], round(v["min_margin"], 3)) for k, v in r["runs"].items()})


if __name__ == "__main__":
    main()
