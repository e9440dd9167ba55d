#!/usr/bin/env python3
"""One table of the GPU comparison run's figures (tools/bench/gpu_compare.sh writes DIR):
ours (stapes bench --json medians, f16 / q8), PyTorch + CUDA graph (torch_anchor.py), whisper.cpp
(whisper-bench, flash attention on), and the ratio peer / ours of the best peer to our f16 and q8.
Usage: gpu_table.py DIR"""
import json
import re
import sys
from pathlib import Path

D = Path(sys.argv[1])
WHISPER = {"whisper-large-v3-turbo": "turbo", "whisper-tiny": "tiny", "whisper-base": "base"}
TORCH_NAMES = {
    ("whisper-large-v3-turbo", 1): "whisper-large-v3-turbo encoder (30 s window)",
    ("whisper-large-v3-turbo", 16): "whisper-large-v3-turbo encoder (30 s window)",
    ("whisper-tiny", 1): "whisper-tiny encoder (30 s window)",
    ("whisper-base", 1): "whisper-base encoder (30 s window)",
    ("parakeet-tdt-0.6b-v2", 1): "parakeet-tdt-0.6b-v2 encoder (11 s jfk)",
    ("parakeet-tdt-0.6b-v2", 16): "parakeet-tdt-0.6b-v2 encoder (11 s jfk)",
    ("canary-1b-flash", 1): "canary-1b-flash encoder (11 s jfk)",
    ("canary-1b-flash", 16): "canary-1b-flash encoder (11 s jfk)",
}


def ours(model, lane):
    p = D / f"ours-{model}-{lane}.json"
    if not p.exists() or p.stat().st_size == 0:
        return None
    try:
        return json.loads(p.read_text())["report"]
    except (ValueError, KeyError):
        return None


def med(r, key):
    if r is None:
        return None
    if key in r and isinstance(r[key], dict):
        return r[key]["median_ms"]
    return r.get("extra", {}).get(key)


def torch_rows():
    rows = {}
    p = D / "torch.jsonl"
    if p.exists():
        for line in p.read_text().splitlines():
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if "batch" in j:
                rows[(j["name"], j["batch"])] = j.get("graph_ms")
    return rows


def wcpp(shape):
    p = D / f"wcpp-{shape}.log"
    if not p.exists():
        return {}
    t = p.read_text()
    out = {}
    for what in ("encode", "decode"):
        m = re.search(rf"{what} time =\s*[\d.]+ ms /\s*\d+ runs \(\s*([\d.]+) ms per run\)", t)
        if m:
            out[what] = float(m.group(1))
    return out


def fmt(x):
    return "–" if x is None else (f"{x:.3f}" if x < 10 else f"{x:.1f}")


def ratio(peer, x):
    return "–" if peer is None or x is None or x == 0 else f"{peer / x:.2f}x"


torch = torch_rows()
print((D / "gpu.txt").read_text().strip() if (D / "gpu.txt").exists() else "gpu: ?")
print("| what (ms) | stapes f16 | stapes q8 | PyTorch+graph | whisper.cpp | best peer / f16 | best peer / q8 |")
print("| --- | --- | --- | --- | --- | --- | --- |")
ORDER = ["whisper-large-v3-turbo", "whisper-tiny", "whisper-base", "parakeet-tdt-0.6b-v2",
         "canary-1b-flash"]
models = sorted({p.name[5:].rsplit("-", 1)[0] for p in D.glob("ours-*.json")},
                key=lambda m: (ORDER.index(m) if m in ORDER else len(ORDER), m))
for m in models:
    f16, q8 = ours(m, "f16"), ours(m, "q8")
    one = "encode, 1 window" if m in WHISPER else "encode, 11 s"
    # whisper-bench uploads its mel inside each encode; PyTorch's input is on the device already
    rows = [(f"{one}, features uploaded", "encode", None, "encode"),
            (f"{one}, features on the device", "encode_device", 1, None)]
    rows.append(("encode, 16 batched", "encode_batched", 16, None))
    rows.append(("decode per token", "decode_token", None, "decode"))
    if m in WHISPER:
        rows.append(("jfk end to end, 29 tokens", "end_to_end_29_tokens_ms", None, None))
    else:
        rows.append(("end to end (jfk)", "end_to_end", None, None))
    for label, key, tb, wkey in rows:
        a, b = med(f16, key), med(q8, key)
        if a is None and b is None:
            continue
        t = torch.get((TORCH_NAMES.get((m, tb), ""), tb)) if tb else None
        w = wcpp(WHISPER[m]).get(wkey) if (m in WHISPER and wkey) else None
        peers = [x for x in (t, w) if isinstance(x, (int, float)) and x == x]
        best = min(peers) if peers else None
        print(f"| {m} {label} | {fmt(a)} | {fmt(b)} | {fmt(t)} | {fmt(w)} | {ratio(best, a)} | {ratio(best, b)} |")
