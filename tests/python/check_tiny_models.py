#!/usr/bin/env python3
"""Checks numpy_llama.py on the tiny models from make_tiny_model (run by CTest, label `model`).

For each architecture the five dtypes are quantisations of one float model, so:
  * every dtype's logits are finite and close to the f32 model's (NMSE below a per-dtype bound
    that a wrong block layout or a wrong dequantisation would break by orders of magnitude);
  * the forward pass is causal: a prompt's logits equal the first rows of a longer prompt's;
  * the output is not position-blind: swapping two prompt tokens changes the last logits.
Usage: check_tiny_models.py MAKE_TINY_MODEL_BINARY SCRATCH_DIR
"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_llama  # noqa: E402

NMSE_BOUND = {"f32": 0.0, "f16": 1e-5, "q8_0": 1e-3, "q4_0": 0.15, "q4_1": 0.15}
PROMPT = [256, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100]  # <bos>"Hello, world"


def nmse(a, ref):
    return float(np.sum((a - ref) ** 2) / np.sum(ref ** 2))


def main():
    tool, scratch = sys.argv[1], sys.argv[2]
    os.makedirs(scratch, exist_ok=True)
    subprocess.run([tool, "--all", scratch], check=True, stdout=subprocess.DEVNULL)
    failures = []
    for arch in ("llama", "qwen3"):
        ref = None
        for dtype, bound in NMSE_BOUND.items():
            m = numpy_llama.Model(f"{scratch}/tiny-{arch}-{dtype}.gguf")
            logits = numpy_llama.forward(m, PROMPT)
            if logits.shape != (len(PROMPT), 260) or not np.all(np.isfinite(logits)):
                failures.append(f"{arch} {dtype}: bad logits shape {logits.shape} or non-finite")
                continue
            if ref is None:
                ref = logits
            err = nmse(logits, ref)
            print(f"{arch:6s} {dtype:5s} nmse vs f32 {err:.3e} (bound {bound:g})")
            if err > bound:
                failures.append(f"{arch} {dtype}: nmse {err:.3e} > {bound:g}")
        m = numpy_llama.Model(f"{scratch}/tiny-{arch}-f32.gguf")
        short = numpy_llama.forward(m, PROMPT[:5])
        causal_err = float(np.max(np.abs(short - ref[:5])))
        swapped = PROMPT[:1] + PROMPT[2:3] + PROMPT[1:2] + PROMPT[3:]
        moved = float(np.max(np.abs(numpy_llama.forward(m, swapped)[-1] - ref[-1])))
        print(f"{arch:6s} causal max diff {causal_err:.3e}, swap-two-tokens max diff {moved:.3e}")
        if causal_err > 1e-9:
            failures.append(f"{arch}: not causal (max diff {causal_err:.3e})")
        if moved < 1e-3:
            failures.append(f"{arch}: swapping tokens 1 and 2 did not change the logits")
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
