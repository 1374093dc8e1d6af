#!/usr/bin/env python3
"""Tessera's Gemma 4 (gemma4) logits vs the independent float64 numpy Gemma 4
(tests/model/gemma4/numpy_gemma4.py, written from HF's modeling code and checked against
transformers itself to 7e-14, docs/gemma4.md).

make_gemma4.py writes two tiny random Gemma 4s as Hugging Face checkpoints and as the GGUFs
llama.cpp's converter writes for them (checked byte-for-byte once, docs/gemma4.md): an E2B-like one
(per-layer embeddings, KV sharing, a double-wide MLP on the sharing layers), a 31B-like one
(global layers whose values are their keys, with fewer KV heads than the sliding layers) and a
26B-A4B-like one (the 31B shape with 8 routed experts, 2 per token, beside each dense FFN). All mix
sliding (head 16, window 8) and global (head 32, proportional RoPE over a quarter of it) layers,
scale each layer's output and softcap the logits. A 40-token prompt (five windows) runs through
`tessera eval` (KV cache f32) whole and in steps of 16 and 5 tokens (each continuing the KV cache of
the one before), and through the oracle on the HF checkpoint: normalised RMS error <= 1e-4 and the
argmax agreeing wherever the oracle's top-2 margin is decisive (compare_numpy.py's checks). The
features are shown to matter: the oracle without the sliding window, the per-layer embeddings, the
value norm, the proportional RoPE, the layer scales, the softcap, the KV sharing or the experts' scales must each be far
(> 20 x the tolerance) from Tessera. Bad files (a missing or mis-shaped tensor, inconsistent keys)
fail with a message naming the file and the tensor or key.
Usage: compare_gemma4.py TESSERA_BIN_DIR SCRATCH_DIR [--device cpu|vulkan]
"""
import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "gemma4"))
import make_gemma4  # noqa: E402
import numpy_gemma4  # noqa: E402
from compare_numpy import compare, device_unusable, nrmse, tessera_logits  # noqa: E402

TOL = 1e-4
N = 40






def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("scratch")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    os.makedirs(args.scratch, exist_ok=True)
    for variant in ("e2b", "31b", "26b"):
        make_gemma4.main(["--out", args.scratch, "--variant", variant])
    e2b, k_eq_v, moe = "tiny-gemma4", "tiny-gemma4-31b", "tiny-gemma4-26b"
    why = device_unusable(args.bin_dir, os.path.join(args.scratch, e2b + "-f32.gguf"), args.device, args.scratch)
    if why:
        print(f"SKIP: [hardware] {why}")  # a device that is absent: the one skip CI allows
        sys.exit(77)
    rng = np.random.default_rng(44)
    ids = [int(x) for x in rng.integers(0, 300, N)]
    failures = []
    for stem, features in ((e2b, ("window", "ple", "v_norm", "proportional", "layer_scalar", "softcap", "share")),
                           (k_eq_v, ("window", "v_norm", "proportional", "layer_scalar", "softcap")),
                           (moe, ("window", "expert_scale"))):
        oracle = numpy_gemma4.load(os.path.join(args.scratch, stem + "-hf"))
        ref = oracle.forward(ids)
        path = os.path.join(args.scratch, stem + "-f32.gguf")
        whole = None
        for chunk in (512, 16, 5):
            ours = tessera_logits(args.bin_dir, path, ids, args.device, args.scratch, chunk)
            whole = ours if whole is None else whole
            failures += compare(f"{stem} chunk {chunk}", ours, ref, TOL)
        # The features matter: without each one the oracle is far from what Tessera computed.
        for f in features:
            setattr(oracle, f, False)
            far = nrmse(whole, oracle.forward(ids))
            setattr(oracle, f, True)
            print(f"{stem}: vs the oracle without {f}: {far:.2e}")
            if not far > 20 * TOL:
                failures.append(f"{stem}: the oracle without {f} is as close ({far:.2e})")
    failures += bad_files(args, ids)
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


def bad_files(args, ids):
    """GGUFs with a missing or mis-shaped tensor, or keys the config refuses: `tessera eval` fails
    with a message naming the file and the tensor or key."""
    s = make_gemma4.Spec(make_gemma4.parse_args(["--out", args.scratch]))
    t = make_gemma4.hf_weights(s, 4)

    def drop(name):
        return lambda ts: ts.__delitem__([n for n, _ in ts].index(name))

    def halve(name):
        def edit(ts):
            i = [n for n, _ in ts].index(name)
            ts[i] = (name, ts[i][1][: ts[i][1].shape[0] // 2])
        return edit

    cases = [
        ("missing tensor", {"edit_tensors": drop("blk.0.attn_v.weight")}, ["blk.0.attn_v.weight"]),
        ("missing per-layer embedding", {"edit_tensors": drop("blk.3.inp_gate.weight")}, ["blk.3.inp_gate.weight"]),
        ("mis-shaped global q", {"edit_tensors": halve("blk.1.attn_q.weight")}, ["blk.1.attn_q.weight"]),
        ("mis-shaped double-wide ffn", {"edit_tensors": halve("blk.5.ffn_up.weight")}, ["blk.5.ffn_up.weight"]),
        ("pattern of the wrong length", {"keys": {"attention.sliding_window_pattern": ([True, False], "bools")}},
         ["gemma4.attention.sliding_window_pattern"]),
        ("per-layer array of the wrong length", {"keys": {"feed_forward_length": ([128, 128], "u32s")}},
         ["gemma4.feed_forward_length", "2 entries"]),
        ("no sliding window", {"keys": {"attention.sliding_window": None}}, ["gemma4.attention.sliding_window"]),
        ("too many shared layers", {"keys": {"attention.shared_kv_layers": 6}}, ["gemma4.attention.shared_kv_layers 6"]),
        ("rope dims past the head", {"keys": {"rope.dimension_count_swa": 18}}, ["rope.dimension_count_swa 18"]),
        ("experts without a count used", {"keys": {"expert_count": 8}}, ["gemma4.expert_used_count"]),
    ]
    sm = make_gemma4.Spec(make_gemma4.parse_args(["--out", args.scratch, "--variant", "26b"]))
    tm = make_gemma4.hf_weights(sm, 4)
    cases += [
        ("missing expert scales", {"edit_tensors": drop("blk.1.ffn_down_exps.scale"), "spec": sm, "weights": tm},
         ["blk.1.ffn_down_exps.scale"]),
        ("mis-shaped experts", {"edit_tensors": halve("blk.4.ffn_gate_up_exps.weight"), "spec": sm, "weights": tm},
         ["blk.4.ffn_gate_up_exps.weight"]),
        ("too many experts used", {"keys": {"expert_used_count": 9}, "spec": sm, "weights": tm}, ["expert_used_count 9"]),
    ]
    problems = []
    for name, kw, want in cases:
        path = os.path.join(args.scratch, "bad-" + name.replace(" ", "-") + ".gguf")
        spec, weights = kw.pop("spec", s), kw.pop("weights", t)
        make_gemma4.write_gguf(path, spec, weights, **kw)
        r = subprocess.run([os.path.join(args.bin_dir, "tessera"), "eval", "-q", "-m", path, "--device", args.device,
                            "--tokens", ",".join(map(str, ids[:4])), "-o", os.path.join(args.scratch, "bad.npy")],
                           capture_output=True, text=True)
        msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        print(f"{name}: exit {r.returncode}: {msg}")
        if r.returncode == 0 or not all(w in r.stderr for w in want + [os.path.basename(path)]):
            problems.append(f"{name}: expected a failure naming {want} and the file, got exit {r.returncode}: {msg}")
    return problems


if __name__ == "__main__":
    main()
