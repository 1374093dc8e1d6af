#!/usr/bin/env python3
"""LoRA unmerged (the lora op, `--lora NAME=PATH`) vs merged offline (tests/model/lora/make_lora.py).

A tiny random llama GGUF (make_tiny_model, f32; SmolLM2's layout in miniature) gets two random
PEFT adapters; a 24-token prompt goes through `tessera eval` three ways per adapter: the base
model, the base model with the adapter applied unmerged, and the GGUF whose weights numpy merged
(W + scale * B @ A, float64, written as f32). Checks:
  * unmerged vs merged: normalised RMS error sqrt(sum((ours - ref)^2) / sum(ref^2)) <= 1e-5
    (f32 arithmetic in a different order: x W^T + s (x A^T) B^T vs x (W + s B A)^T);
  * base vs merged >= 1e-2, so the adapter is not a no-op and the check above means something;
  * adapter-b loaded before adapter-a applies alone (slots of ranks 4 and 8 share padded tensors);
  * bad adapters fail with errors naming the problem: a mis-shaped tensor, a missing lora_B, an
    adapter for another architecture, a missing folder, a malformed --lora.
Usage: compare_lora.py TESSERA_BIN_DIR SCRATCH_DIR [--device cpu]
Exit 77 (skip) only when the device is not usable on this machine.
"""
import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare_numpy import device_unusable, nrmse, tessera_logits  # noqa: E402

TOL = 1e-5


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("scratch")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    os.makedirs(args.scratch, exist_ok=True)
    base = os.path.join(args.scratch, "tiny-llama-f32.gguf")
    subprocess.run([os.path.join(args.bin_dir, "make_tiny_model"), "--arch", "llama", "--dtype", "f32", "--out", base],
                   check=True, stdout=subprocess.DEVNULL)
    why = device_unusable(args.bin_dir, base, args.device, args.scratch)
    if why:
        print(f"SKIP: [hardware] {why}")  # a device that is absent: the one skip CI allows
        sys.exit(77)
    subprocess.run([sys.executable, os.path.join(HERE, "lora", "make_lora.py"), base, args.scratch], check=True)
    d = lambda name: os.path.join(args.scratch, name)  # noqa: E731
    ids = [int(x) for x in np.random.default_rng(7).integers(0, 256, 24)]
    failures = []
    plain = tessera_logits(args.bin_dir, base, ids, args.device, args.scratch)
    for name, loras in (("a", [f"a={d('adapter-a')}"]), ("b", [f"b={d('adapter-b')}", f"a={d('adapter-a')}"])):
        ours = tessera_logits(args.bin_dir, base, ids, args.device, args.scratch, loras=loras)
        ref = tessera_logits(args.bin_dir, d(f"merged-{name}.gguf"), ids, args.device, args.scratch)
        e, moved = nrmse(ours, ref), nrmse(plain, ref)
        print(f"adapter {name} ({' '.join(loras)}): unmerged vs merged nrmse {e:.3e} (tol {TOL:g}); "
              f"base vs merged {moved:.3e}; argmax agrees at {int(np.sum(ours.argmax(1) == ref.argmax(1)))}/{len(ids)}")
        if not e <= TOL:
            failures.append(f"adapter {name}: nrmse {e:.3e} > {TOL:g}")
        if not moved >= 1e-2:
            failures.append(f"adapter {name}: the merged model is within {moved:.3e} of the base (no-op adapter?)")
    bad = [
        ("bad-shape", [f"x={d('bad-shape')}"], ["self_attn.q_proj", "[8, 65]", "another model size"]),
        ("missing-b", [f"x={d('missing-b')}"], ["mlp.down_proj", "lora_A but no lora_B"]),
        ("other-arch", [f"x={d('other-arch')}"], ["transformer.h.0.attn.c_attn", "another architecture"]),
        ("missing folder", [f"x={d('no-such-adapter')}"], ["adapter 'x'", "adapter_config.json"]),
        ("malformed --lora", [d("adapter-a")], ["--lora wants NAME=PATH"]),
        ("same name twice", [f"a={d('adapter-a')}", f"a={d('adapter-b')}"], ["already loaded"]),
    ]
    for what, loras, want in bad:
        cmd = [os.path.join(args.bin_dir, "tessera"), "eval", "-q", "-m", base, "--device", args.device, "--tokens",
               "1,2,3", "-o", d("bad.npy")]
        for spec in loras:
            cmd += ["--lora", spec]
        r = subprocess.run(cmd, capture_output=True, text=True)
        missing = [w for w in want if w not in r.stderr]
        print(f"{what}: exit {r.returncode}: {r.stderr.strip()}")
        if r.returncode == 0 or missing:
            failures.append(f"{what}: exit {r.returncode}, message lacks {missing}: {r.stderr.strip()}")
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
