#!/usr/bin/env python3
"""Writes the golden tensor table gguf_smollm2_test.cpp checks File against.

One line per tensor, as the PyPI `gguf` package (an independent reader) sees it:
  name ggml_type absolute_offset nbytes ne0,ne1,... fnv1a64(bytes)
Run: python3 tests/gguf/make_smollm2_golden.py models-cache/SmolLM2-135M-Instruct.Q4_1.gguf \
       > tests/data/gguf/smollm2_tensors.txt
"""
import sys

import gguf
import numpy as np


def fnv1a64(data: bytes) -> int:
    # Vectorised is not possible for FNV (sequential); plain Python over ~100 MB is slow, so hash
    # 8-byte words instead of bytes: h = (h ^ word) * prime, mod 2^64.
    words = np.frombuffer(data[: len(data) // 8 * 8], dtype=np.uint64)
    h = 0xCBF29CE484222325
    prime = 0x100000001B3
    mask = (1 << 64) - 1
    for w in words.tolist():
        h = ((h ^ w) * prime) & mask
    for b in data[len(data) // 8 * 8:]:
        h = ((h ^ b) * prime) & mask
    return h


def main() -> None:
    r = gguf.GGUFReader(sys.argv[1])
    for t in r.tensors:
        raw = bytes(np.asarray(t.data).view(np.uint8).reshape(-1))
        assert len(raw) == t.n_bytes, (t.name, len(raw), t.n_bytes)
        ne = ",".join(str(int(x)) for x in t.shape)
        print(f"{t.name} {int(t.tensor_type)} {t.data_offset} {t.n_bytes} {ne} {fnv1a64(raw):016x}")


if __name__ == "__main__":
    main()
