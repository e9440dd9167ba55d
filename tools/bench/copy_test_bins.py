#!/usr/bin/env python3
"""Copy the test executables named in cargo's JSON messages (stdin) into a folder.

    cargo test --release -p CRATE --no-run --message-format=json | copy_test_bins.py DST [NAME...]

With names, only those targets are copied (and each must be found: exit 1 names a missing one);
without, every non-library target with an executable. Used by tools/bench/stage_device.sh and
crates/stapes-cuda/gpu/stage.sh to stage binaries for the GPU machine, which has no Rust.
"""
import json
import shutil
import sys


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    dst, names = sys.argv[1], set(sys.argv[2:])
    found = set()
    for line in sys.stdin:
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if j.get("reason") != "compiler-artifact" or not j.get("executable"):
            continue
        target = j["target"]
        if target["kind"] == ["lib"] or (names and target["name"] not in names):
            continue
        shutil.copy(j["executable"], f"{dst}/{target['name']}")
        found.add(target["name"])
        print("staged", target["name"])
    missing = sorted(names - found)
    for name in missing:
        print(f"copy_test_bins: no test binary {name}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
