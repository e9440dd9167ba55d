#!/usr/bin/env python3
"""Read nsys's per-kernel trace (`nsys stats --report cuda_gpu_trace --format csv -o PREFIX
REPORT.nsys-rep`, captured with `--cuda-graph-trace=node` so a graph replay's kernels appear
one by one) and print one repeating unit (a conformer block: from one launch of a marker
kernel to the next) late in the run: each kernel's duration in the graph as it ran, and the
gap from the previous kernel's end to its start (negative where PDL let it start early). Unlike
ncu, nothing is serialized, the clocks are the card's own and the caches stay warm.

  tools/bench/nsys_block.py trace.csv --marker rel_attn_d128 [--back 3]
"""
import argparse
import csv
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--marker", required=True)
    ap.add_argument("--back", type=int, default=3)
    a = ap.parse_args()
    lines = open(a.csv, encoding="utf-8", errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if "Start" in l and "Duration" in l), None)
    if start is None:
        sys.exit("nsys_block: no header with Start and Duration")
    rows = list(csv.DictReader(lines[start:]))
    col = lambda key: next(k for k in rows[0] if k.startswith(key))
    s_k, d_k, n_k = col("Start"), col("Duration"), col("Name")
    ks = [(int(r[s_k]), int(r[d_k]), r[n_k]) for r in rows if r.get(d_k, "").strip().isdigit()]
    ks.sort()
    marks = [i for i, k in enumerate(ks) if a.marker in k[2]]
    if len(marks) < a.back + 1:
        sys.exit(f"nsys_block: {len(marks)} launches of {a.marker}")
    i0, i1 = marks[-a.back - 1], marks[-a.back]
    prev_end = ks[i0 - 1][0] + ks[i0 - 1][1]
    busy = 0
    for s, d, n in ks[i0:i1]:
        print(f"{d / 1000:8.2f} us  gap {(s - prev_end) / 1000:6.2f}  {n[:90]}")
        prev_end = s + d
        busy += d
    wall = (ks[i1][0] - ks[i0][0]) / 1000
    print(f"unit: {i1 - i0} kernels, {busy / 1000:.1f} us summed, {wall:.1f} us start to start")


main()
