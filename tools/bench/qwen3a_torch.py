#!/usr/bin/env python3
"""transformers' Qwen3-ASR at a published shape, for the ledger's rows beside
`stapes bench --synthetic qwen3-asr-0.6b --audio samples/jfk.wav`.

Builds `Qwen3ASRForConditionalGeneration` with the published 0.6B (or 1.7B) shapes and random
weights (the time does not depend on them), takes jfk.wav's features from
`Qwen3ASRFeatureExtractor`, and times (median and min of `--iters` after 2 warm runs):
  tower   the audio tower and projector (`model.get_audio_features`)
  step    one text-model step with a K/V cache after the chat prompt (the prompt's prefill is
          not counted): `generate` of N + 1 tokens minus `generate` of 1 token, over N
  e2e     features of the raw clip, tower and `generate` of N tokens (min_new_tokens = N, so
          random weights decode as many tokens as stapes' bench does)

    /tmp/tv/bin/python tools/bench/qwen3a_torch.py [--shape 0.6b] [--threads 2] [--device cpu]
        [--dtype float32] [--tokens 40] [--iters 5]

On the GPU machine, `--device cuda --dtype float16` (eager; the tower's per-window attention
splits on host lengths, which is why perf.md records that its CUDA graph capture failed).
"""
import argparse
import statistics
import time
import wave
from pathlib import Path

import numpy as np
import torch
from transformers import Qwen3ASRConfig, Qwen3ASRFeatureExtractor, Qwen3ASRForConditionalGeneration

ROOT = Path(__file__).resolve().parents[2]
SHAPES = {
    # audio d_model, layers, heads, ffn, text hidden, text ffn
    "0.6b": (896, 18, 14, 3584, 1024, 3072),
    "1.7b": (1024, 24, 16, 4096, 2048, 6144),
}


def timed(fn, iters, sync):
    for _ in range(2):
        fn()
    ms = []
    for _ in range(iters):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        ms.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ms), min(ms)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="0.6b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev, dtype = torch.device(args.device), getattr(torch, args.dtype)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    d, layers, heads, ffn, hidden, inter = SHAPES[args.shape]
    cfg = Qwen3ASRConfig(
        audio_config=dict(d_model=d, encoder_layers=layers, encoder_attention_heads=heads,
                          encoder_ffn_dim=ffn, output_dim=hidden),
        text_config=dict(vocab_size=151936, hidden_size=hidden, intermediate_size=inter,
                         num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                         head_dim=128, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                         tie_word_embeddings=True),
    )
    model = Qwen3ASRForConditionalGeneration(cfg).to(dev, dtype).eval()
    with wave.open(str(ROOT / "samples/jfk.wav"), "rb") as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768
    fe = Qwen3ASRFeatureExtractor()

    def features():
        f = fe(pcm, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
        return f["input_features"].to(dev, dtype), f["attention_mask"].to(dev)

    feats, mask = features()
    with torch.no_grad():
        n_audio = model.model.get_audio_features(feats, mask).pooler_output.shape[0]
        # the chat prompt in Qwen's vocabulary (tools/reference/qwen3_asr_hf.py writes it as text)
        ids = torch.tensor([[151644, 8948, 198, 151645, 198, 151644, 872, 198, 151669]
                            + [151676] * n_audio + [151670, 151645, 198, 151644, 77091, 198]],
                           device=dev)

        def gen(n, f=feats, m=mask):
            return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                  input_features=f, input_features_mask=m, max_new_tokens=n,
                                  min_new_tokens=n, do_sample=False, num_beams=1)

        tower = timed(lambda: model.model.get_audio_features(feats, mask), args.iters, sync)
        one = timed(lambda: gen(1), args.iters, sync)
        many = timed(lambda: gen(args.tokens + 1), args.iters, sync)

        def e2e():
            f, m = features()
            gen(args.tokens, f, m)

        whole = timed(e2e, args.iters, sync)
    step = ((many[0] - one[0]) / args.tokens, (many[1] - one[1]) / args.tokens)
    print(f"transformers {args.shape} {args.device} {args.dtype} threads {args.threads}: "
          f"{n_audio} audio tokens, prompt {ids.shape[1]}")
    for name, (med, lo) in [("tower+projector", tower), ("text step", step),
                            (f"end to end, {args.tokens} tokens", whole)]:
        print(f"  {name:<28} {med:9.2f} ms (min {lo:.2f})")


if __name__ == "__main__":
    main()
