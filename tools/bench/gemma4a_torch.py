#!/usr/bin/env python3
"""transformers' Gemma 4 audio tower at its published shape, for the ledger's rows beside
`stapes bench --synthetic gemma4-audio --audio samples/jfk.wav`.

Builds `Gemma4AudioModel` from `Gemma4AudioConfig()` (the defaults are the published tower:
hidden 1024, 12 layers, 8 heads, subsampling channels 128/32) with random weights (the time does
not depend on them), takes jfk.wav's features from `Gemma4AudioFeatureExtractor`, and times the
tower's forward (median and min of `--iters` after 2 warm runs).

    /tmp/tv/bin/python tools/bench/gemma4a_torch.py [--threads 2] [--device cpu] [--dtype float32]

On the GPU machine `--device cuda --dtype float16` (perf.md: 28.67 ms eager, 5.84 with a graph).
"""
import argparse
import statistics
import time
import wave
from pathlib import Path

import numpy as np
import torch
from transformers import Gemma4AudioConfig, Gemma4AudioFeatureExtractor, Gemma4AudioModel

ROOT = Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev, dtype = torch.device(args.device), getattr(torch, args.dtype)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model = Gemma4AudioModel(Gemma4AudioConfig()).to(dev, dtype).eval()
    with wave.open(str(ROOT / "samples/jfk.wav"), "rb") as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768
    # a list of one clip: a bare 1-D array would be read as a batch of 1-sample clips
    f = Gemma4AudioFeatureExtractor()([pcm], sampling_rate=16000, return_tensors="pt")
    feats, mask = f["input_features"].to(dev, dtype), f["input_features_mask"].to(dev)
    with torch.no_grad():
        for _ in range(2):
            model(feats, mask)
        ms = []
        for _ in range(args.iters):
            sync()
            t = time.perf_counter()
            model(feats, mask)
            sync()
            ms.append((time.perf_counter() - t) * 1e3)
    print(f"transformers Gemma4AudioModel (published shape) {args.device} {args.dtype} threads "
          f"{args.threads}: {feats.shape[1]} frames; tower {statistics.median(ms):.2f} ms "
          f"(min {min(ms):.2f})")


if __name__ == "__main__":
    main()
