#!/usr/bin/env python3
"""Writes Hugging Face style checkpoints of SmolLM2 from its GGUF, for the safetensors tests.

Independent of Tessera: tensors come from the PyPI `gguf` package (dequantised with
gguf.quants.dequantize), the safetensors files are written here by hand (8-byte header length,
JSON header, data), and every quantised form is produced in numpy by its published layout.

  make_checkpoints.py GGUF OUT_DIR [variant ...]     (default: every variant)

Variants (each a directory OUT_DIR/<name> with config.json, tokenizer.json,
tokenizer_config.json and safetensors files):
  f32    F32, sharded in two files with model.safetensors.index.json
  bf16   BF16, one model.safetensors
  fp8    FP8 E4M3 linear weights, compressed-tensors naming (weight, weight_scale): per-channel
         scales ([N, 1]) on even layers, one per-tensor scale ([1]) on odd layers
  awq    AutoAWQ GEMM packing, group 64
  gptq   GPTQ v1 packing (zeros stored minus one), group 32, trivial g_idx
  mxfp4  compressed-tensors mxfp4-pack-quantized (weight_packed U8, weight_scale E8M0 bytes)
  nvfp4  NVFP4: ModelOpt naming (weight U8, weight_scale F8_E4M3, weight_scale_2) on even
         layers, compressed-tensors naming (weight_packed, weight_global_scale = 1/scale_2) on
         odd layers
Quantised variants keep embeddings and norms in F32 (as exporters do) and also write
expected.bin: the numpy dequantisation (by the format's own formula, from the stored bytes) of
q_proj and down_proj of layers 0 and 1, for an exact check of the loader's repacking.
"""
import json
import os
import struct
import sys

import ml_dtypes
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # nibble i of a pack holds column AWQ_ORDER[i]

LAYER_NAMES = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


# ---- safetensors writing ----

def st_bytes(arr, dtype_name):
    return np.ascontiguousarray(arr).tobytes()


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype string, shape, raw bytes)."""
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)


def f32(a):
    return ("F32", a.shape, np.ascontiguousarray(a, dtype=np.float32).tobytes())


def bf16(a):
    return ("BF16", a.shape, np.ascontiguousarray(a, dtype=np.float32).astype(ml_dtypes.bfloat16).tobytes())


# ---- GGUF -> HF names and layout ----

def unpermute_rope(w, n_head):
    """GGUF llama q/k rows rotate adjacent pairs; HF rotates halves. Row 2i+j of a GGUF head is
    row j*d/2+i of the HF head."""
    rows, cols = w.shape
    d = rows // n_head
    return w.reshape(n_head, d // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def load_gguf(path):
    r = GGUFReader(path)
    meta = {}
    for k, f in r.fields.items():
        try:
            meta[k] = f.contents()
        except Exception:  # noqa: BLE001 - fields the package cannot decode are not needed
            pass
    n_head = int(meta["llama.attention.head_count"])
    n_head_kv = int(meta["llama.attention.head_count_kv"])
    weights = {}
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape))
        w = np.asarray(dequantize(np.asarray(t.data), t.tensor_type), dtype=np.float32).reshape(shape)
        if t.name.endswith("attn_q.weight"):
            w = unpermute_rope(w, n_head)
        elif t.name.endswith("attn_k.weight"):
            w = unpermute_rope(w, n_head_kv)
        weights[hf_name(t.name)] = w
    return meta, weights


def hf_name(name):
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output_norm.weight":
        return "model.norm.weight"
    if name == "output.weight":
        return "lm_head.weight"
    _, layer, stem, suffix = name.split(".")
    return f"model.layers.{layer}.{LAYER_NAMES[stem]}.{suffix}"


def config_json(meta, vocab_size, quant=None):
    c = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": int(meta["llama.embedding_length"]),
        "intermediate_size": int(meta["llama.feed_forward_length"]),
        "num_hidden_layers": int(meta["llama.block_count"]),
        "num_attention_heads": int(meta["llama.attention.head_count"]),
        "num_key_value_heads": int(meta["llama.attention.head_count_kv"]),
        "max_position_embeddings": int(meta["llama.context_length"]),
        "rms_norm_eps": 1e-5, "rope_theta": float(meta["llama.rope.freq_base"]),
        "rope_scaling": None, "tie_word_embeddings": True, "vocab_size": vocab_size,
        "bos_token_id": int(meta["tokenizer.ggml.bos_token_id"]),
        "eos_token_id": int(meta["tokenizer.ggml.eos_token_id"]),
        "hidden_act": "silu", "torch_dtype": "float32",
    }
    if quant:
        c["quantization_config"] = quant
    return c


def tokenizer_files(meta):
    """tokenizer.json and tokenizer_config.json as transformers writes them for SmolLM2."""
    tokens = list(meta["tokenizer.ggml.tokens"])
    types = list(meta["tokenizer.ggml.token_type"])
    merges = [m.split(" ", 1) for m in meta["tokenizer.ggml.merges"]]
    assert meta["tokenizer.ggml.pre"] == "smollm"
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": types[i] == 3}
             for i, t in enumerate(tokens) if types[i] in (3, 4)]
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }
    cfg = {
        "add_prefix_space": False, "clean_up_tokenization_spaces": False,
        "bos_token": tokens[int(meta["tokenizer.ggml.bos_token_id"])],
        "eos_token": {"content": tokens[int(meta["tokenizer.ggml.eos_token_id"])], "special": True},
        "unk_token": tokens[int(meta["tokenizer.ggml.unknown_token_id"])],
        "pad_token": tokens[int(meta["tokenizer.ggml.padding_token_id"])],
        "chat_template": meta["tokenizer.chat_template"], "model_max_length": 8192,
        "tokenizer_class": "GPT2Tokenizer",
    }
    return tok, cfg


# ---- quantisers (numpy, by each format's published layout) ----

def e2m1_codes(x):
    """Nearest E2M1 code of each value (|x| <= 6 assumed after scaling; clipped)."""
    mags = E2M1[:8]
    idx = np.abs(np.abs(x)[..., None] - mags).argmin(-1).astype(np.uint8)
    return np.where((x < 0) & (idx > 0), idx | 8, idx).astype(np.uint8)


def pack_fp4(codes):
    """[N, K] codes -> [N, K/2] bytes, element 2i in the low nibble of byte i."""
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)


def unpack_fp4(packed):
    out = np.empty((packed.shape[0], packed.shape[1] * 2), dtype=np.float32)
    out[:, 0::2] = E2M1[packed & 15]
    out[:, 1::2] = E2M1[packed >> 4]
    return out


def fp8(w, per_channel):
    amax = np.abs(w).max(axis=1, keepdims=True) if per_channel else np.abs(w).max().reshape(1, 1)
    scale = (amax / 448.0).astype(np.float32)
    codes = (w / scale).astype(ml_dtypes.float8_e4m3fn)
    deq = codes.astype(np.float32) * scale
    scale_t = scale if per_channel else scale.reshape(1)
    return [("weight", ("F8_E4M3", w.shape, codes.tobytes())), ("weight_scale", f32(scale_t))], deq


def int4_groups(w, g, min_zero):
    """Asymmetric 4-bit per group of g along K: codes [N, K], zeros [N, K/g], scales f16 [N, K/g]."""
    n, k = w.shape
    wg = w.reshape(n, k // g, g)
    lo = np.minimum(wg.min(-1), 0)
    hi = np.maximum(wg.max(-1), 0)
    scale = np.maximum((hi - lo) / (15 - min_zero), 1e-8).astype(np.float16)
    s = scale.astype(np.float32)
    zero = np.clip(np.round(-lo / s) + min_zero, min_zero, 15).astype(np.int64)
    q = np.clip(np.round(wg / s[..., None]) + zero[..., None], 0, 15).astype(np.int64).reshape(n, k)
    return q, zero, scale


def pack_cols(vals, order):
    """[R, C] 4-bit values -> int32 [R, C/8], nibble i of each word holding column order[i]."""
    r, c = vals.shape
    v = vals.reshape(r, c // 8, 8).astype(np.uint32)
    out = np.zeros((r, c // 8), dtype=np.uint32)
    for i in range(8):
        out |= v[:, :, order[i]] << np.uint32(4 * i)
    return out.view(np.int32)


def unpack_cols(words, order):
    w = words.view(np.uint32)
    r, c8 = w.shape
    out = np.zeros((r, c8, 8), dtype=np.int64)
    for i in range(8):
        out[:, :, order[i]] = (w >> np.uint32(4 * i)) & 15
    return out.reshape(r, c8 * 8)


def awq(w, g=64):
    q, zero, scale = int4_groups(w, g, 0)
    qweight = pack_cols(q.T, AWQ_ORDER)                       # [K, N/8]
    qzeros = pack_cols(zero.T, AWQ_ORDER)                     # [K/g, N/8]
    scales = np.ascontiguousarray(scale.T)                    # [K/g, N]
    # Dequantise from the stored tensors by AutoAWQ's formula.
    qu = unpack_cols(qweight, AWQ_ORDER)                      # [K, N]
    zu = np.repeat(unpack_cols(qzeros, AWQ_ORDER), g, axis=0)
    deq = ((qu - zu) * np.repeat(scales.astype(np.float32), g, axis=0)).T
    return [("qweight", ("I32", qweight.shape, qweight.tobytes())), ("qzeros", ("I32", qzeros.shape, qzeros.tobytes())),
            ("scales", ("F16", scales.shape, scales.tobytes()))], deq


def gptq(w, g=32):
    n, k = w.shape
    q, zero, scale = int4_groups(w, g, 1)                     # v1 cannot store a zero of 0
    qt = q.T.astype(np.uint32)                                # [K, N]
    qweight = np.zeros((k // 8, n), dtype=np.uint32)
    for j in range(8):
        qweight |= qt[j::8] << np.uint32(4 * j)
    qweight = qweight.view(np.int32)
    qzeros = pack_cols(zero.T - 1, list(range(8)))            # [K/g, N/8], stored minus one
    scales = np.ascontiguousarray(scale.T)
    g_idx = (np.arange(k) // g).astype(np.int32)
    wu = qweight.view(np.uint32)
    qu = np.stack([(wu >> np.uint32(4 * j)) & 15 for j in range(8)], axis=1).reshape(k, n).astype(np.int64)
    zu = unpack_cols(qzeros, list(range(8))) + 1
    deq = ((qu - zu[g_idx]) * scales.astype(np.float32)[g_idx]).T
    return [("qweight", ("I32", qweight.shape, qweight.tobytes())), ("qzeros", ("I32", qzeros.shape, qzeros.tobytes())),
            ("scales", ("F16", scales.shape, scales.tobytes())), ("g_idx", ("I32", g_idx.shape, g_idx.tobytes()))], deq


def mxfp4(w):
    n, k = w.shape
    wg = w.reshape(n, k // 32, 32)
    amax = np.abs(wg).max(-1)
    e = np.where(amax > 0, np.floor(np.log2(np.maximum(amax, 1e-30))) - 2, -127)
    e = np.clip(e + 127, 0, 254).astype(np.uint8)
    scale = np.ldexp(1.0, e.astype(np.int32) - 127).astype(np.float32)
    codes = e2m1_codes(wg / scale[..., None]).reshape(n, k)
    packed = pack_fp4(codes)
    deq = unpack_fp4(packed) * np.repeat(np.ldexp(1.0, e.astype(np.int32) - 127), 32, axis=1)
    return [("weight_packed", ("U8", packed.shape, packed.tobytes())), ("weight_scale", ("U8", e.shape, e.tobytes()))], deq


def nvfp4(w, modelopt):
    n, k = w.shape
    global_scale = np.float32(np.abs(w).max() / (6.0 * 448.0))
    wg = w.reshape(n, k // 16, 16)
    sub = (np.abs(wg).max(-1) / 6.0 / global_scale).astype(ml_dtypes.float8_e4m3fn)
    s = sub.astype(np.float32) * global_scale
    codes = e2m1_codes(np.where(s[..., None] > 0, wg / np.maximum(s[..., None], 1e-30), 0)).reshape(n, k)
    packed = pack_fp4(codes)
    deq = unpack_fp4(packed) * np.repeat(sub.astype(np.float32), 16, axis=1) * global_scale
    names = ("weight", "weight_scale_2", global_scale) if modelopt else ("weight_packed", "weight_global_scale",
                                                                        np.float32(1.0) / global_scale)
    return [(names[0], ("U8", packed.shape, packed.tobytes())), ("weight_scale", ("F8_E4M3", sub.shape, sub.tobytes())),
            (names[1], ("F32", (), np.float32(names[2]).tobytes()))], deq


def quantise(variant, w, layer):
    if variant == "fp8":
        return fp8(w, per_channel=layer % 2 == 0)
    if variant == "awq":
        return awq(w)
    if variant == "gptq":
        return gptq(w)
    if variant == "mxfp4":
        return mxfp4(w)
    return nvfp4(w, modelopt=layer % 2 == 0)


QUANT_CONFIGS = {
    "fp8": {"quant_method": "compressed-tensors", "format": "float-quantized"},
    "awq": {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True, "version": "gemm"},
    "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False, "sym": False,
             "checkpoint_format": "gptq"},
    "mxfp4": {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized"},
    "nvfp4": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
}
# Layers 0 and 1: the fp8 and nvfp4 variants alternate between two forms by layer parity.
EXPECTED = [f"model.layers.{i}.{m}" for i in (0, 1) for m in ("self_attn.q_proj", "mlp.down_proj")]


def write_expected(path, deqs):
    """Simple container: u32 count, then per tensor: u32 name length, name, u32 rows, u32 cols, f32 data."""
    with open(path, "wb") as f:
        f.write(struct.pack("<I", len(deqs)))
        for name, d in deqs:
            f.write(struct.pack("<I", len(name)) + name.encode() + struct.pack("<II", *d.shape))
            f.write(np.ascontiguousarray(d, dtype=np.float32).tobytes())


def write_variant(out, name, meta, weights):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    vocab = weights["model.embed_tokens.weight"].shape[0]
    tok, tok_cfg = tokenizer_files(meta)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config_json(meta, vocab, QUANT_CONFIGS.get(name)), f, indent=2)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tok_cfg, f, indent=2, ensure_ascii=False)
    tensors, deqs = [], []
    for hf, w in weights.items():
        if name in ("f32", "bf16") or w.ndim == 1 or "layers" not in hf:
            tensors.append((hf,) + (bf16(w) if name == "bf16" else f32(w)))
            continue
        prefix = hf[: -len(".weight")]
        parts, deq = quantise(name, w, int(hf.split(".")[2]))
        tensors += [(f"{prefix}.{s}",) + t for s, t in parts]
        if prefix in EXPECTED:
            deqs.append((prefix, deq))
    if name == "f32":
        half = len(tensors) // 2
        shards = {"model-00001-of-00002.safetensors": tensors[:half], "model-00002-of-00002.safetensors": tensors[half:]}
        for fn, ts in shards.items():
            write_safetensors(os.path.join(d, fn), ts, {"format": "pt"})
        index = {"metadata": {"total_size": sum(len(t[3]) for t in tensors)},
                 "weight_map": {t[0]: fn for fn, ts in shards.items() for t in ts}}
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)
    else:
        write_safetensors(os.path.join(d, "model.safetensors"), tensors, {"format": "pt"})
    if deqs:
        write_expected(os.path.join(d, "expected.bin"), deqs)


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    gguf_path, out = sys.argv[1], sys.argv[2]
    variants = sys.argv[3:] or ["f32", "bf16", "fp8", "awq", "gptq", "mxfp4", "nvfp4"]
    if not os.path.exists(gguf_path):
        print(f"{gguf_path} not found: nothing written (the tests that need it skip)")
        return
    # The data takes a minute and ~1.4 GB to write: regenerate only when this script, the GGUF or
    # the variant list changed.
    stamp = os.path.join(out, "stamp")
    key = f"{os.path.getmtime(__file__)} {os.path.getsize(gguf_path)} {' '.join(variants)}"
    if os.path.exists(stamp) and open(stamp).read() == key:
        print(f"{out}: up to date")
        return
    os.makedirs(out, exist_ok=True)
    meta, weights = load_gguf(gguf_path)
    for v in variants:
        write_variant(out, v, meta, weights)
        print(f"wrote {os.path.join(out, v)}")
    with open(stamp, "w") as f:
        f.write(key)


if __name__ == "__main__":
    main()
