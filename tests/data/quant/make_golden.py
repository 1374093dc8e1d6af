#!/usr/bin/env python3
"""Writes the golden files of tests/quant/ (run once; the outputs are committed).

gguf_golden.bin: for GGUF block types, bytes and the gguf package's dequantisation of them
(gguf.quants.dequantize), plus, where the package has a quantizer, the f32 input it quantised.
  header: b"TQG1", u32 record count
  record: u32 gguf type, u32 kind (0 = random bytes, 1 = package-quantised input, 2 = SmolLM2
          tensor rows), u32 n elements, u32 n bytes, [f32 input * n if kind 1], bytes,
          f32 expected * n
fp8_golden.bin: ml_dtypes references for the scalar codecs.
  header: b"TQF1"; then sections: u32 tag, u32 count, payload (see write_fp8 below).

Usage: make_golden.py OUT_DIR [SmolLM2 .gguf]
"""
import struct
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
import ml_dtypes

rng = np.random.default_rng(1234)


def f16_bytes(v):
    return np.asarray(v, dtype=np.float16).view(np.uint8)


def random_blocks(qtype, n_blocks):
    """Random bytes, with every f16 scale field replaced by a finite value (random f16 bits could
    be NaN, whose payload the two sides need not agree on)."""
    bs, ts = gguf.GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
    scale = lambda: f16_bytes(rng.normal(0, 0.05, size=n_blocks)).reshape(n_blocks, 2)
    if qtype in (T.Q5_0, T.Q4_0, T.Q8_0):
        b[:, 0:2] = scale()
    elif qtype in (T.Q5_1, T.Q4_1, T.Q4_K, T.Q5_K):
        b[:, 0:2] = scale()
        b[:, 2:4] = scale()
    elif qtype == T.Q6_K:
        b[:, 208:210] = scale()
    elif qtype == T.MXFP4:
        b[:4, 0] = [0, 1, 254, 255]  # E8M0 edge codes: subnormal halves, 2^127, 0xFF
    elif qtype == T.NVFP4:
        b[0, 0:4] = [0x00, 0x7F, 0xFF, 0x80]  # zero, NaN-as-zero, bit 7 ignored
    return b


def quant_input(qtype, n_blocks):
    bs, _ = gguf.GGML_QUANT_SIZES[qtype]
    x = rng.normal(0, 1, size=(n_blocks, bs)).astype(np.float32)
    x[1] *= 100.0 * (rng.integers(0, 16, size=bs) == 0) + 1.0  # outliers
    x[2] = 0.0                                                 # all-zero block
    x[3] = np.round(x[3] * 4) / 4                              # many exact ties
    x[4] = np.abs(x[4]) + 1.0                                  # all positive
    return x.reshape(-1)


def record(qtype, kind, data, x=None):
    n = gguf.GGML_QUANT_SIZES[qtype][0] * (data.size // gguf.GGML_QUANT_SIZES[qtype][1])
    y = gguf.quants.dequantize(data.reshape(-1), qtype).astype(np.float32).reshape(-1)
    assert y.size == n
    out = struct.pack("<4I", int(qtype), kind, n, data.size)
    if x is not None:
        out += x.astype("<f4").tobytes()
    return out + data.astype(np.uint8).tobytes() + y.astype("<f4").tobytes()


def smollm2_rows(path):
    r = gguf.GGUFReader(path)
    out = []
    for t in r.tensors:
        if t.name in ("blk.0.attn_q.weight", "token_embd.weight", "blk.29.ffn_down.weight"):
            rows = np.asarray(t.data)[:2]  # two rows of bytes
            out.append(record(t.tensor_type, 2, rows.reshape(-1)))
    return out


def write_gguf(out_dir, model):
    recs = []
    for q in (T.Q4_0, T.Q4_1, T.Q8_0, T.Q5_0, T.Q5_1, T.MXFP4):
        x = quant_input(q, 8)
        recs.append(record(q, 1, gguf.quants.quantize(x, q).reshape(-1), x))
    for q in (T.Q5_0, T.Q5_1, T.Q4_K, T.Q5_K, T.Q6_K, T.MXFP4, T.NVFP4):
        recs.append(record(q, 0, random_blocks(q, 6).reshape(-1)))
    if model:
        recs += smollm2_rows(model)
    (out_dir / "gguf_golden.bin").write_bytes(b"TQG1" + struct.pack("<I", len(recs)) + b"".join(recs))


def write_fp8(out_dir):
    codes = np.arange(256, dtype=np.uint8)
    sections = []

    def section(tag, payload_arrays, count):
        sections.append(struct.pack("<2I", tag, count) + b"".join(a.tobytes() for a in payload_arrays))

    # 1, 2: decode of all 256 codes (E4M3FN, E5M2) as f32
    section(1, [codes.view(ml_dtypes.float8_e4m3fn).astype("<f4")], 256)
    section(2, [codes.view(ml_dtypes.float8_e5m2).astype("<f4")], 256)
    # 3, 4: encode (RNE) of values inside the finite range: f32 input, u8 code
    for tag, dt, mx in ((3, ml_dtypes.float8_e4m3fn, 448.0), (4, ml_dtypes.float8_e5m2, 57344.0)):
        grid = codes.view(dt).astype(np.float64)
        grid = np.unique(grid[np.isfinite(grid) & (grid >= 0)])
        mids = (grid[:-1] + grid[1:]) / 2                      # exact ties
        rnd = np.exp(rng.uniform(np.log(1e-9), np.log(mx), 4000)) * rng.choice([-1, 1], 4000)
        x = np.concatenate([grid, -grid, mids, -mids, rnd, np.nextafter(mids, 0), np.nextafter(mids, 1e9)])
        x = x[np.abs(x) <= mx].astype(np.float32)
        section(tag, [x.astype("<f4"), x.astype(dt).view(np.uint8)], x.size)
    # 5: E2M1 decode (16 codes); 6: E8M0 decode (256 codes, 0xFF is NaN there)
    section(5, [np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype("<f4")], 16)
    section(6, [codes.view(ml_dtypes.float8_e8m0fnu).astype("<f4")], 256)
    (out_dir / "fp8_golden.bin").write_bytes(b"TQF1" + struct.pack("<I", len(sections)) + b"".join(sections))


if __name__ == "__main__":
    out = Path(sys.argv[1])
    write_gguf(out, sys.argv[2] if len(sys.argv) > 2 else None)
    write_fp8(out)
