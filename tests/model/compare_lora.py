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
The same adapters as llama.cpp's GGUF LoRA files (`--lora NAME=FILE.gguf`): adapter-a.gguf (F32)
and adapter-b.gguf (F16, loaded beside the PEFT adapter-a) against the same merged GGUFs
(<= 1e-5) and against the PEFT adapter's logits (<= 1e-5); adapter-c.gguf (Q8_0 lora_a, BF16
lora_b, no alpha: scale 1) against its own merge; and the broken GGUF adapters' errors: another
architecture, general.type "model", a missing lora_b, a mis-shaped lora_a, a pair on token_embd
(Unimplemented), an aLoRA, a truncated file.
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
    peft = {}
    for name, loras in (("a", [f"a={d('adapter-a')}"]), ("b", [f"b={d('adapter-b')}", f"a={d('adapter-a')}"]),
                        ("a.gguf", [f"a={d('adapter-a.gguf')}"]),
                        ("b.gguf", [f"b={d('adapter-b.gguf')}", f"a={d('adapter-a')}"]),
                        ("c.gguf", [f"c={d('adapter-c.gguf')}"])):
        ours = tessera_logits(args.bin_dir, base, ids, args.device, args.scratch, loras=loras)
        ref = tessera_logits(args.bin_dir, d(f"merged-{name[0]}.gguf"), ids, args.device, args.scratch)
        e, moved = nrmse(ours, ref), nrmse(plain, ref)
        line = f"adapter {name} ({' '.join(loras)}): unmerged vs merged nrmse {e:.3e} (tol {TOL:g}); "
        if name in ("a", "b"):
            peft[name] = ours
        elif name[0] in peft:  # the GGUF form of a PEFT adapter: the same values, the same scale
            vs_peft = nrmse(ours, peft[name[0]])
            line += f"vs the PEFT adapter {vs_peft:.3e}; "
            if not vs_peft <= TOL:
                failures.append(f"adapter {name}: nrmse vs the PEFT adapter {vs_peft:.3e} > {TOL:g}")
        print(line + f"base vs merged {moved:.3e}; argmax agrees at "
              f"{int(np.sum(ours.argmax(1) == ref.argmax(1)))}/{len(ids)}")
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
        ("gguf other-arch", [f"x={d('gguf-bad-other-arch.gguf')}"],
         ["gguf-bad-other-arch.gguf", "architecture 'qwen2'", "another architecture"]),
        ("gguf model", [f"x={d('gguf-bad-model.gguf')}"], ["gguf-bad-model.gguf", "general.type is 'model'"]),
        ("gguf missing-b", [f"x={d('gguf-bad-missing-b.gguf')}"],
         ["gguf-bad-missing-b.gguf", "blk.1.ffn_down.weight", "lora_a but no lora_b"]),
        ("gguf shape", [f"x={d('gguf-bad-shape.gguf')}"],
         ["gguf-bad-shape.gguf", "blk.0.attn_q.weight", "[8, 65]", "another model size"]),
        ("gguf embd", [f"x={d('gguf-bad-embd.gguf')}"], ["Unimplemented", "token_embd.weight", "not supported"]),
        ("gguf alora", [f"x={d('gguf-bad-alora.gguf')}"], ["adapter.alora.invocation_tokens", "not supported"]),
        ("gguf truncated", [f"x={d('gguf-bad-truncated.gguf')}"], ["gguf-bad-truncated.gguf", "runs past the end"]),
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
