#!/usr/bin/env python3
"""Checks Tessera's dequantisation of GGUF blocks against the gguf package, bit for bit.

Input file (written by tests/quant/golden.cpp): b"TQC1", u32 count, then per record
u32 gguf type, u32 n elements, u32 n bytes, bytes, f32 ours * n.
Exit 0 when every record matches, 1 on a mismatch (printed), 77 when gguf/numpy are missing.
"""
import struct
import sys

try:
    import numpy as np
    import gguf
except ImportError as e:  # the test skips
    print(f"gguf_check: {e}")
    sys.exit(77)


def main(path):
    data = open(path, "rb").read()
    assert data[:4] == b"TQC1", "bad magic"
    (count,) = struct.unpack_from("<I", data, 4)
    off, bad = 8, 0
    for i in range(count):
        qtype, n, nbytes = struct.unpack_from("<3I", data, off)
        off += 12
        blocks = np.frombuffer(data, np.uint8, nbytes, off)
        off += nbytes
        ours = np.frombuffer(data, "<f4", n, off)
        off += 4 * n
        ref = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType(qtype)).astype(np.float32).reshape(-1)
        diff = np.nonzero(ref.view(np.uint32) != ours.view(np.uint32))[0]
        if diff.size:
            bad += 1
            j = diff[0]
            name = gguf.GGMLQuantizationType(qtype).name
            print(f"record {i} ({name}): {diff.size} of {n} differ; first at {j}: ours {ours[j]!r} gguf {ref[j]!r}")
    print(f"gguf_check: {count} records, {bad} mismatching")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
