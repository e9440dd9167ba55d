#!/usr/bin/env python3
"""Writes a small GGUF file with every metadata type and the ggml tensor types stapes reads,
using llama.cpp's own gguf-py (writer, quantizers and dequantizers are the reference), plus the
expected values.

    pip install gguf numpy
    python tools/reference/whisper_formats_gguf.py

Writes crates/stapes-formats/tests/fixtures/types.gguf and types.gguf.json.
"""
import json
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import quants

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/stapes-formats/tests/fixtures"


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261130)
    path = OUT / "types.gguf"
    w = gguf.GGUFWriter(str(path), arch="stapes-test")
    w.data_alignment = 64
    w.add_uint32("general.alignment", 64)
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -5)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.25)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "Grüße ♪")
    w.add_array("test.array_i32", [1, -2, 3])
    w.add_array("test.array_str", ["a", "bc", ""])
    w.add_uint64("test.u64", 2**40 + 3)
    w.add_int64("test.i64", -(2**40))
    w.add_float64("test.f64", -1.5)
    expected = {}
    cases = [
        ("t.f32", Q.F32, (3, 5)),
        ("t.f16", Q.F16, (2, 64)),
        ("t.bf16", Q.BF16, (2, 32)),
        ("t.q8_0", Q.Q8_0, (4, 64)),
        ("t.q4_0", Q.Q4_0, (2, 64)),
        ("t.q4_1", Q.Q4_1, (2, 64)),
        ("t.q5_0", Q.Q5_0, (2, 64)),
        ("t.q5_1", Q.Q5_1, (2, 64)),
        ("t.q4_k", Q.Q4_K, (2, 256)),
        ("t.q5_k", Q.Q5_K, (2, 256)),
        ("t.q6_k", Q.Q6_K, (1, 512)),
    ]
    for name, qt, shape in cases:
        x = (rng.standard_normal(shape) * 0.7).astype(np.float32)
        if qt == Q.F32:
            data, deq = x, x
            w.add_tensor(name, x)
        elif qt == Q.F16:
            data = x.astype(np.float16)
            deq = data.astype(np.float32)
            w.add_tensor(name, data)
        else:
            try:
                data = quants.quantize(x, qt)
            except NotImplementedError:
                # gguf-py has no quantizer for the k-quants: random blocks with sane f16 scales
                # still pin down the dequantization, which is what a reader must reproduce.
                block, nbytes = gguf.GGML_QUANT_SIZES[qt]
                n_blocks = int(np.prod(shape)) // block
                data = rng.integers(0, 256, size=(n_blocks, nbytes), dtype=np.uint8)
                scale_at = {Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}[qt]
                for b in range(n_blocks):
                    for at in scale_at:
                        data[b, at:at + 2] = np.frombuffer(np.float16(rng.uniform(-0.05, 0.05)).tobytes(), np.uint8)
                data = data.reshape(shape[0], -1)
            deq = quants.dequantize(data, qt).reshape(shape)
            w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qt)
        expected[name] = {"type": qt.name.lower(), "shape": list(shape),
                          "values": [float(v) for v in np.asarray(deq, dtype=np.float32).ravel()]}
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    (OUT / "types.gguf.json").write_text(json.dumps({"tensors": expected}) + "\n")
    print("wrote", path, path.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
