#!/usr/bin/env python3
"""transformers' FastConformer encoder (`ParakeetEncoder`) on the CPU, for the ledger's CPU rows
beside `stapes bench --synthetic parakeet-tdt-0.6b-v2|canary-1b-flash --device cpu`.

The shapes are ../shared/tools/torch_anchor.py's (ParakeetEncoderConfig's defaults, 128 mel
bins, 24 layers for parakeet-tdt-0.6b-v2, 32 for canary-1b-flash), random weights (the time does
not depend on them), one 11 s clip's 1101 feature frames. Times `encoder(x)` in f32 and with
torch's dynamic int8 quantization of every nn.Linear (the peer of our q8 lane): median and min
of 5 after 2 warm runs, one JSON line per row.

    /tmp/tv/bin/python tools/bench/fc_torch_cpu.py [--threads 2] [--iters 5]

Needs torch (CPU wheel) and transformers 5.17.
"""
import argparse
import json
import statistics
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--frames", type=int, default=1101)
    args = ap.parse_args()
    import torch
    import transformers
    from transformers import ParakeetEncoderConfig
    from transformers.models.parakeet.modeling_parakeet import ParakeetEncoder

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x = torch.randn(1, args.frames, 128)
    for name, layers in (("parakeet-tdt-0.6b-v2", 24), ("canary-1b-flash", 32)):
        cfg = ParakeetEncoderConfig(num_hidden_layers=layers, num_mel_bins=128,
                                    attn_implementation="sdpa")
        f32 = ParakeetEncoder(cfg).eval()
        int8 = torch.ao.quantization.quantize_dynamic(f32, {torch.nn.Linear}, dtype=torch.qint8)
        for lane, model in (("f32", f32), ("dynamic int8", int8)):
            times = []
            with torch.inference_mode():
                for i in range(2 + args.iters):
                    t0 = time.perf_counter()
                    model(x)
                    if i >= 2:
                        times.append((time.perf_counter() - t0) * 1e3)
            print(json.dumps({
                "name": f"{name} encoder (11 s)", "lane": lane, "threads": args.threads,
                "median_ms": round(statistics.median(times), 1), "min_ms": round(min(times), 1),
                "torch": torch.__version__, "transformers": transformers.__version__,
            }), flush=True)


if __name__ == "__main__":
    main()
