#!/usr/bin/env python3
"""A tiny random-weight Gemma 4 text model (HF `gemma4_text` / Gemma4ForCausalLM, GGUF architecture
`gemma4`), written as a Hugging Face checkpoint and as the GGUF llama.cpp's convert_hf_to_gguf.py
writes for it with --outtype f32 (conversion/gemma.py: Gemma4Model).

Written to OUT_DIR:
  tiny-gemma4-hf/        config.json (Gemma4ForCausalLM) and model.safetensors (f32)
  tiny-gemma4-f32.gguf   the converter's GGUF: the same weights under GGUF names, plus rope_freqs

Two shapes (docs/gemma4.md), the real ones in miniature:
  --variant e2b (default): as Gemma 4 E2B/E4B: per-layer embeddings (hidden_size_per_layer_input),
      KV sharing (num_kv_shared_layers), a double-wide MLP on the sharing layers, every layer with
      its own v_proj;
  --variant 31b: as Gemma 4 31B: attention_k_eq_v (the global layers have no v_proj, their values
      are the key projection) with fewer KV heads on the global layers (num_global_key_value_heads),
      no per-layer embeddings, no KV sharing;
  --variant 26b: the 31b shape plus Gemma 4 26B-A4B's mixture of experts on every layer (8 experts,
      2 per token, expert FFN 32, beside the dense FFN): files tiny-gemma4-26b-*.
All: 6 layers (e2b: sliding and global alternating; the others: sliding sliding global x 2), sliding
window 8, hidden 64, 4 q heads,
sliding layers head_dim 16 with 2 KV heads, global layers head_dim 32 ("global_head_dim") with
proportional RoPE over 0.25 of the head, RoPE bases 1e4 / 1e6, final logit softcap 3 (30 in the
real models; 3 makes it bite on these small logits), random layer_scalar per layer.

Weights are seeded normals scaled 1/sqrt(fan_in), embeddings N(0, 0.15) (logits of a few units: the softcap bends the large ones), norm weights 1 + N(0, 0.1)
(Gemma 4's RMSNorm multiplies by w: the converter stores them unchanged).
Usage: make_gemma4.py --out DIR [--variant e2b|31b] [--seed N]
"""
import argparse
import json
import math
import os

import numpy as np

# A small gemma4-style vocabulary (BPE over "▁"-spaced text): specials, the 256 byte tokens, letters.
SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
LETTERS = ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u2581t", "\u2581th", "he", "\u2581the"]
MERGES = ["\u2581 t", "\u2581t h", "h e", "\u2581th e"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--variant", choices=["e2b", "31b", "26b"], default="e2b")
    p.add_argument("--seed", type=int, default=4)
    p.add_argument("--vocab", type=int, default=320, help="embedding rows (the tokenizer has fewer, padded)")
    p.add_argument("--no-hf", action="store_true", help="write only the GGUF")
    return p.parse_args(argv)


class Spec:
    def __init__(self, a):
        self.variant = a.variant
        self.L, self.D, self.F = 6, 64, 128
        self.H, self.HKV, self.Dh, self.Dg = 4, 2, 16, 32
        # E2B-like: sliding and global alternating, so the last layer that computes K/V is global
        # and the one before it sliding, as in the released E models (llama.cpp's loader assumes
        # that: its sharing layers read layer first_shared - 1 (global) or - 2 (sliding)).
        if a.variant == "e2b":
            self.layer_types = ["sliding_attention", "full_attention"] * 3
        else:
            self.layer_types = ["sliding_attention", "sliding_attention", "full_attention"] * 2
        self.window = 8
        self.theta_swa, self.theta = 10000.0, 1000000.0
        self.partial = 0.25
        self.V, self.eps = a.vocab, 1e-6
        self.softcap = 3.0
        e2b = a.variant == "e2b"
        self.k_eq_v = not e2b
        self.HKV_g = 1 if not e2b else None        # num_global_key_value_heads (31B)
        self.P = 16 if e2b else 0                   # hidden_size_per_layer_input
        self.shared = 2 if e2b else 0               # num_kv_shared_layers
        self.double_wide = e2b
        self.stem = {"e2b": "tiny-gemma4", "31b": "tiny-gemma4-31b", "26b": "tiny-gemma4-26b"}[a.variant]
        self.E, self.E_used, self.Fe = (8, 2, 32) if a.variant == "26b" else (0, 0, 0)
        first_shared = self.L - self.shared
        self.is_swa = [t == "sliding_attention" for t in self.layer_types]
        self.head_dim = [self.Dh if s else self.Dg for s in self.is_swa]
        self.kv_heads = [self.HKV if s or self.HKV_g is None else self.HKV_g for s in self.is_swa]
        self.n_ff = [self.F * (2 if self.double_wide and i >= first_shared else 1) for i in range(self.L)]
        self.has_kv = [i < first_shared for i in range(self.L)]
        self.has_v = [self.has_kv[i] and (self.is_swa[i] or not self.k_eq_v) for i in range(self.L)]
        if len(SPECIAL) + 256 + len(LETTERS) > self.V:
            raise SystemExit("vocab too small for the tokenizer")


def config_json(s):
    c = {
        "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "dtype": "float32",
        "vocab_size": s.V, "hidden_size": s.D, "intermediate_size": s.F, "num_hidden_layers": s.L,
        "num_attention_heads": s.H, "num_key_value_heads": s.HKV, "head_dim": s.Dh, "global_head_dim": s.Dg,
        "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 4096, "rms_norm_eps": s.eps,
        "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2, "tie_word_embeddings": True,
        "attention_bias": False, "attention_dropout": 0.0, "sliding_window": s.window, "layer_types": s.layer_types,
        "final_logit_softcapping": s.softcap, "use_bidirectional_attention": None,
        "vocab_size_per_layer_input": s.V, "hidden_size_per_layer_input": s.P,
        "attention_k_eq_v": s.k_eq_v, "num_kv_shared_layers": s.shared,
        "use_double_wide_mlp": s.double_wide, "enable_moe_block": s.E > 0, "num_experts": s.E or None,
        "top_k_experts": s.E_used or None, "moe_intermediate_size": s.Fe or None,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": s.theta_swa},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": s.partial, "rope_theta": s.theta},
        },
    }
    if s.HKV_g is not None:
        c["num_global_key_value_heads"] = s.HKV_g
    return c


def hf_weights(s, seed):
    """{HF name: f32 array} as Gemma4ForCausalLM's state dict names them."""
    rng = np.random.default_rng(seed)
    f32 = np.float32

    def mat(rows, cols, gain=1.0):
        return (gain * rng.standard_normal((rows, cols)) / math.sqrt(cols)).astype(f32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(f32)

    D, t = s.D, {}
    t["model.embed_tokens.weight"] = (0.15 * rng.standard_normal((s.V, D))).astype(f32)
    if s.P:
        t["model.embed_tokens_per_layer.weight"] = (0.5 * rng.standard_normal((s.V, s.L * s.P))).astype(f32)
        t["model.per_layer_model_projection.weight"] = mat(s.L * s.P, D)
        t["model.per_layer_projection_norm.weight"] = norm(s.P)
    for i in range(s.L):
        p, hd = f"model.layers.{i}.", s.head_dim[i]
        t[p + "input_layernorm.weight"] = norm(D)
        t[p + "self_attn.q_proj.weight"] = mat(s.H * hd, D)
        t[p + "self_attn.q_norm.weight"] = norm(hd)
        if s.has_kv[i]:
            t[p + "self_attn.k_proj.weight"] = mat(s.kv_heads[i] * hd, D)
            t[p + "self_attn.k_norm.weight"] = norm(hd)
            if s.has_v[i]:
                t[p + "self_attn.v_proj.weight"] = mat(s.kv_heads[i] * hd, D)
        t[p + "self_attn.o_proj.weight"] = mat(D, s.H * hd)
        t[p + "post_attention_layernorm.weight"] = norm(D)
        t[p + "pre_feedforward_layernorm.weight"] = norm(D)
        t[p + "mlp.gate_proj.weight"] = mat(s.n_ff[i], D)
        t[p + "mlp.up_proj.weight"] = mat(s.n_ff[i], D)
        t[p + "mlp.down_proj.weight"] = mat(D, s.n_ff[i])
        t[p + "post_feedforward_layernorm.weight"] = norm(D)
        if s.E:
            t[p + "router.proj.weight"] = mat(s.E, D, 4.0)  # a peaked router: top-k choices away from ties
            t[p + "router.scale"] = norm(D)
            t[p + "router.per_expert_scale"] = rng.uniform(0.5, 1.5, s.E).astype(f32)
            t[p + "experts.gate_up_proj"] = np.stack([mat(2 * s.Fe, D) for _ in range(s.E)])
            t[p + "experts.down_proj"] = np.stack([mat(D, s.Fe) for _ in range(s.E)])
            t[p + "pre_feedforward_layernorm_2.weight"] = norm(D)
            t[p + "post_feedforward_layernorm_1.weight"] = norm(D)
            t[p + "post_feedforward_layernorm_2.weight"] = norm(D)
        if s.P:
            t[p + "per_layer_input_gate.weight"] = mat(s.P, D)
            t[p + "per_layer_projection.weight"] = mat(D, s.P)
            t[p + "post_per_layer_input_norm.weight"] = norm(D)
        t[p + "layer_scalar"] = rng.uniform(0.5, 1.5, 1).astype(f32)
    t["model.norm.weight"] = norm(D)
    return t


def vocab_tokens(s):
    toks = SPECIAL + [f"<0x{b:02X}>" for b in range(256)] + LETTERS
    return toks + [f"<unused{i}>" for i in range(s.V - len(toks))]


def write_hf(path, s, t):
    from safetensors.numpy import save_file
    os.makedirs(path, exist_ok=True)
    save_file(t, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config_json(s), f, indent=2)


def gguf_tensors(s, t):
    """[(GGUF name, f32 array)] in the order the converter writes them: rope_freqs first (its
    generate_extra_tensors), then the checkpoint's tensors in name order (safetensors sorts them)."""
    out = []
    n_rot = int(s.Dg * s.partial / 2)
    out.append(("rope_freqs.weight", np.array([1.0] * n_rot + [1e30] * (s.Dg // 2 - n_rot), dtype=np.float32)))
    names = {
        "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.q_norm": "attn_q_norm",
        "self_attn.k_proj": "attn_k", "self_attn.k_norm": "attn_k_norm", "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output", "post_attention_layernorm": "post_attention_norm",
        "pre_feedforward_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down", "post_feedforward_layernorm": "post_ffw_norm",
        "per_layer_input_gate": "inp_gate", "per_layer_projection": "proj", "post_per_layer_input_norm": "post_norm",
        "layer_scalar": "layer_output_scale", "router.proj": "ffn_gate_inp",
        "experts.gate_up_proj": "ffn_gate_up_exps", "experts.down_proj": "ffn_down_exps",
        "pre_feedforward_layernorm_2": "pre_ffw_norm_2", "post_feedforward_layernorm_1": "post_ffw_norm_1",
        "post_feedforward_layernorm_2": "post_ffw_norm_2",
    }
    scales = {"router.scale": "ffn_gate_inp.scale", "router.per_expert_scale": "ffn_down_exps.scale"}
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.embed_tokens_per_layer.weight": "per_layer_token_embd.weight",
           "model.per_layer_model_projection.weight": "per_layer_model_proj.weight",
           "model.per_layer_projection_norm.weight": "per_layer_proj_norm.weight", "model.norm.weight": "output_norm.weight"}
    for name in sorted(t):
        if name in top:
            out.append((top[name], t[name]))
            continue
        rest = name[len("model.layers."):]
        bid, mod = rest.split(".", 1)
        if mod in scales:
            out.append((f"blk.{bid}.{scales[mod]}", t[name]))
            continue
        mod = mod[:-len(".weight")] if mod.endswith(".weight") else mod
        out.append((f"blk.{bid}.{names[mod]}.weight", t[name]))
    return out


def write_gguf(path, s, t, edit_tensors=None, keys=None):
    """The converter's GGUF. |edit_tensors|(list) may change the tensor list; |keys| {gemma4 key
    suffix: value or None} replaces (None: drops) keys, for the bad-file tests."""
    import gguf
    arch = "gemma4"
    tensors = gguf_tensors(s, t)
    if edit_tensors:
        edit_tensors(tensors)
    keys = keys or {}
    w = gguf.GGUFWriter(path, arch)
    kv = {}  # gemma4.* keys in the converter's order (a key written twice keeps its first place)

    def put(k, v, kind="u32"):
        kv[k] = (v, kind)

    put("block_count", s.L)
    put("context_length", 4096)
    put("embedding_length", s.D)
    put("feed_forward_length", s.F)
    put("attention.head_count", s.H)
    put("attention.head_count_kv", s.HKV)
    put("rope.freq_base", s.theta, "f32")
    put("rope.freq_base_swa", s.theta_swa, "f32")
    put("attention.layer_norm_rms_epsilon", s.eps, "f32")
    if s.E:
        put("expert_count", s.E)
        put("expert_used_count", s.E_used)
    put("attention.key_length", s.Dg)
    put("attention.value_length", s.Dg)
    put("final_logit_softcapping", s.softcap, "f32")
    put("attention.sliding_window", s.window)
    put("attention.shared_kv_layers", s.shared)
    put("embedding_length_per_layer_input", s.P)
    put("attention.sliding_window_pattern", list(s.is_swa), "bools")
    put("attention.key_length_swa", s.Dh)
    put("attention.value_length_swa", s.Dh)
    if s.E:
        put("expert_feed_forward_length", s.Fe)
    if s.double_wide:
        put("feed_forward_length", list(s.n_ff), "u32s")
    if s.HKV_g is not None:
        put("attention.head_count_kv", list(s.kv_heads), "u32s")
    put("rope.dimension_count", s.Dg)
    put("rope.dimension_count_swa", s.Dh)
    for k, v in keys.items():
        if v is None:
            kv.pop(k, None)
        else:
            put(k, *v) if isinstance(v, tuple) else put(k, v, kv[k][1] if k in kv else "u32")
    w.add_type("model")
    # general.* as the converter derives them from the folder name (it reads "31b" as a size).
    if s.variant == "e2b":
        w.add_name("Tiny Gemma4 Hf")
    else:
        w.add_name(f"Tiny Gemma4 {s.variant} Hf")
        w.add_finetune(f"{s.variant}-hf")
        w.add_basename("tiny-gemma4")
    probe = gguf.GGUFWriter(None, arch)
    for name, a in tensors:
        probe.add_tensor(name, a)
    w.add_string("general.size_label", gguf.size_label(*probe.get_total_parameter_count()))
    for k, (v, kind) in kv.items():
        key = f"{arch}.{k}"
        if kind == "u32":
            w.add_uint32(key, v)
        elif kind == "f32":
            w.add_float32(key, v)
        else:
            w.add_array(key, v)
        if k == "attention.value_length":
            w.add_file_type(0)  # ALL_F32 (the converter writes it after the base decoder keys)
    w.add_quantization_version(2)
    toks = vocab_tokens(s)
    n_real = len(SPECIAL) + 256 + len(LETTERS)
    w.add_tokenizer_model("gemma4")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * len(toks))
    w.add_token_types([3] * len(SPECIAL) + [6] * 256 + [1] * len(LETTERS) + [4] * (len(toks) - n_real))
    w.add_token_merges(MERGES)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_space_prefix(False)
    w.add_add_bos_token(True)
    for name, a in tensors:
        w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv=None):
    a = parse_args(argv)
    s = Spec(a)
    os.makedirs(a.out, exist_ok=True)
    t = hf_weights(s, a.seed)
    if not a.no_hf:
        write_hf(os.path.join(a.out, s.stem + "-hf"), s, t)
    write_gguf(os.path.join(a.out, s.stem + "-f32.gguf"), s, t)


if __name__ == "__main__":
    main()
