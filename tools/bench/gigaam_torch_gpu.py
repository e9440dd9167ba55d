#!/usr/bin/env python3
"""The gigaam package's own encoder on a CUDA GPU, for the ledger's GigaAM rows beside
`stapes bench --synthetic gigaam-v3-ctc --device cuda --audio samples/jfk.wav`.

Builds the package's `ConformerEncoder` with the published v3 shape (random weights: the time does
not depend on them) in f16, as the package runs it on a GPU (`model.encoder.half()`), and times
one 11 s input (1099 feature frames, jfk's length) and 16 of them at once: eager, and replayed as
a CUDA graph where capture works. Times are CUDA-event medians of 20 runs after 3 warm ones.
Prints one JSON object per line.

    python3 tools/bench/gigaam_torch_gpu.py --gigaam-src /path/to/GigaAM

Needs torch with CUDA and GigaAM's source (salute-developers/GigaAM). Only the encoder module is
imported: the package's `__init__` (hydra, omegaconf) is not run, and where torchaudio or
soundfile are missing, empty stand-ins take their place (the encoder never calls them; the
package's audio loading does).
"""
import argparse
import json
import statistics
import sys
import types
from pathlib import Path


def load_encoder_class(src):
    for name in ("torchaudio", "soundfile"):
        try:
            __import__(name)
        except ImportError:
            sys.modules[name] = types.ModuleType(name)
    pkg = types.ModuleType("gigaam")
    pkg.__path__ = [str(Path(src).resolve() / "gigaam")]
    sys.modules["gigaam"] = pkg
    from gigaam.encoder import ConformerEncoder

    return ConformerEncoder


def timed(torch, fn, iters=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts), min(ts), max(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gigaam-src", required=True)
    ap.add_argument("--frames", type=int, default=1099)
    args = ap.parse_args()
    import torch

    ConformerEncoder = load_encoder_class(args.gigaam_src)
    enc = ConformerEncoder(feat_in=64, n_layers=16, d_model=768, subsampling_factor=4,
                           ff_expansion_factor=4, self_attention_model="rotary",
                           pos_emb_max_len=5000, n_heads=16, conv_kernel_size=5,
                           flash_attn=False, subs_kernel_size=5, subsampling="conv1d",
                           conv_norm_type="layer_norm")
    enc = enc.cuda().eval().half()
    base = {"model": "gigaam-v3-ctc encoder", "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0), "frames": args.frames}
    for batch in (1, 16):
        x = torch.randn(batch, 64, args.frames, device="cuda", dtype=torch.float16)
        n = torch.full((batch,), args.frames, device="cuda", dtype=torch.long)
        with torch.inference_mode():
            med, lo, hi = timed(torch, lambda: enc(x, n))
            print(json.dumps({**base, "batch": batch, "mode": "eager", "median_ms": med,
                              "min_ms": lo, "max_ms": hi}), flush=True)
            try:
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        enc(x, n)
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    enc(x, n)
                med, lo, hi = timed(torch, g.replay)
                print(json.dumps({**base, "batch": batch, "mode": "graph", "median_ms": med,
                                  "min_ms": lo, "max_ms": hi}), flush=True)
            except Exception as e:  # the package's forward may not capture
                print(json.dumps({**base, "batch": batch, "mode": "graph",
                                  "error": f"{type(e).__name__}: {e}"[:300]}), flush=True)


if __name__ == "__main__":
    main()
