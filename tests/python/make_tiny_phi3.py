#!/usr/bin/env python3
"""Tiny random-weight Phi-3 models (GGUF architecture `phi3`) for the numpy oracle and the peer.

Shapes are Phi-3-mini's in miniature: fused attn_qkv [Q + 2 KV, D] (q rows, then k, then v) and
fused ffn_up [2 F, D] (gate rows, then up), as llama.cpp's converter writes them from HF's
qkv_proj / gate_up_proj. GQA (4 query heads, 2 KV heads, as Phi-3-medium) so a wrong split shows.
Weights are seeded normals (never zeros); the norms are 1 + noise. The tokenizer is byte-level
(256 GPT-2 byte tokens, 4 control tokens, and one merge, of bytes 0x01 0x02 into token 260: llama.cpp
refuses a BPE vocabulary without merges and the gguf package cannot write an empty array; no text
here holds that pair) so any text tokenises to its bytes in every engine.

Variants written to OUT_DIR:
  tiny-phi3-{f32,q8_0}.gguf     sliding_window 48 (a 64-token prompt crosses it), no rope scaling
  tiny-phi3-longrope-f32.gguf   "longrope": context 512 > original 128, so rope_factors_long and
                                attn_factor sqrt(1 + ln(512/128) / ln(128)) apply
  tiny-phi3-shortrope-f32.gguf  the same factors with context 128: rope_factors_short apply
  tiny-phi3-peer-{f32,q8_0}.gguf  no sliding window (llama.cpp disables Phi's), for bench/peer
  tiny-phi3-hf/, tiny-phi3-longrope-hf/  the f32 window-48 and longrope models as Hugging Face
                                checkpoints (config.json as Phi-3-mini's, qkv_proj / gate_up_proj,
                                tokenizer.json): the same weights, so the same logits
  tiny-phi3-fp8-hf/             the window-48 model with qkv_proj and gate_up_proj in FP8 E4M3, one
                                scale per row (compressed-tensors "float-quantized" naming)
  tiny-phi3-fp8-f32.gguf        the weights tiny-phi3-fp8-hf/ stands for (codes times scales) as f32
Usage: make_tiny_phi3.py OUT_DIR
"""
import math
import os
import sys

import numpy as np
import gguf

D, H, HKV, DH, F, L, CTX = 64, 4, 2, 16, 96, 2, 4096
SPECIAL = ["<|endoftext|>", "<|user|>", "<|assistant|>", "<|end|>"]
MERGED = ["\u0101\u0102"]  # bytes 0x01 0x02 in GPT-2's byte alphabet


def byte_tokens():
    """GPT-2's byte-to-unicode table: printable bytes stand for themselves, the rest map past 255."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out, extra = [], 0
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


def weights(seed, rope_factors):
    rng = np.random.default_rng(seed)
    V = 256 + len(SPECIAL) + len(MERGED)
    Q, KV = H * DH, HKV * DH

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols)) / math.sqrt(cols)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    t = {"token_embd.weight": rng.standard_normal((V, D)).astype(np.float32),
         "output_norm.weight": norm(D), "output.weight": mat(V, D) * 4}
    for l in range(L):
        p = f"blk.{l}."
        t[p + "attn_norm.weight"] = norm(D)
        t[p + "attn_qkv.weight"] = mat(Q + 2 * KV, D) * 2
        t[p + "attn_output.weight"] = mat(D, Q)
        t[p + "ffn_norm.weight"] = norm(D)
        t[p + "ffn_up.weight"] = mat(2 * F, D)
        t[p + "ffn_down.weight"] = mat(D, F)
    if rope_factors:
        # Phi-3-128k's long factors grow from 1 to tens across the frequencies; the short ones stay near 1.
        t["rope_factors_long.weight"] = np.geomspace(1.0, 40.0, DH // 2).astype(np.float32)
        t["rope_factors_short.weight"] = (1.0 + 0.05 * np.arange(DH // 2)).astype(np.float32)
    return t


def fp8_fused(t):
    """The fused projections of weights() as F8_E4M3 codes with one f32 scale per row: returns
    {name: (codes, scales [rows, 1])} and a copy of |t| holding the weights those stand for."""
    import ml_dtypes
    parts, dequantised = {}, dict(t)
    for name, w in t.items():
        if ".attn_qkv." not in name and ".ffn_up." not in name:
            continue
        scale = (np.abs(w).max(axis=1, keepdims=True) / 448.0).astype(np.float32)
        codes = (w / scale).astype(ml_dtypes.float8_e4m3fn)
        parts[name] = (codes, scale)
        dequantised[name] = codes.astype(np.float32) * scale
    return parts, dequantised


def write(path, dtype, window=0, ctx=CTX, orig=None, rope_factors=False, seed=1234, fp8=False):
    """fp8: the fused projections hold the weights tiny-phi3-fp8-hf/ stands for."""
    w = gguf.GGUFWriter(path, "phi3")
    # Not "phi3" in the name: llama.cpp then sets attributes on <s>, </s> and <unk>, which this vocab lacks.
    w.add_name("tiny-random-p3")
    w.add_context_length(ctx)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_block_count(L)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_rope_dimension_count(DH)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    if window:
        w.add_sliding_window(window)
    if orig is not None:
        w.add_uint32("phi3.rope.scaling.original_context_length", orig)
        w.add_float32("phi3.rope.scaling.attn_factor", math.sqrt(1 + math.log(ctx / orig) / math.log(orig)))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(byte_tokens() + SPECIAL + MERGED)
    w.add_token_types([1] * 256 + [3] * len(SPECIAL) + [1] * len(MERGED))
    w.add_token_merges(["\u0101 \u0102"])
    w.add_bos_token_id(256)
    w.add_eos_token_id(256)
    w.add_add_bos_token(True)
    t = weights(seed, rope_factors)
    if fp8:
        t = fp8_fused(t)[1]
    for name, a in t.items():
        if dtype == "q8_0" and a.ndim == 2:
            w.add_tensor(name, gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_hf(path, window=0, ctx=CTX, orig=None, rope_factors=False, seed=1234, fp8=False):
    """The same model as write(..., "f32", ...) in HF Phi3ForCausalLM form (fp8: the fused
    projections as F8_E4M3 codes and per-row weight_scale, as write(..., fp8=True))."""
    import json
    from safetensors.numpy import save_file
    os.makedirs(path, exist_ok=True)
    t = weights(seed, rope_factors)
    fp8_parts = fp8_fused(t)[0] if fp8 else {}
    hf = {"model.embed_tokens.weight": t["token_embd.weight"], "model.norm.weight": t["output_norm.weight"],
          "lm_head.weight": t["output.weight"]}
    names = {"attn_norm": "input_layernorm", "attn_qkv": "self_attn.qkv_proj", "attn_output": "self_attn.o_proj",
             "ffn_norm": "post_attention_layernorm", "ffn_up": "mlp.gate_up_proj", "ffn_down": "mlp.down_proj"}
    for l in range(L):
        for ours, theirs in names.items():
            name = f"blk.{l}.{ours}.weight"
            if name in fp8_parts:
                hf[f"model.layers.{l}.{theirs}.weight"], hf[f"model.layers.{l}.{theirs}.weight_scale"] = fp8_parts[name]
            else:
                hf[f"model.layers.{l}.{theirs}.weight"] = t[name]
    save_file(hf, os.path.join(path, "model.safetensors"))
    cfg = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": D, "intermediate_size": F,
           "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": HKV, "max_position_embeddings": ctx,
           "original_max_position_embeddings": orig or ctx, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "sliding_window": window or None, "tie_word_embeddings": False, "vocab_size": 256 + len(SPECIAL) + len(MERGED),
           "hidden_act": "silu", "bos_token_id": 256, "eos_token_id": 256, "rope_scaling": None}
    if fp8:
        cfg["quantization_config"] = {"quant_method": "compressed-tensors", "format": "float-quantized"}
    if rope_factors:
        cfg["rope_scaling"] = {"type": "longrope", "long_factor": t["rope_factors_long.weight"].tolist(),
                               "short_factor": t["rope_factors_short.weight"].tolist()}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    vocab = {tok: i for i, tok in enumerate(byte_tokens() + SPECIAL + MERGED)}
    tok = {"version": "1.0", "added_tokens": [{"id": 256 + i, "content": s, "special": True, "single_word": False,
                                                "lstrip": False, "rstrip": False, "normalized": False}
                                               for i, s in enumerate(SPECIAL)],
           "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                                 "use_regex": True},
           "post_processor": None, "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "vocab": vocab, "merges": ["\u0101 \u0102"]}}
    with open(os.path.join(path, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": SPECIAL[0], "eos_token": SPECIAL[0], "add_bos_token": True}, f)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for dt in ("f32", "q8_0"):
        write(os.path.join(out, f"tiny-phi3-{dt}.gguf"), dt, window=48)
        write(os.path.join(out, f"tiny-phi3-peer-{dt}.gguf"), dt)
    write(os.path.join(out, "tiny-phi3-longrope-f32.gguf"), "f32", ctx=512, orig=128, rope_factors=True)
    write(os.path.join(out, "tiny-phi3-shortrope-f32.gguf"), "f32", ctx=128, orig=128, rope_factors=True)
    write_hf(os.path.join(out, "tiny-phi3-hf"), window=48)
    write_hf(os.path.join(out, "tiny-phi3-longrope-hf"), ctx=512, orig=128, rope_factors=True)
    write_hf(os.path.join(out, "tiny-phi3-fp8-hf"), window=48, fp8=True)
    write(os.path.join(out, "tiny-phi3-fp8-f32.gguf"), "f32", window=48, fp8=True)


if __name__ == "__main__":
    main()
