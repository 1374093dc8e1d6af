#!/usr/bin/env python3
"""Tessera's Qwen3.5 (qwen35: Gated DeltaNet + gated attention) logits vs the independent float64
numpy Qwen3.5 (tests/model/qwen35/numpy_qwen35.py, written from HF's modeling code and checked
against transformers itself to 1e-13, tests/model/qwen35/NOTES.md).

make_qwen35.py writes a tiny random Qwen3.5 as a Hugging Face checkpoint and as the GGUFs
llama.cpp's converter writes for it (with and without the multi-token-prediction block, value
heads in the converter's tiled order). A 48-token prompt runs through `tessera eval` (KV cache f32)
whole and in steps of 5 and 16 tokens (each continuing the KV cache and the recurrent state of the
one before), and through the oracle on the HF checkpoint: normalised RMS error <= 1e-4 and the
argmax agreeing wherever the oracle's top-2 margin is decisive (compare_numpy.py's checks). A model
with as many value heads as key heads (no reordering) is checked too, and the MoE variant
(qwen35moe: 8 experts, 2 per token, a gated shared expert). Each model is also loaded from its
Hugging Face folder (same tolerance), and from the text model saved alone (qwen3_5_text: tensors
under model.*); the MoE one also with its experts stored one module each; the grouped and MoE ones
also stored as BF16, against the oracle on the same bf16-rounded weights. Bad folders (a missing or
mis-shaped tensor, a bad or unsupported text_config key) must fail naming the file and the tensor
or key, and `tessera convert` refuses a Qwen3.5 folder. The features are shown to matter: the
oracle with the value heads paired the other way round, without the recurrent state carried
between tokens, and (MoE) without the shared expert or without renormalising the top-k weights,
must all be far (> 20 x the tolerance) from Tessera.
Usage: compare_qwen35.py TESSERA_BIN_DIR SCRATCH_DIR [--device cpu|vulkan]
"""
import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "qwen35"))
import numpy_qwen35  # noqa: E402
from compare_numpy import (bad_hf_folder_problems, compare, convert_refusal_problems, device_unusable,  # noqa: E402
                           nrmse, tessera_logits)

TOL = 1e-4
N = 48






def make(scratch, name, extra):
    out = os.path.join(scratch, name)
    subprocess.run([sys.executable, os.path.join(HERE, "qwen35", "make_qwen35.py"), "--out", out] + extra, check=True,
                   stdout=subprocess.DEVNULL)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("scratch")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    os.makedirs(args.scratch, exist_ok=True)
    grouped = make(args.scratch, "grouped", [])                                 # 4 key heads, 8 value heads
    square = make(args.scratch, "square", ["--linear-value-heads", "4", "--untied", "--seed", "7"])
    moe = make(args.scratch, "moe", ["--experts", "8", "--experts-used", "2", "--seed", "11"])
    why = device_unusable(args.bin_dir, os.path.join(grouped, "tiny-qwen35-f32.gguf"), args.device, args.scratch)
    if why:
        print(f"SKIP: [hardware] {why}")  # a device that is absent: the one skip CI allows
        sys.exit(77)
    rng = np.random.default_rng(35)
    ids = [int(x) for x in rng.integers(0, 264, N)]
    failures = []
    for folder, stem in ((grouped, "tiny-qwen35"), (square, "tiny-qwen35"), (moe, "tiny-qwen35moe")):
        oracle = numpy_qwen35.load(os.path.join(folder, stem + "-hf"))
        ref = oracle.forward(ids)
        models = [stem + "-f32.gguf", stem + "-nomtp-f32.gguf", stem + "-hf", text_only_checkpoint(folder, stem)]
        if oracle.c.E:
            models.append(per_expert_checkpoint(folder, stem))
        for gguf in models:
            path = os.path.join(folder, gguf)
            if not os.path.exists(path):
                continue
            for chunk in (512, 16, 5):
                ours = tessera_logits(args.bin_dir, path, ids, args.device, args.scratch, chunk)
                err = nrmse(ours, ref)
                print(f"{os.path.basename(folder)}/{gguf} chunk {chunk}: normalised RMS {err:.2e}")
                failures += compare(f"{os.path.basename(folder)}/{gguf} chunk {chunk}", ours, ref, TOL)
        # The features matter: without them the oracle is far from what Tessera computed.
        ours = tessera_logits(args.bin_dir, os.path.join(folder, stem + "-nomtp-f32.gguf"), ids, args.device,
                              args.scratch, 512)
        stateless = np.concatenate([oracle.forward([t]) for t in ids], 0)  # a fresh state per token
        variants = [("without the recurrent state", stateless)]
        if oracle.c.E:
            oracle.renormalize = False
            variants.append(("without renormalised top-k weights", oracle.forward(ids)))
            oracle.renormalize = True
            for i in range(oracle.c.L):
                oracle.w[f"layers.{i}.mlp.shared_expert.down_proj.weight"] = 0.0 * oracle.w[f"layers.{i}.mlp.shared_expert.down_proj.weight"]
            variants.append(("without the shared expert", oracle.forward(ids)))
        for what, other in variants:
            far = nrmse(ours, other)
            print(f"{os.path.basename(folder)}: vs an oracle {what} {far:.2e}")
            if not far > 20 * TOL:
                failures.append(f"{folder}: the oracle {what} is as close ({far:.2e})")
    # BF16 checkpoints (as the real ones are stored): the same weights rounded to bf16, against the
    # oracle on those rounded weights, so what remains is Tessera's own arithmetic on bf16 weights.
    for folder, stem in ((grouped, "tiny-qwen35"), (moe, "tiny-qwen35moe")):
        bf16, rounded = bf16_checkpoint(folder, stem)
        ref = numpy_qwen35.load(os.path.join(folder, rounded)).forward(ids)
        for chunk in (512, 5):
            ours = tessera_logits(args.bin_dir, os.path.join(folder, bf16), ids, args.device, args.scratch, chunk)
            failures += compare(f"{os.path.basename(folder)}/{bf16} chunk {chunk}", ours, ref, TOL)
    # Value heads paired with key heads the other way (h % nk instead of h // (nv / nk)).
    oracle = numpy_qwen35.load(os.path.join(grouped, "tiny-qwen35-hf"))
    if True:
        oracle.tiled_pairing = True
        far = nrmse(tessera_logits(args.bin_dir, os.path.join(grouped, "tiny-qwen35-f32.gguf"), ids, args.device,
                                   args.scratch, 512), oracle.forward(ids))
        print(f"grouped: vs an oracle pairing the heads the other way {far:.2e}")
        if not far > 20 * TOL:
            failures.append(f"the value-head pairing does not matter ({far:.2e})")
    failures += bad_files(args, ids)
    failures += bad_checkpoints(args, ids)
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


def text_only_checkpoint(folder, stem):
    """The checkpoint as transformers saves the text model alone (Qwen3_5ForCausalLM /
    Qwen3_5MoeForCausalLM): the text_config's keys at the top (model_type qwen3_5_text /
    qwen3_5_moe_text), tensors under model.* instead of model.language_model.*, no vision tower or
    MTP head; returns the folder's name."""
    import json
    import shutil
    from safetensors.numpy import load_file, save_file
    src, name = os.path.join(folder, stem + "-hf"), stem + "-hf-text"
    dst = os.path.join(folder, name)
    os.makedirs(dst, exist_ok=True)
    t = load_file(os.path.join(src, "model.safetensors"))
    t = {k.replace("model.language_model.", "model."): v for k, v in t.items() if not k.startswith(("model.visual.", "mtp."))}
    save_file(t, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, f), dst)
    with open(os.path.join(src, "config.json")) as f:
        text = json.load(f)["text_config"]
    text["architectures"] = ["Qwen3_5MoeForCausalLM" if "moe" in text["model_type"] else "Qwen3_5ForCausalLM"]
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(text, f, indent=4)
    return name


def per_expert_checkpoint(folder, stem):
    """The MoE checkpoint with its experts stored one module each (mlp.experts.N.gate_proj, up_proj,
    down_proj), as checkpoints written before transformers fused them; returns the folder's name."""
    import shutil
    from safetensors.numpy import load_file, save_file
    src, name = os.path.join(folder, stem + "-hf"), stem + "-hf-per-expert"
    dst = os.path.join(folder, name)
    os.makedirs(dst, exist_ok=True)
    t = load_file(os.path.join(src, "model.safetensors"))
    for k in [k for k in t if k.endswith("mlp.experts.gate_up_proj")]:
        p = k[: -len("gate_up_proj")]
        gu, down = t.pop(k), t.pop(p + "down_proj")
        f = gu.shape[1] // 2
        for e in range(gu.shape[0]):
            t[f"{p}{e}.gate_proj.weight"] = np.ascontiguousarray(gu[e, :f])
            t[f"{p}{e}.up_proj.weight"] = np.ascontiguousarray(gu[e, f:])
            t[f"{p}{e}.down_proj.weight"] = np.ascontiguousarray(down[e])
    save_file(t, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, f), dst)
    return name


def bf16_checkpoint(folder, stem):
    """The checkpoint with every tensor stored as BF16 (config dtype bfloat16), and beside it the same
    rounded values stored as F32 for the oracle; returns the two folders' names."""
    import json
    import shutil
    import ml_dtypes
    from safetensors.numpy import load_file, save_file
    src = os.path.join(folder, stem + "-hf")
    t = {k: v.astype(ml_dtypes.bfloat16) for k, v in load_file(os.path.join(src, "model.safetensors")).items()}
    names = (stem + "-hf-bf16", stem + "-hf-bf16-as-f32")
    for name, ts, dtype in ((names[0], t, "bfloat16"), (names[1], {k: v.astype(np.float32) for k, v in t.items()}, "float32")):
        dst = os.path.join(folder, name)
        os.makedirs(dst, exist_ok=True)
        save_file(ts, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(src, f), dst)
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        cfg["text_config"]["dtype"] = dtype
        with open(os.path.join(dst, "config.json"), "w") as f:
            json.dump(cfg, f, indent=4)
    return names


def bad_files(args, ids):
    """A GGUF missing a tensor, with a mis-shaped one, or with inconsistent ssm.* keys: `tessera eval`
    fails with a message naming the file and the tensor or key."""
    import make_qwen35
    s = make_qwen35.Spec(make_qwen35.parse_args(["--out", args.scratch]))
    t = make_qwen35.hf_weights(s, 1234)

    def drop(ts):
        del ts["blk.0.ssm_a"]

    def halve(ts):
        ts["blk.3.attn_q.weight"] = ts["blk.3.attn_q.weight"][: ts["blk.3.attn_q.weight"].shape[0] // 2]

    cases = [("missing tensor", {"edit_tensors": drop}, ["blk.0.ssm_a"]),
             ("mis-shaped tensor", {"edit_tensors": halve}, ["blk.3.attn_q.weight"]),
             ("inconsistent keys", {"u32": {"ssm.time_step_rank": 6}}, ["qwen35.ssm", "time_step_rank 6"])]
    sm = make_qwen35.Spec(make_qwen35.parse_args(["--out", args.scratch, "--experts", "4", "--experts-used", "2"]))
    tm = make_qwen35.hf_weights(sm, 99)

    def drop_expert(ts):
        del ts["blk.1.ffn_up_exps.weight"]

    def shrink_experts(ts):
        ts["blk.2.ffn_down_exps.weight"] = ts["blk.2.ffn_down_exps.weight"][:3]

    cases += [("moe missing expert tensor", {"edit_tensors": drop_expert, "spec": sm, "weights": tm}, ["blk.1.ffn_up_exps.weight"]),
              ("moe mis-shaped experts", {"edit_tensors": shrink_experts, "spec": sm, "weights": tm}, ["blk.2.ffn_down_exps.weight"]),
              ("moe too many experts used", {"u32": {"expert_used_count": 5}, "spec": sm, "weights": tm},
               ["expert_used_count 5"])]
    problems = []
    for name, kw, want in cases:
        path = os.path.join(args.scratch, "bad-" + name.replace(" ", "-") + ".gguf")
        spec, weights = kw.pop("spec", s), kw.pop("weights", t)
        make_qwen35.write_gguf(path, spec, weights, with_mtp=False, **kw)
        r = subprocess.run([os.path.join(args.bin_dir, "tessera"), "eval", "-q", "-m", path, "--device", args.device,
                            "--tokens", ",".join(map(str, ids[:4])), "-o", os.path.join(args.scratch, "bad.npy")],
                           capture_output=True, text=True)
        msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        print(f"{name}: exit {r.returncode}: {msg}")
        if r.returncode == 0 or not all(w in r.stderr for w in want + [os.path.basename(path)]):
            problems.append(f"{name}: expected a failure naming {want} and the file, got exit {r.returncode}: {msg}")
    return problems


def bad_checkpoints(args, ids):
    """Hugging Face folders missing a tensor, with a mis-shaped one (a matrix, the conv, the fused experts) or
    with a bad text_config key: `tessera eval` fails naming the file (or folder) and the tensor or key."""
    import make_qwen35

    def spec(extra):
        return make_qwen35.Spec(make_qwen35.parse_args(["--out", args.scratch, "--no-vision", "--no-mtp"] + extra))

    s, sm = spec([]), spec(["--experts", "4", "--experts-used", "2"])
    t, tm = make_qwen35.hf_weights(s, 1234), make_qwen35.hf_weights(sm, 99)
    lm = "model.language_model.layers."

    def drop(name):
        return lambda ts: ts.pop(name)

    def reshape(name, f):
        return lambda ts: ts.__setitem__(name, np.ascontiguousarray(f(ts[name])))

    def key(k, v):
        return lambda cfg: cfg["text_config"].__setitem__(k, v)

    cases = [
        ("missing A_log", s, t, drop(lm + "0.linear_attn.A_log"), None, [lm + "0.linear_attn.A_log", "blk.0.ssm_a"]),
        ("missing q_proj", s, t, drop(lm + "3.self_attn.q_proj.weight"), None, [lm + "3.self_attn.q_proj.weight"]),
        ("mis-shaped in_proj_qkv", s, t, reshape(lm + "1.linear_attn.in_proj_qkv.weight", lambda a: a[: a.shape[0] // 2]),
         None, ["model.safetensors", lm + "1.linear_attn.in_proj_qkv.weight"]),
        ("mis-shaped conv1d", s, t, reshape(lm + "2.linear_attn.conv1d.weight", lambda a: a[:, :, :2]),
         None, ["model.safetensors", lm + "2.linear_attn.conv1d.weight"]),
        ("bad linear_num_value_heads", s, t, None, key("linear_num_value_heads", 6),
         ["config.json", "linear_num_value_heads 6"]),
        ("bad layer_types", s, t, None, key("layer_types", ["linear_attention"]), ["config.json", "layer_types"]),
        ("mistyped linear_conv_kernel_dim", s, t, None, key("linear_conv_kernel_dim", "four"),
         ["config.json", "linear_conv_kernel_dim"]),
        ("attn_output_gate false", s, t, None, key("attn_output_gate", False), ["config.json", "attn_output_gate false"]),
        ("mlp_only_layers", s, t, None, key("mlp_only_layers", [1]), ["config.json", "mlp_only_layers [1]"]),
        ("moe missing down_proj", sm, tm, drop(lm + "1.mlp.experts.down_proj"), None, [lm + "1.mlp.experts.down_proj"]),
        ("moe mis-shaped gate_up_proj", sm, tm, reshape(lm + "2.mlp.experts.gate_up_proj", lambda a: a[:, : a.shape[1] // 2]),
         None, ["model.safetensors", lm + "2.mlp.experts.gate_up_proj"]),
        ("moe missing num_experts", sm, tm, None, lambda cfg: cfg["text_config"].pop("num_experts"),
         ["config.json", "num_experts"]),
    ]
    def writer(sp):
        return lambda path, ts: make_qwen35.write_hf(path, sp, ts)

    # `tessera convert` would write a GGUF llama.cpp reads wrongly (no qwen35.ssm.* keys, grouped value
    # heads): it refuses, saying why.
    return (bad_hf_folder_problems(args.bin_dir, args.scratch, args.device, ",".join(map(str, ids[:4])),
                                   [(name, writer(sp), w, edit_t, edit_cfg, want)
                                    for name, sp, w, edit_t, edit_cfg, want in cases]) +
            convert_refusal_problems(args.bin_dir, args.scratch, lambda path: make_qwen35.write_hf(path, s, t)))


if __name__ == "__main__":
    main()
