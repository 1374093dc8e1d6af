#!/usr/bin/env python3
"""Tessera's Phi-3 logits vs the independent float64 numpy Phi-3 (tests/python/numpy_phi3.py).

Tiny random-weight phi3 GGUFs (tests/python/make_tiny_phi3.py: fused attn_qkv and ffn_up, GQA)
run a 64-token prompt through `tessera eval` (KV cache f32) and through the oracle, with
compare_numpy.py's checks and tolerances (normalised RMS error <= TOL[dtype]; the argmax agrees
wherever the oracle's top-2 margin is decisive):
  f32, q8_0        sliding window 48, so the last 16 positions depend on it
  longrope-f32     rope_factors_long and the attention factor (context 512 > original 128)
  shortrope-f32    rope_factors_short (context 128 = original)
Each feature is also shown to matter: the oracle with it switched off (no window; no factors)
must be far (> 20 x TOL) from Tessera, or the test would not notice it missing.
The f32 and longrope models written as Hugging Face checkpoints (qkv_proj, gate_up_proj,
rope_scaling long_factor/short_factor in config.json) hold the same weights: their logits must
match the oracle too.
Usage: compare_phi3.py TESSERA_BIN_DIR SCRATCH_DIR [--device cpu|vulkan]
"""
import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import numpy_phi3  # noqa: E402
from compare_numpy import N_TOKENS, TOL, compare, device_unusable, tessera_logits  # noqa: E402


def nrmse(a, b):
    return float(np.sqrt(np.sum((a - b) ** 2) / np.sum(b ** 2)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("scratch")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    os.makedirs(args.scratch, exist_ok=True)
    subprocess.run([sys.executable, os.path.join(HERE, "..", "python", "make_tiny_phi3.py"), args.scratch], check=True)
    why = device_unusable(args.bin_dir, os.path.join(args.scratch, "tiny-phi3-f32.gguf"), args.device, args.scratch)
    if why:
        print(f"SKIP: [hardware] {why}")  # a device that is absent: the one skip CI allows
        sys.exit(77)
    rng = np.random.default_rng(2024)
    ids = [int(x) for x in rng.integers(0, 260, N_TOKENS)]
    failures = []
    for variant, tol in (("f32", TOL["f32"]), ("q8_0", TOL["q8_0"]), ("longrope-f32", TOL["f32"]),
                         ("shortrope-f32", TOL["f32"])):
        path = os.path.join(args.scratch, f"tiny-phi3-{variant}.gguf")
        m = numpy_phi3.Phi3(path)
        ref = numpy_phi3.forward(m, ids)
        ours = tessera_logits(args.bin_dir, path, ids, args.device, args.scratch)
        failures += compare(f"tiny phi3 {variant} ({args.device})", ours, ref, tol)
        if variant == "q8_0" and args.device == "cpu":
            # The CPU's error here is its 8-bit activations; the scalar reference device keeps f32
            # activations, so the q8_0 rows split out of the fused tensors must give the f32 tolerance.
            exact = tessera_logits(args.bin_dir, path, ids, "reference", args.scratch)
            failures += compare("tiny phi3 q8_0 (reference device)", exact, ref, TOL["f32"])
        if variant in ("f32", "longrope-f32", "shortrope-f32"):
            if variant == "f32":
                what, m.window = "without the sliding window", 0
            else:
                what, m.ext, m.mscale = "without rope factors", np.ones_like(m.ext), 1.0
            off = nrmse(ours, numpy_phi3.forward(m, ids))
            print(f"  oracle {what}: nrmse {off:.3e} from ours")
            if off < 20 * tol:
                failures.append(f"{variant}: the oracle {what} is only {off:.3e} away: the test cannot see that feature")
    for hf, gguf_name in (("tiny-phi3-hf", "tiny-phi3-f32.gguf"), ("tiny-phi3-longrope-hf", "tiny-phi3-longrope-f32.gguf")):
        ref = numpy_phi3.forward(numpy_phi3.Phi3(os.path.join(args.scratch, gguf_name)), ids)
        ours = tessera_logits(args.bin_dir, os.path.join(args.scratch, hf), ids, args.device, args.scratch)
        failures += compare(f"tiny phi3 {hf} ({args.device})", ours, ref, TOL["f32"])
    # Bad input: a longrope factor list of the wrong length is refused naming the key.
    import json
    import shutil
    bad = os.path.join(args.scratch, "tiny-phi3-badrope-hf")
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(os.path.join(args.scratch, "tiny-phi3-longrope-hf"), bad)
    with open(os.path.join(bad, "config.json")) as f:
        cfg = json.load(f)
    cfg["rope_scaling"]["long_factor"] = cfg["rope_scaling"]["long_factor"][:-1]
    with open(os.path.join(bad, "config.json"), "w") as f:
        json.dump(cfg, f)
    r = subprocess.run([os.path.join(args.bin_dir, "tessera"), "eval", "-q", "-m", bad, "--device", args.device, "--tokens", "1",
                        "-o", os.path.join(args.scratch, "bad.npy")], capture_output=True, text=True)
    want = "config.json: rope_scaling.long_factor must be a list of 8 numbers"
    print(f"bad long_factor: exit {r.returncode}, {r.stderr.strip()}")
    if r.returncode == 0 or want not in r.stderr:
        failures.append(f"a short long_factor list: expected an error with {want!r}")
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
