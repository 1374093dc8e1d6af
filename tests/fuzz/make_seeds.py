#!/usr/bin/env python3
"""Writes the GGUF fuzz seed corpus (tests/fuzz/corpus/) with the PyPI `gguf` writer, an
implementation independent of ours, so the seeds are not shaped by our own Writer's habits.
Small files (< 4 KiB) keep libFuzzer fast. Run: python3 tests/fuzz/make_seeds.py tests/fuzz/corpus
"""
import os
import sys

import gguf
import numpy as np


def write(path, arch, kv, tensors, alignment=None):
    w = gguf.GGUFWriter(path, arch)
    if alignment:
        w.add_custom_alignment(alignment)
    for fn, key, val in kv:
        getattr(w, fn)(key, val)
    for name, arr, qtype in tensors:
        if qtype in (None, gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            w.add_tensor(name, arr)
        else:
            q = gguf.quants.quantize(arr, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    Q = gguf.GGMLQuantizationType
    every_kv = [
        ("add_uint8", "t.u8", 7), ("add_int8", "t.i8", -7), ("add_uint16", "t.u16", 700),
        ("add_int16", "t.i16", -700), ("add_uint32", "t.u32", 70000), ("add_int32", "t.i32", -70000),
        ("add_float32", "t.f32", 0.5), ("add_bool", "t.bool", True), ("add_string", "t.s", "hi"),
        ("add_uint64", "t.u64", 1 << 40), ("add_int64", "t.i64", -(1 << 40)),
        ("add_float64", "t.f64", 0.25), ("add_array", "t.arr", [1, 2, 3]),
        ("add_array", "t.sarr", ["a", "bb"]), ("add_array", "t.nested", [[1, 2], [3]]),
    ]
    write(f"{out}/kv_only.gguf", "llama", every_kv, [])
    write(f"{out}/tensors.gguf", "llama", [("add_uint32", "llama.block_count", 1)], [
        ("a.weight", rng.standard_normal((2, 32)).astype(np.float32), Q.F32),
        ("b.weight", rng.standard_normal((3, 8)).astype(np.float16), Q.F16),
        ("c.weight", rng.standard_normal((2, 64)).astype(np.float32), Q.Q8_0),
        ("d.weight", rng.standard_normal((1, 32)).astype(np.float32), Q.Q4_0),
        ("e.weight", rng.standard_normal((1, 32)).astype(np.float32), Q.Q4_1),
        ("f.weight", rng.standard_normal((2, 2, 2, 4)).astype(np.float32), Q.F32),
    ])
    write(f"{out}/aligned64.gguf", "qwen3", [("add_string", "general.name", "x")], [
        ("x", rng.standard_normal((4,)).astype(np.float32), Q.F32),
        ("y", rng.standard_normal((4,)).astype(np.float32), Q.F32),
    ], alignment=64)


if __name__ == "__main__":
    main(sys.argv[1])
