#!/usr/bin/env python3
"""Read a per-kernel ncu CSV (`ncu --metrics gpu__time_duration.sum --csv ... > FILE`, plain or
.xz) and print where an encode's time goes: the kernels of one repeating unit (a conformer
block, a Whisper layer) between two launches of a marker kernel, late in the run (after the
tuner's and the warm-up's launches), and the whole file summed by kernel name.

  tools/bench/ncu_kernels.py ncu-parakeet-q8-b1.csv.xz --marker rel_attn
  tools/bench/ncu_kernels.py ncu-turbo-f16-b1.csv --marker awg64 --back 3 --top 15

--back N takes the unit that starts at the N-th last marker launch (default 3: the last units of
a capture can be cut by ncu's launch count).
"""
import argparse
import collections
import csv
import io
import lzma
import sys


def rows(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", errors="replace") as f:
        lines = [line for line in f if line.startswith('"')]
    table = list(csv.reader(io.StringIO("".join(lines))))
    if not table:
        sys.exit(f"{path}: no CSV rows (was it written with --csv?)")
    head = table[0]
    try:
        ki, vi = head.index("Kernel Name"), head.index("Metric Value")
        gi, bi = head.index("Grid Size"), head.index("Block Size")
    except ValueError as e:
        sys.exit(f"{path}: not a per-kernel ncu CSV ({e})")
    out = []
    for r in table[1:]:
        try:
            ns = float(r[vi].replace(",", ""))
        except (ValueError, IndexError):
            continue
        out.append((r[ki], ns / 1000.0, r[gi], r[bi]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--marker", required=True, help="a substring of the unit's first kernel")
    ap.add_argument("--back", type=int, default=3)
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    ks = rows(a.csv)
    hits = [i for i, k in enumerate(ks) if a.marker in k[0]]
    print(f"{a.csv}: {len(ks)} kernels, {len(hits)} launches of `{a.marker}`")
    if len(hits) > a.back:
        i0, i1 = hits[-a.back - 1], hits[-a.back]
        total = 0.0
        for name, us, grid, block in ks[i0:i1]:
            total += us
            print(f"{us:8.2f} us  {grid:>14} {block:>12}  {name[:90]}")
        print(f"unit: {i1 - i0} launches, {total:.1f} us summed")
    else:
        print(f"fewer than {a.back + 1} launches of the marker: no unit printed")
    by = collections.defaultdict(lambda: [0, 0.0])
    for name, us, _, _ in ks:
        by[name[:70]][0] += 1
        by[name[:70]][1] += us
    print(f"whole file, top {a.top} by summed time:")
    for name, (n, us) in sorted(by.items(), key=lambda x: -x[1][1])[: a.top]:
        print(f"{us:10.1f} us {n:6d} x {us / n:7.2f}  {name}")


if __name__ == "__main__":
    main()
