#!/usr/bin/env python3
"""Tessera's gpt-oss logits vs the independent float64 numpy gpt-oss (tests/model/gpt_oss/numpy_gpt_oss.py,
written from transformers' modeling_gpt_oss.py and checked against transformers itself,
tests/model/gpt_oss/NOTES.md).

make_gpt_oss.py writes a tiny random gpt-oss as a Hugging Face checkpoint and as the GGUFs
llama.cpp's converter writes for it (MXFP4 experts, and f32 ones). A 64-token prompt (four times
the 16-token window, past YaRN's 32-token original context) runs through `tessera eval` (KV cache
f32) whole and in steps of 16 and 5 tokens (each continuing the KV cache of the one before), and
through the oracle: normalised RMS error <= 1e-4 (MXFP4 experts on the CPU, whose block-format
kernels quantise activations to int8: 5e-2) and the argmax agreeing wherever the oracle's
top-2 margin is decisive (compare_numpy.py's checks). A model with the released 128-token window
runs a 150-token prompt whole and in steps of 48. The features are shown to matter: the oracle
without the sinks, without the window (every layer full) and without YaRN's rounded correction
range (truncate false, as the released config asks) must each be far (> 20 x the tolerance) from
Tessera. The Hugging Face folder itself (transformers' dequantised layout: experts transposed, gate
and up interleaved) loads to the same tolerance as the f32 GGUF, and stored as BF16 against the
oracle on the same bf16-rounded weights; in the released layout (experts as MXFP4 _blocks and
_scales) its logits must equal the MXFP4 GGUF's exactly. Bad files (a missing sink tensor, a
mis-shaped expert bias, a missing window key, an expert width that is no whole number of MXFP4
blocks) and bad or unsupported folders (a missing sink or expert bias, a mis-shaped gate_up_proj, no
sliding_window, another swiglu_limit, MXFP4 blocks without their scales) fail naming the file
and the tensor or key; `tessera convert` refuses a gpt-oss folder; and `tessera quantize` keeps the
[E, N] expert biases in f32.
Usage: compare_gpt_oss.py TESSERA_BIN_DIR SCRATCH_DIR [--device cpu|vulkan]
"""
import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "gpt_oss"))
import numpy_gpt_oss  # noqa: E402
from compare_numpy import (bad_hf_folder_problems, compare, convert_refusal_problems, device_unusable,  # noqa: E402
                           nrmse, tessera_logits)

TOL = 1e-4  # f32 experts on every device, MXFP4 experts where the matmul decodes them to float
# MXFP4 experts on the CPU, whose block-format kernels quantise the activations to int8 per 32
# (docs/quant.md): measured 3.1e-2 here (each matmul ~1e-2, and near-tie router choices flip), the
# same file within 1e-6 on Vulkan. As compare_numpy.py's 4-bit formats.
TOL_MXFP4_CPU = 5e-2
N = 64






def make(scratch, name, extra):
    out = os.path.join(scratch, name)
    subprocess.run([sys.executable, os.path.join(HERE, "gpt_oss", "make_gpt_oss.py"), "--out", out] + extra, check=True,
                   stdout=subprocess.DEVNULL)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("scratch")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    os.makedirs(args.scratch, exist_ok=True)
    small = make(args.scratch, "window16", [])
    real = make(args.scratch, "window128", ["--window", "128", "--yarn-original", "64", "--seed", "21"])
    why = device_unusable(args.bin_dir, os.path.join(small, "tiny-gpt-oss-mxfp4.gguf"), args.device, args.scratch)
    if why:
        print(f"SKIP: [hardware] {why}")  # a device that is absent: the one skip CI allows
        sys.exit(77)
    rng = np.random.default_rng(120)
    failures = []
    runs = [(small, N, (512, 16, 5)), (real, 150, (512, 48))]
    for folder, n, chunks in runs:
        ids = [int(x) for x in rng.integers(0, 264, n)]
        oracle = numpy_gpt_oss.load(os.path.join(folder, "tiny-gpt-oss-hf"))
        ref = oracle.forward(ids)
        name = os.path.basename(folder)
        mxfp4_tol = TOL_MXFP4_CPU if args.device == "cpu" else TOL
        for gguf, tol in (("tiny-gpt-oss-f32.gguf", TOL), ("tiny-gpt-oss-mxfp4.gguf", mxfp4_tol), ("tiny-gpt-oss-hf", TOL)):
            for chunk in chunks:
                ours = tessera_logits(args.bin_dir, os.path.join(folder, gguf), ids, args.device, args.scratch, chunk)
                print(f"{name}/{gguf} {n} tokens, chunk {chunk}: normalised RMS {nrmse(ours, ref):.2e}")
                failures += compare(f"{name}/{gguf} chunk {chunk}", ours, ref, tol)
        # The features matter: without each, the oracle is far from what Tessera computed.
        ours = tessera_logits(args.bin_dir, os.path.join(folder, "tiny-gpt-oss-f32.gguf"), ids, args.device,
                              args.scratch, 512)
        for what, attr, value in (("without the sinks", "sinks", False), ("without the window", "window", False),
                                  ("with YaRN's range unrounded", "truncate", False)):
            old = getattr(oracle, attr)
            setattr(oracle, attr, value)
            far = nrmse(ours, oracle.forward(ids))
            setattr(oracle, attr, old)
            print(f"{name}: vs an oracle {what} {far:.2e}")
            if not far > 20 * TOL:
                failures.append(f"{name}: the oracle {what} is as close ({far:.2e})")
    # The released layout: experts as MXFP4 blocks in the folder. Its weights are the GGUF's MXFP4
    # blocks exactly, so Tessera's logits must equal those of the MXFP4 GGUF; and the oracle's.
    for folder, n, _ in runs:
        ids = [int(x) for x in rng.integers(0, 264, n)]
        name = os.path.basename(folder)
        mxfp4_hf = mxfp4_checkpoint(folder)
        ours = tessera_logits(args.bin_dir, os.path.join(folder, mxfp4_hf), ids, args.device, args.scratch, 512)
        gguf = tessera_logits(args.bin_dir, os.path.join(folder, "tiny-gpt-oss-mxfp4.gguf"), ids, args.device, args.scratch,
                              512)
        ref = numpy_gpt_oss.load(os.path.join(folder, "tiny-gpt-oss-hf")).forward(ids)
        print(f"{name}/{mxfp4_hf}: max |difference| from the MXFP4 GGUF {np.max(np.abs(ours - gguf)):.2e}")
        if not np.array_equal(ours, gguf):
            failures.append(f"{name}/{mxfp4_hf}: logits differ from the MXFP4 GGUF's ({np.max(np.abs(ours - gguf)):.2e})")
        failures += compare(f"{name}/{mxfp4_hf} chunk 512", ours, ref, TOL_MXFP4_CPU if args.device == "cpu" else TOL)
    # A BF16 folder (as dequantised checkpoints are published), against the oracle on the same
    # bf16-rounded weights: the transposed, interleaved expert gather on 2-byte elements.
    ids = [int(x) for x in rng.integers(0, 264, N)]
    bf16, rounded = bf16_checkpoint(small)
    ref = numpy_gpt_oss.load(os.path.join(small, rounded)).forward(ids)
    for chunk in (512, 5):
        ours = tessera_logits(args.bin_dir, os.path.join(small, bf16), ids, args.device, args.scratch, chunk)
        failures += compare(f"window16/{bf16} chunk {chunk}", ours, ref, TOL)
    failures += bad_files(args)
    failures += bad_checkpoints(args)
    failures += quantize_plan(args, os.path.join(small, "tiny-gpt-oss-f32.gguf"))
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


def bad_files(args):
    """Broken GGUFs: `tessera eval` fails with a message naming the file and the tensor or key."""
    import make_gpt_oss
    s = make_gpt_oss.Spec(make_gpt_oss.parse_args(["--out", args.scratch]))
    t = make_gpt_oss.hf_weights(s, 5)

    def drop_sinks(ts):
        del ts["blk.1.attn_sinks.weight"]

    def bad_bias(ts):
        a, raw = ts["blk.2.ffn_up_exps.bias"]
        ts["blk.2.ffn_up_exps.bias"] = (a[:, :-1].copy(), raw)

    cases = [("missing sinks", {"edit_tensors": drop_sinks}, ["blk.1.attn_sinks.weight"]),
             ("mis-shaped expert bias", {"edit_tensors": bad_bias}, ["blk.2.ffn_up_exps.bias"]),
             ("no window key", {"drop_keys": ("sliding_window",)}, ["gpt-oss.attention.sliding_window"]),
             ("expert width not in MXFP4 blocks", {"keys": {"expert_feed_forward_length": 48}},
              ["expert_feed_forward_length 48"])]
    ids = "1,2,3,4"
    problems = []
    for name, kw, want in cases:
        path = os.path.join(args.scratch, "bad-" + name.replace(" ", "-") + ".gguf")
        make_gpt_oss.write_gguf(path, s, t, mxfp4=True, **kw)
        r = subprocess.run([os.path.join(args.bin_dir, "tessera"), "eval", "-q", "-m", path, "--device", args.device,
                            "--tokens", ids, "-o", os.path.join(args.scratch, "bad.npy")], capture_output=True, text=True)
        msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        print(f"{name}: exit {r.returncode}: {msg}")
        if r.returncode == 0 or not all(w in r.stderr for w in want + [os.path.basename(path)]):
            problems.append(f"{name}: expected a failure naming {want} and the file, got exit {r.returncode}: {msg}")
    return problems


def mxfp4_checkpoint(folder):
    """tiny-gpt-oss-hf with its experts as the released checkpoints store them: gate_up_proj_blocks
    [E, 2F, D/32, 16] (gate and up rows interleaved) and down_proj_blocks [E, D, F/32, 16], element
    2i in the low nibble of byte i, with E8M0 _scales [.., K/32], and quantization_config mxfp4.
    The f32 folder's experts already hold MXFP4 values, so the blocks encode them exactly."""
    import json
    import shutil
    import make_gpt_oss
    from safetensors.numpy import load_file, save_file
    src, name = os.path.join(folder, "tiny-gpt-oss-hf"), "tiny-gpt-oss-hf-mxfp4"
    dst = os.path.join(folder, name)
    os.makedirs(dst, exist_ok=True)
    t = load_file(os.path.join(src, "model.safetensors"))
    for k in [k for k in t if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        w = np.ascontiguousarray(t.pop(k).transpose(0, 2, 1))  # [E, rows, K]
        gguf, deq = make_gpt_oss.mxfp4_quantize(w)
        assert np.array_equal(deq, w), k
        blk = gguf.reshape(w.shape[:2] + (w.shape[2] // 32, 17))
        codes = np.concatenate([blk[..., 1:] & 15, blk[..., 1:] >> 4], axis=-1)  # [.., 32] in element order
        t[k + "_blocks"] = np.ascontiguousarray((codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8))
        t[k + "_scales"] = np.ascontiguousarray(blk[..., 0])
    save_file(t, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, f), dst)
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                             "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"}
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return name


def bf16_checkpoint(folder):
    """tiny-gpt-oss-hf with every tensor stored as BF16, and the same rounded values as F32 for the
    oracle; returns the two folders' names."""
    import shutil
    import ml_dtypes
    from safetensors.numpy import load_file, save_file
    src = os.path.join(folder, "tiny-gpt-oss-hf")
    t = {k: v.astype(ml_dtypes.bfloat16) for k, v in load_file(os.path.join(src, "model.safetensors")).items()}
    names = ("tiny-gpt-oss-hf-bf16", "tiny-gpt-oss-hf-bf16-as-f32")
    for name, ts in ((names[0], t), (names[1], {k: v.astype(np.float32) for k, v in t.items()})):
        dst = os.path.join(folder, name)
        os.makedirs(dst, exist_ok=True)
        save_file(ts, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
        for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(src, f), dst)
    return names


def bad_checkpoints(args):
    """Broken or unsupported Hugging Face folders: `tessera eval` fails naming the file (or folder) and the
    tensor or key; `tessera convert` refuses a gpt-oss folder (its GGUF keys are not written)."""
    import make_gpt_oss
    s = make_gpt_oss.Spec(make_gpt_oss.parse_args(["--out", args.scratch]))
    t = make_gpt_oss.hf_weights(s, 5)

    def drop(name):
        return lambda ts: ts.pop(name)

    def halve_last(name):
        return lambda ts: ts.__setitem__(name, np.ascontiguousarray(ts[name][..., : ts[name].shape[-1] // 2]))

    def key(k, v):
        return lambda cfg: cfg.__setitem__(k, v)

    def mxfp4_without_scales(ts):  # down_proj in the released form, its scales lost
        w = ts.pop("model.layers.1.mlp.experts.down_proj").transpose(0, 2, 1)
        ts["model.layers.1.mlp.experts.down_proj_blocks"] = np.zeros(w.shape[:2] + (w.shape[2] // 32, 16), np.uint8)
        g = ts.pop("model.layers.1.mlp.experts.gate_up_proj").transpose(0, 2, 1)
        ts["model.layers.1.mlp.experts.gate_up_proj_blocks"] = np.zeros(g.shape[:2] + (g.shape[2] // 32, 16), np.uint8)
        ts["model.layers.1.mlp.experts.gate_up_proj_scales"] = np.full(g.shape[:2] + (g.shape[2] // 32,), 127, np.uint8)

    cases = [("missing sinks", drop("model.layers.1.self_attn.sinks"), None,
              ["model.layers.1.self_attn.sinks", "blk.1.attn_sinks.weight"]),
             ("mis-shaped gate_up_proj", halve_last("model.layers.2.mlp.experts.gate_up_proj"), None,
              ["model.safetensors", "model.layers.2.mlp.experts.gate_up_proj"]),
             ("missing down_proj_bias", drop("model.layers.0.mlp.experts.down_proj_bias"), None,
              ["model.layers.0.mlp.experts.down_proj_bias"]),
             ("no sliding_window", None, lambda cfg: cfg.pop("sliding_window"), ["config.json", "sliding_window"]),
             ("other swiglu_limit", None, key("swiglu_limit", 5.0), ["config.json", "swiglu_limit 5"]),
             ("mxfp4 blocks without scales", mxfp4_without_scales, None,
              ["model.layers.1.mlp.experts.down_proj_scales", "missing"])]
    def write(path, ts):
        make_gpt_oss.write_hf(path, s, ts)

    return (bad_hf_folder_problems(args.bin_dir, args.scratch, args.device, "1,2,3,4",
                                   [(name, write, t, edit_t, edit_cfg, want) for name, edit_t, edit_cfg, want in cases]) +
            convert_refusal_problems(args.bin_dir, args.scratch, lambda path: write(path, t)))


def quantize_plan(args, model):
    """`tessera quantize` keeps the [E, N] expert biases (which matmul_id adds) in f32 and quantises
    the experts."""
    r = subprocess.run([os.path.join(args.bin_dir, "tessera"), "quantize", model, "--type", "q4_0", "--dry-run"],
                       capture_output=True, text=True, check=True)
    rows = {ln.split()[0]: ln.split() for ln in r.stdout.splitlines() if ln.startswith("blk.0.")}
    problems = []
    for name in ("ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias"):
        row = rows.get("blk.0." + name, [])
        print("quantize plan:", " ".join(row))
        if len(row) < 4 or row[-3] != "f32" or row[-1] != "bias":
            problems.append(f"tessera quantize --type q4_0 plans {name} as {row}, expected f32 (bias)")
    if "q4_0" not in rows.get("blk.0.ffn_up_exps.weight", []):
        problems.append("tessera quantize --type q4_0 does not quantise the experts")
    return problems


if __name__ == "__main__":
    main()
