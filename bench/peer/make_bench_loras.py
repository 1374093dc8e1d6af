#!/usr/bin/env python3
"""Random LoRA adapters for a llama-family GGUF, for serving benchmarks (issue 41): each adapter in
both formats with the same values, so tessera serve and llama-server run the same fine-tunes.

  make_bench_loras.py BASE_GGUF OUT_DIR [--count 8] [--rank 16] [--alpha 32] [--seed 0]

Written to OUT_DIR, for i in 0 .. count-1:
  lora-i/        PEFT (adapter_config.json + adapter_model.safetensors, F16): rank r, lora_alpha,
                 every projection of every layer (q/k/v/o_proj, gate/up/down_proj), in Hugging
                 Face's row order
  lora-i.gguf    llama.cpp's GGUF LoRA adapter (general.type "adapter", adapter.type "lora",
                 adapter.lora.alpha; tensors blk.L.<stem>.weight.lora_a [r, K] and .lora_b [N, r],
                 F16), with lora_b's q/k rows in the GGUF base's adjacent-pair rope order
The base may be quantized: only its tensor shapes are read. Needs numpy, gguf and safetensors
(requirements.txt).
"""
import argparse
import os
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "model", "lora"))
from make_lora import MODULES, meta, peft_config, permute_rows, write_adapter  # noqa: E402

TARGETS = [m.split(".")[1] for m in MODULES]  # q_proj, k_proj, ...


def shapes(reader):
    """{GGUF tensor name: (N, K)} from the tensors' ggml ne = [K, N]."""
    return {t.name: (int(t.shape[1]), int(t.shape[0])) for t in reader.tensors if len(t.shape) == 2}


def make_one(rng, dims, arch, n_layers, head_dim, r, alpha, out_dir, i):
    peft, writer = {}, GGUFWriter(os.path.join(out_dir, f"lora-{i}.gguf"), arch)
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(alpha))
    for l in range(n_layers):
        for module, stem in MODULES.items():
            n, k = dims[f"blk.{l}.{stem}.weight"]
            a = (rng.standard_normal((r, k)) / np.sqrt(k)).astype(np.float16)
            b = (rng.standard_normal((n, r)) / np.sqrt(r) * 0.5).astype(np.float16)
            p = f"base_model.model.model.layers.{l}.{module}"
            peft[p + ".lora_A.weight"] = a
            peft[p + ".lora_B.weight"] = b
            writer.add_tensor(f"blk.{l}.{stem}.weight.lora_a", a)
            writer.add_tensor(f"blk.{l}.{stem}.weight.lora_b", permute_rows(b, head_dim) if stem in ("attn_q", "attn_k") else b)
    write_adapter(os.path.join(out_dir, f"lora-{i}"), peft, peft_config(r, alpha, TARGETS, False))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=8)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    reader = GGUFReader(a.base)
    arch = meta(reader, "general.architecture")
    if arch not in ("llama", "mistral"):
        sys.exit(f"make_bench_loras.py: {a.base} is a '{arch}' model; this script writes llama-family adapters")
    n_layers = int(meta(reader, f"{arch}.block_count"))
    n_heads = int(meta(reader, f"{arch}.attention.head_count"))
    d = int(meta(reader, f"{arch}.embedding_length"))
    key = f"{arch}.attention.key_length"
    head_dim = int(meta(reader, key)) if key in reader.fields else d // n_heads
    dims = shapes(reader)
    rng = np.random.default_rng(a.seed)
    for i in range(a.count):
        make_one(rng, dims, arch, n_layers, head_dim, a.rank, a.alpha, a.out, i)
    print(f"{a.count} adapters of rank {a.rank} for {os.path.basename(a.base)} in {a.out}")


if __name__ == "__main__":
    main()
