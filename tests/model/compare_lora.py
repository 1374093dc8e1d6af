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
`tessera convert BASE OUT --merge-lora ADAPTER` (Tessera's own offline merge): its file against
numpy's merge (<= 1e-5, PEFT and GGUF adapters), at --lora-scale 0 the base model exactly, merged
into a Q8_0 base against the unmerged adapter on it (within 2x Q8_0's own error on merged
weights, and 10x closer than the base), and
refusals naming the problem; `--lora-scale 0.5` unmerged against Tessera's merge at 0.5 (<= 1e-5), and
`--lora-scale 0` against the base model.
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
    # `tessera convert BASE OUT --merge-lora ADAPTER`: Tessera's merge against numpy's (both run as
    # plain models); at --lora-scale 0 the file's logits are the base model's exactly; on a Q8_0
    # base the merged weights are re-encoded in Q8_0, so the check is against the unmerged adapter
    # on that base, within twice Q8_0's error on merged weights and far closer than the base.
    tessera = os.path.join(args.bin_dir, "tessera")

    def merge(src, adapter, out, *extra):
        r = subprocess.run([tessera, "convert", "-q", src, out, "--merge-lora", adapter, *extra], capture_output=True,
                           text=True)
        print(f"convert --merge-lora {os.path.basename(adapter)} {' '.join(extra)}: exit {r.returncode}: "
              f"{(r.stdout + r.stderr).strip()}")
        return r
    for name, adapter in (("a", d("adapter-a")), ("b.gguf", d("adapter-b.gguf"))):
        out = d(f"tessera-merged-{name}.gguf")
        if merge(base, adapter, out).returncode != 0:
            failures.append(f"merge {name}: convert --merge-lora failed")
            continue
        ours = tessera_logits(args.bin_dir, out, ids, args.device, args.scratch)
        ref = tessera_logits(args.bin_dir, d(f"merged-{name[0]}.gguf"), ids, args.device, args.scratch)
        e = nrmse(ours, ref)
        print(f"merge {name}: Tessera's merge vs numpy's nrmse {e:.3e} (tol {TOL:g})")
        if not e <= TOL:
            failures.append(f"merge {name}: nrmse {e:.3e} > {TOL:g}")
    if merge(base, d("adapter-a"), d("merged-zero.gguf"), "--lora-scale", "0").returncode == 0:
        e = nrmse(tessera_logits(args.bin_dir, d("merged-zero.gguf"), ids, args.device, args.scratch), plain)
        print(f"merge at scale 0 vs the base: nrmse {e:.3e}")
        if e != 0.0:
            failures.append(f"merge at scale 0: nrmse {e:.3e} from the base model, expected 0")
    else:
        failures.append("merge at scale 0 failed")
    # --lora-scale 0.5 unmerged (the lora op at a scaled slot) against Tessera's merge at 0.5 (the
    # offline path, checked against numpy's at 1 above); --lora-scale 0 is the base model.
    if merge(base, d("adapter-a"), d("merged-half.gguf"), "--lora-scale", "0.5").returncode == 0:
        half = tessera_logits(args.bin_dir, base, ids, args.device, args.scratch, loras=[f"a={d('adapter-a')}"],
                              extra=["--lora-scale", "0.5"])
        e = nrmse(half, tessera_logits(args.bin_dir, d("merged-half.gguf"), ids, args.device, args.scratch))
        moved = nrmse(half, peft["a"])
        print(f"--lora-scale 0.5: unmerged vs merged at 0.5 nrmse {e:.3e} (tol {TOL:g}); {moved:.3e} from scale 1")
        if not (e <= TOL and moved >= 1e-2):
            failures.append(f"--lora-scale 0.5: nrmse {e:.3e} vs the merge at 0.5, {moved:.3e} from scale 1")
    else:
        failures.append("merge at scale 0.5 failed")
    zero = tessera_logits(args.bin_dir, base, ids, args.device, args.scratch, loras=[f"a={d('adapter-a')}"],
                          extra=["--lora-scale", "0"])
    if nrmse(zero, plain) > 1e-6:
        failures.append(f"--lora-scale 0: nrmse {nrmse(zero, plain):.3e} from the base model")
    q8 = d("tiny-llama-q8_0.gguf")
    subprocess.run([os.path.join(args.bin_dir, "make_tiny_model"), "--arch", "llama", "--dtype", "q8_0", "--out", q8],
                   check=True, stdout=subprocess.DEVNULL)
    if merge(q8, d("adapter-a"), d("merged-q8.gguf")).returncode == 0:
        unmerged = tessera_logits(args.bin_dir, q8, ids, args.device, args.scratch, loras=[f"a={d('adapter-a')}"])
        q8_plain = tessera_logits(args.bin_dir, q8, ids, args.device, args.scratch)
        merged = tessera_logits(args.bin_dir, d("merged-q8.gguf"), ids, args.device, args.scratch)
        # Q8_0's own encoding error on merged weights: numpy's f32 merge, quantised to Q8_0.
        subprocess.run([tessera, "quantize", "-q", d("merged-a.gguf"), d("merged-a-q8.gguf"), "--type", "q8_0"],
                       check=True, stdout=subprocess.DEVNULL)
        q8_error = nrmse(tessera_logits(args.bin_dir, d("merged-a-q8.gguf"), ids, args.device, args.scratch),
                         tessera_logits(args.bin_dir, d("merged-a.gguf"), ids, args.device, args.scratch))
        e, moved = nrmse(merged, unmerged), nrmse(q8_plain, unmerged)
        print(f"merge into Q8_0: vs the unmerged adapter nrmse {e:.3e} (tol 2x Q8_0's own error on merged weights, "
              f"{q8_error:.3e}), the base is {moved:.3e} away")
        if not (e <= 2 * q8_error and e < moved / 10):
            failures.append(f"merge into Q8_0: nrmse {e:.3e} (Q8_0 error {q8_error:.3e}, base {moved:.3e})")
    else:
        failures.append("merge into Q8_0 failed")
    for what, src, adapter, want in (
            ("merge into a folder", args.scratch, d("adapter-a"), ["needs a GGUF base model"]),
            ("merge a mis-shaped adapter", base, d("bad-shape"), ["self_attn.q_proj", "[8, 65]"])):
        r = merge(src, adapter, d("never.gguf"))
        missing = [w for w in want if w not in r.stderr]
        if r.returncode == 0 or missing or os.path.exists(d("never.gguf")):
            failures.append(f"{what}: exit {r.returncode}, message lacks {missing}: {r.stderr.strip()}")
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
