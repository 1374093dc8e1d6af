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

The same adapters as llama.cpp's GGUF LoRA files (convert_lora_to_gguf.py's layout: general.type
"adapter", adapter.type "lora", adapter.lora.alpha, "<base tensor>.lora_a" [r, K] and ".lora_b"
[N, r], B's q/k rows permuted as the merged GGUFs' are), written with gguf-py's GGUFWriter:
  adapter-a.gguf    adapter-a's values, F32, alpha 16
  adapter-b.gguf    adapter-b's values, F16, alpha 12: GGUF has no rsLoRA flag (llama.cpp scales by
                    alpha / r), so alpha is the one that gives rsLoRA's scale 3
  adapter-c.gguf    adapter-a's values with lora_a in Q8_0 and lora_b in BF16 (as the converter's
                    q8_0 output keeps a [N, 8] lora_b out of 32-wide blocks), no alpha: scale 1;
  merged-c.gguf     its merge, from the rounded values
  gguf-bad-*.gguf   adapter-a.gguf broken one way each: other-arch (general.architecture qwen2),
                    model (general.type "model"), missing-b (no blk.1.ffn_down.weight.lora_b),
                    shape (blk.0.attn_q.weight.lora_a one column wider), embd (a pair on
                    token_embd.weight), alora (adapter.alora.invocation_tokens), truncated (the
                    file cut in half)
"""
import argparse
import json
import os
import shutil

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize, quantize
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


def gguf_pairs(tensors, head_dim):
    """{GGUF tensor name: array}: each PEFT pair as <base>.lora_a / .lora_b, B's q/k rows permuted
    into the GGUF base's order (llama.cpp's converter permutes them as it does the base's)."""
    out = {}
    for name, a in tensors.items():
        if not name.endswith(".lora_A.weight"):
            continue
        parts = name[len("base_model.model."):-len(".lora_A.weight")].split(".")
        stem = MODULES[".".join(parts[3:])]
        b = tensors[name.replace("lora_A", "lora_B")]
        out[f"blk.{parts[2]}.{stem}.weight.lora_a"] = a
        out[f"blk.{parts[2]}.{stem}.weight.lora_b"] = permute_rows(b, head_dim) if stem in ("attn_q", "attn_k") else b
    return out


def write_gguf_adapter(path, arch, pairs, alpha, general_type="adapter", extra=None, qtypes=None):
    """|pairs| {name: array} (f32 or f16 as given; |qtypes| {".lora_a": GGMLQuantizationType} quantizes
    a half); |alpha| None: no adapter.lora.alpha key; |extra| {key: [u32]} arrays."""
    w = GGUFWriter(path, arch)
    w.add_type(general_type)
    w.add_string("adapter.type", "lora")
    if alpha is not None:
        w.add_float32("adapter.lora.alpha", float(alpha))
    for key, vals in (extra or {}).items():
        w.add_key_value(key, vals, GGUFValueType.ARRAY, GGUFValueType.UINT32)
    for name, t in pairs.items():
        q = (qtypes or {}).get(name[-len(".lora_a"):])
        if q is None:
            w.add_tensor(name, t)
        else:
            w.add_tensor(name, quantize(t.astype(np.float32), q), raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_gguf_adapters(out, base, reader, arch, a, b, head_dim, d):
    """The GGUF forms of adapters a and b, adapter-c with its merge, and the broken ones."""
    pa = gguf_pairs(a, head_dim)
    write_gguf_adapter(os.path.join(out, "adapter-a.gguf"), arch, pa, 16)
    write_gguf_adapter(os.path.join(out, "adapter-b.gguf"), arch, gguf_pairs(b, head_dim), 6 / np.sqrt(4) * 4)
    qtypes = {".lora_a": GGMLQuantizationType.Q8_0, ".lora_b": GGMLQuantizationType.BF16}
    write_gguf_adapter(os.path.join(out, "adapter-c.gguf"), arch, pa, None, qtypes=qtypes)
    # The merge of the values adapter-c holds (PEFT names, HF row order: merge() permutes q/k).
    qtype = lambda n: qtypes[".lora_a" if ".lora_A." in n else ".lora_b"]  # noqa: E731
    c = {n: dequantize(quantize(t, qtype(n)), qtype(n)) for n, t in a.items()}
    merge(base, os.path.join(out, "merged-c.gguf"), reader, c, 1.0, head_dim)

    bad = lambda what: os.path.join(out, f"gguf-bad-{what}.gguf")  # noqa: E731
    write_gguf_adapter(bad("other-arch"), "qwen2", pa, 16)
    write_gguf_adapter(bad("model"), arch, pa, 16, general_type="model")
    write_gguf_adapter(bad("missing-b"), arch, {n: t for n, t in pa.items() if n != "blk.1.ffn_down.weight.lora_b"},
                       16)
    q0 = "blk.0.attn_q.weight.lora_a"
    write_gguf_adapter(bad("shape"), arch, {**pa, q0: np.concatenate([pa[q0], np.zeros((8, 1), np.float32)], 1)}, 16)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    embd = {"token_embd.weight.lora_a": np.zeros((n_vocab, 8), np.float32),
            "token_embd.weight.lora_b": np.zeros((d, 8), np.float32)}
    write_gguf_adapter(bad("embd"), arch, {**pa, **embd}, 16)
    write_gguf_adapter(bad("alora"), arch, pa, 16, extra={"adapter.alora.invocation_tokens": [1, 2, 3]})
    with open(os.path.join(out, "adapter-a.gguf"), "rb") as f:
        whole = f.read()
    with open(bad("truncated"), "wb") as f:
        f.write(whole[:len(whole) // 2])


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
    write_gguf_adapters(args.out, args.base, reader, arch, a, b, head_dim, d)
    other = {"base_model.model.transformer.h.0.attn.c_attn.lora_A.weight": np.zeros((8, d), np.float32),
             "base_model.model.transformer.h.0.attn.c_attn.lora_B.weight": np.zeros((3 * d, 8), np.float32)}
    write_adapter(os.path.join(args.out, "other-arch"), other, peft_config(8, 16, ["c_attn"], False))


if __name__ == "__main__":
    main()
