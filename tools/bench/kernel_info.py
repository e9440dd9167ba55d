#!/usr/bin/env python3
"""Registers, spills and shared memory of every CUDA kernel, or one kernel's SASS, on a machine
without a GPU: compiles a kernels/*.cu file the way the backend does (common.cuh prepended,
kernels.rs's OPTIONS, sm_90a for the files in its ARCH_SPECIFIC, sm_90 otherwise) through
NVRTC with ptxas's verbose report.

Needs `pip install nvidia-cuda-nvrtc==13.0.88` (what CI installs); for --sass also
`pip download --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm` unpacked somewhere on PATH
(or NVDISASM_PATH / CUOBJDUMP).

  tools/bench/kernel_info.py                 # every file: entry, registers, spills, smem
  tools/bench/kernel_info.py attn_wg         # one file
  tools/bench/kernel_info.py attn_wg --sass awg64_s4 > awg64_s4.sass
  tools/bench/kernel_info.py --arch sm_80    # another architecture
"""
import argparse
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "crates/stapes-cuda/kernels"
KERNELS_RS = ROOT / "crates/stapes-cuda/src/kernels.rs"


def nvrtc():
    """libnvrtc with its builtins library loaded first (NVRTC opens it by name)."""
    dirs = []
    if os.environ.get("STAPES_NVRTC_LIB"):
        dirs.append(Path(os.environ["STAPES_NVRTC_LIB"]))
    try:
        import nvidia  # the namespace package of the pip wheels

        for p in nvidia.__path__:
            dirs.append(Path(p) / "cu13/lib")
    except ImportError:
        pass
    for d in dirs:
        lib = d / "libnvrtc.so.13"
        if lib.exists():
            for b in sorted(d.glob("libnvrtc-builtins.so.13*")):
                if ".alt." not in b.name:
                    ctypes.CDLL(str(b), mode=ctypes.RTLD_GLOBAL)
                    break
            return ctypes.CDLL(str(lib))
    sys.exit("kernel_info: libnvrtc.so.13 not found (pip install nvidia-cuda-nvrtc==13.0.88, or set STAPES_NVRTC_LIB)")


def str_list(const):
    """The strings of `const NAME: &[&str] = &[...]` in kernels.rs, so this script compiles as the
    backend does without restating its lists."""
    m = re.search(const + r":\s*&\[&str\]\s*=\s*&\[([^\]]*)\]", KERNELS_RS.read_text())
    if not m:
        sys.exit(f"kernel_info: {const} not found in {KERNELS_RS}")
    return re.findall(r'"([^"]+)"', m.group(1))


def compile_file(lib, name, arch, options):
    """(ptxas log, CUBIN bytes) of kernels/<name>.cu for `arch` (sm_XY)."""
    src = (KERNELS / "common.cuh").read_text() + f'\n#line 1 "{name}.cu"\n' + (KERNELS / f"{name}.cu").read_text()
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), f"{name}.cu".encode(), 0, None, None) != 0:
        sys.exit(f"kernel_info: nvrtcCreateProgram failed for {name}.cu")
    opts = [o.encode() for o in options] + [f"--gpu-architecture={arch}".encode(), b"-Xptxas", b"-v"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, log)
    log = log.value.decode(errors="replace")
    if rc != 0:
        sys.exit(f"kernel_info: {name}.cu does not compile for {arch}:\n{log}")
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(n))
    bin_ = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetCUBIN(prog, bin_)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return log, bin_.raw


def entries(log):
    """One dict per entry (name, regs, st / ld: spill bytes, stack, smem) from ptxas's verbose log."""
    out, cur = [], None
    for line in log.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            cur = {"name": m.group(1), "smem": 0}
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur["stack"], cur["st"], cur["ld"] = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            cur["smem"] = int(s.group(1)) if s else 0
            out.append(cur)
            cur = None
    return out


def sass(bin_, entry):
    tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not tool:
        sys.exit("kernel_info: cuobjdump not found (see the header of this script)")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(bin_)
        f.flush()
        return subprocess.run([tool, "-sass", "-fun", entry, f.name], capture_output=True, text=True, check=True).stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", help="kernel file names without .cu (default: all)")
    ap.add_argument("--arch", default="sm_90", help="sm_XY (files in ARCH_SPECIFIC get the 'a' form of sm_90)")
    ap.add_argument("--sass", metavar="ENTRY", help="print this entry's SASS instead of the table")
    a = ap.parse_args()
    names = a.files or sorted(p.stem for p in KERNELS.glob("*.cu"))
    special, options = set(str_list("ARCH_SPECIFIC")), str_list("OPTIONS")
    lib = nvrtc()
    if not a.sass:
        print(f"{'file':<12} {'entry':<32} {'regs':>4} {'spill st/ld':>11} {'stack':>5} {'smem':>6}")
    for name in names:
        if not (KERNELS / f"{name}.cu").exists():
            sys.exit(f"kernel_info: no kernel file {name}.cu in {KERNELS}")
        arch = a.arch + "a" if a.arch == "sm_90" and name in special else a.arch
        log, bin_ = compile_file(lib, name, arch, options)
        if a.sass:
            if any(e["name"] == a.sass for e in entries(log)):
                print(sass(bin_, a.sass))
                return
            continue
        for e in sorted(entries(log), key=lambda e: e["name"]):
            flag = "  <- spills" if e["st"] or e["ld"] else ""
            print(f"{name:<12} {e['name']:<32} {e['regs']:>4} {e['st']:>5}/{e['ld']:<5} {e['stack']:>5} {e['smem']:>6}{flag}")
    if a.sass:
        sys.exit(f"kernel_info: no entry {a.sass} in {', '.join(names)}")


if __name__ == "__main__":
    main()
