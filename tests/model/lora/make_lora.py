#!/usr/bin/env python3
"""Tiny random PEFT LoRA adapters for a llama-family GGUF (SmolLM2's layout), and the GGUFs with
each adapter merged into the weights offline, in numpy: the oracle for the unmerged lora op.

  make_lora.py BASE_GGUF OUT_DIR [--seed N]

Written to OUT_DIR:
  adapter-a/        r 8, lora_alpha 16 (scale 2), every projection of every layer
                    (q/k/v/o_proj, gate/up/down_proj), F32
  adapter-b/        r 4, lora_alpha 6, use_rslora (scale 6 / sqrt(4) = 3), q_proj and v_proj of
                    every layer, F16 (the merge uses the same rounded values)
  merged-a.gguf, merged-b.gguf
                    BASE_GGUF with W + scale * B @ A written over the targeted f32 weights. The
                    GGUF stores q/k rows in adjacent-pair rope order (llama.cpp's converter permutes
                    HF's rotate-half rows), while the adapter is in HF's order: B's q/k rows are
                    permuted the same way before the merge.
  bad-shape/        adapter-a with layer 0's q_proj lora_A one column wider than the model
  missing-b/        adapter-a without layer 1's down_proj lora_B
  other-arch/       a GPT-2 style adapter (transformer.h.0.attn.c_attn)
Each adapter folder holds adapter_config.json and adapter_model.safetensors, as PEFT saves them.
"""
import argparse
import json
import os
import shutil

import numpy as np
from gguf import GGUFReader
from safetensors.numpy import save_file

MODULES = {  # HF module -> GGUF tensor stem
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def meta(reader, key):
    f = reader.fields[key]
    v = f.parts[f.data[0]]
    return str(bytes(v), "utf-8") if f.types[0].name == "STRING" else v[0]


def permute_rows(b, head_dim):
    """HF rotate-half row order -> GGUF adjacent-pair order: GGUF row r is HF row src(r)."""
    rows = np.arange(b.shape[0])
    h, i, j = rows // head_dim, (rows % head_dim) // 2, rows % 2
    return b[h * head_dim + j * (head_dim // 2) + i]


def write_adapter(path, tensors, config):
    os.makedirs(path, exist_ok=True)
    save_file(tensors, os.path.join(path, "adapter_model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump(config, f, indent=2)


def peft_config(r, alpha, targets, rslora):
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": "tiny-llama", "r": r,
            "lora_alpha": alpha, "lora_dropout": 0.0, "target_modules": targets, "use_rslora": rslora,
            "bias": "none", "fan_in_fan_out": False, "modules_to_save": None, "rank_pattern": {}, "alpha_pattern": {},
            "use_dora": False}


def make_adapter(rng, weights, n_layers, r, modules, dtype):
    """{peft name: array} with A ~ N(0, 1/K), B ~ N(0, 1/r) (PEFT zero-inits B; random here so the
    delta shows)."""
    t = {}
    for l in range(n_layers):
        for m in modules:
            n, k = weights[f"blk.{l}.{MODULES[m]}.weight"].shape
            p = f"base_model.model.model.layers.{l}.{m}"
            t[p + ".lora_A.weight"] = (rng.standard_normal((r, k)) / np.sqrt(k)).astype(dtype)
            t[p + ".lora_B.weight"] = (rng.standard_normal((n, r)) / np.sqrt(r)).astype(dtype)
    return t


def merge(base_path, out_path, reader, tensors, scale, head_dim):
    shutil.copyfile(base_path, out_path)
    by_name = {t.name: t for t in reader.tensors}
    with open(out_path, "r+b") as f:
        for name in tensors:
            if not name.endswith(".lora_A.weight"):
                continue
            module = name[len("base_model.model."):-len(".lora_A.weight")]
            parts = module.split(".")  # model layers L self_attn q_proj
            stem = MODULES[".".join(parts[3:])]
            gname = f"blk.{parts[2]}.{stem}.weight"
            t = by_name[gname]
            a = tensors[name].astype(np.float64)
            b = tensors[name.replace("lora_A", "lora_B")].astype(np.float64)
            if stem in ("attn_q", "attn_k"):
                b = permute_rows(b, head_dim)
            w = np.asarray(t.data, dtype=np.float64) + scale * (b @ a)
            assert t.tensor_type.name == "F32", f"{gname} is {t.tensor_type.name}: the merge writes f32 in place"
            f.seek(t.data_offset)
            f.write(w.astype(np.float32).tobytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=41)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    reader = GGUFReader(args.base)
    arch = meta(reader, "general.architecture")
    n_layers = int(meta(reader, f"{arch}.block_count"))
    n_heads = int(meta(reader, f"{arch}.attention.head_count"))
    d = int(meta(reader, f"{arch}.embedding_length"))
    key = f"{arch}.attention.key_length"
    head_dim = int(meta(reader, key)) if key in reader.fields else d // n_heads
    weights = {t.name: np.asarray(t.data) for t in reader.tensors}
    rng = np.random.default_rng(args.seed)

    a = make_adapter(rng, weights, n_layers, 8, list(MODULES), np.float32)
    cfg_a = peft_config(8, 16, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], False)
    write_adapter(os.path.join(args.out, "adapter-a"), a, cfg_a)
    merge(args.base, os.path.join(args.out, "merged-a.gguf"), reader, a, 16 / 8, head_dim)

    b = make_adapter(rng, weights, n_layers, 4, ["self_attn.q_proj", "self_attn.v_proj"], np.float16)
    write_adapter(os.path.join(args.out, "adapter-b"), b, peft_config(4, 6, ["q_proj", "v_proj"], True))
    merge(args.base, os.path.join(args.out, "merged-b.gguf"), reader, b, 6 / np.sqrt(4), head_dim)

    bad = dict(a)
    q0 = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    bad[q0] = np.concatenate([bad[q0], np.zeros((8, 1), np.float32)], axis=1)
    write_adapter(os.path.join(args.out, "bad-shape"), bad, cfg_a)
    missing = dict(a)
    del missing["base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"]
    write_adapter(os.path.join(args.out, "missing-b"), missing, cfg_a)
    other = {"base_model.model.transformer.h.0.attn.c_attn.lora_A.weight": np.zeros((8, d), np.float32),
             "base_model.model.transformer.h.0.attn.c_attn.lora_B.weight": np.zeros((3 * d, 8), np.float32)}
    write_adapter(os.path.join(args.out, "other-arch"), other, peft_config(8, 16, ["c_attn"], False))


if __name__ == "__main__":
    main()
