#!/usr/bin/env python3
"""Gemma 3 270M (Q4_K_M GGUF, fetched by .ci/fetch-model) in Tessera vs the independent numpy
forward pass tests/python/numpy_gemma3.py (float64, weights dequantised by the `gguf` package).

1. The GGUF norm convention, from the numbers (CPU run only): Gemma's RMSNorm multiplies by
   (1 + w). With the stored weights used as the multiplier the oracle's perplexity on a plain
   sentence is low; adding 1 again must make it explode. So llama.cpp's converter stored 1 + w,
   and Tessera's plain rms_norm is right (models/arch/gemma3.h).
2. Three short prompts (BOS + text, tokenised by `tessera tokenize`): all positions' logits.
3. A 600-token prompt (alice_ch1.txt), beyond the 512-token sliding window of the local layers:
   the last 24 positions' logits (`tessera eval --last`), so the window and the local RoPE base
   are exercised.
Checks as compare_numpy.py: normalised RMS error <= TOL and the argmax agrees wherever the
reference's top-2 margin exceeds 2 * TOL * rms(row). TOL 5e-2 as for compare_numpy.py's 4-bit
models (stated, not fitted): the CPU kernels quantise activations to 8 bits per block.
Usage: compare_gemma3.py TESSERA_BIN_DIR SCRATCH_DIR MODELS_DIR [--device cpu]
Exit 77 (skip) when the device is not usable here; a missing model skips on a developer's
machine and fails under CI=true.
"""
import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import numpy_gemma3  # noqa: E402
from compare_numpy import compare  # noqa: E402

MODEL = "gemma-3-270m-q4_k_m.gguf"
TOL = 5e-2
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
]
LONG_TOKENS, LONG_ROWS = 600, 24


def tokenize(bin_dir, model, text):
    out = subprocess.run([os.path.join(bin_dir, "tessera"), "tokenize", "-q", "-m", model, "--format", "csv", "-p", text],
                         check=True, capture_output=True, text=True).stdout
    return [int(x) for x in out.strip().split(",")]


def tessera_logits(bin_dir, model, ids, device, scratch, last=0):
    out = os.path.join(scratch, "ours.npy")
    cmd = [os.path.join(bin_dir, "tessera"), "eval", "-q", "-m", model, "--device", device, "--kv-dtype", "f32",
           "--tokens", ",".join(map(str, ids)), "-o", out]
    if last:
        cmd += ["--last", str(last)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        if "is unavailable" in r.stderr or "no device '" in r.stderr:
            print(f"SKIP: [hardware] {r.stderr.strip()}")  # a device that is absent: the one skip CI allows
            sys.exit(77)
        raise SystemExit(f"tessera eval failed: {r.stderr}")
    return np.load(out).astype(np.float64)


def perplexity(logits, ids):
    s = logits - logits.max(axis=-1, keepdims=True)
    logp = s - np.log(np.exp(s).sum(axis=-1, keepdims=True))
    return float(np.exp(-np.mean([logp[i, ids[i + 1]] for i in range(len(ids) - 1)])))


def check_norm_convention(m, ids):
    """Failures unless the stored norm weights are Gemma's multipliers (1 + w) already."""
    ppl = {}
    for shift in (0.0, 1.0):
        m.norm_shift = shift
        ppl[shift] = perplexity(numpy_gemma3.forward(m, ids), ids)
    m.norm_shift = numpy_gemma3.NORM_SHIFT
    print(f"oracle perplexity over {len(ids)} tokens: {ppl[0.0]:.2f} with the stored norm weights, "
          f"{ppl[1.0]:.3g} with 1 added")
    if not (ppl[0.0] < 40 and ppl[1.0] > 100 * ppl[0.0]):
        return [f"norm convention: perplexity {ppl[0.0]:.3g} (stored) vs {ppl[1.0]:.3g} (+1) does not single out "
                "the stored weights as the multiplier"]
    return []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("scratch")
    ap.add_argument("models_dir")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    os.makedirs(args.scratch, exist_ok=True)
    path = os.path.join(args.models_dir, MODEL)
    if not os.path.exists(path):
        print(f"SKIP: [missing] {path} (run .ci/fetch-model)")
        sys.exit(1 if os.environ.get("CI") == "true" else 77)
    m = numpy_gemma3.Model(path)
    failures = []
    prompts = [tokenize(args.bin_dir, path, p) for p in PROMPTS]
    for i, ids in enumerate(prompts):
        ours = tessera_logits(args.bin_dir, path, ids, args.device, args.scratch)
        ref = numpy_gemma3.forward(m, ids)
        failures += compare(f"gemma3-270m prompt {i} ({len(ids)} tok)", ours, ref, TOL)
    if args.device == "cpu":
        failures += check_norm_convention(m, prompts[2])
    with open(os.path.join(HERE, "..", "data", "text", "alice_ch1.txt"), encoding="utf-8") as f:
        ids = tokenize(args.bin_dir, path, f.read())[:LONG_TOKENS]
    ours = tessera_logits(args.bin_dir, path, ids, args.device, args.scratch, last=LONG_ROWS)
    ref = numpy_gemma3.forward(m, ids, rows=LONG_ROWS)
    failures += compare(f"gemma3-270m {len(ids)} tok, last {LONG_ROWS}", ours, ref, TOL)
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
