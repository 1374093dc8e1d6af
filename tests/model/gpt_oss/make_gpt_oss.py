#!/usr/bin/env python3
"""A tiny random-weight gpt-oss (HF `gpt_oss`, GGUF architecture `gpt-oss`), written as a Hugging Face
checkpoint and as the GGUFs llama.cpp's converter writes for it.

The real shapes in miniature (gpt-oss-20b: 24 layers, hidden 2880, 64 q / 8 kv heads of 64, 32
experts of width 2880, 4 per token, window 128, YaRN factor 32 over 4096 positions, rope_theta
150000, swiglu limit 7). The defaults here: 4 layers (sliding, full, sliding, full), hidden 64,
4 q heads / 2 kv heads of 16, 8 experts of width 64, 4 per token, window 16, vocabulary 300,
YaRN factor 8 over 32 positions (so a 64-token prompt leaves the original context).

Written to OUT_DIR:
  tiny-gpt-oss-hf/          config.json, tokenizer.json (o200k's split regex, the GGUF's vocabulary) and
                            model.safetensors (f32) in transformers' GptOss layout:
                            experts as gate_up_proj [E, D, 2F] (gate and up interleaved along the
                            last dim: gate = [..., ::2]), down_proj [E, F, D], biases
                            gate_up_proj_bias [E, 2F] and down_proj_bias [E, D]; the expert
                            weights hold the MXFP4-rounded values, so the checkpoint and the MXFP4
                            GGUF describe one model
  tiny-gpt-oss-mxfp4.gguf   the converter's output for the released (MXFP4) checkpoint: experts as
                            GGUF MXFP4 blocks (quantised by this script: an E8M0 scale byte, then 16
                            bytes whose low nibbles are elements 0..15 and high nibbles 16..31, E2M1
                            codes), gate_up split into ffn_gate_exps / ffn_up_exps [E, F, D],
                            ffn_down_exps [E, D, F], biases and the router f32, attn_sinks.weight
  tiny-gpt-oss-f32.gguf     the same with f32 experts (the converter's path for a dequantised checkpoint)

Weights are seeded normals scaled 1/sqrt(fan_in); biases N(0, 0.5) (expert gate/up biases N(0, 2),
so the SwiGLU clamps at +-limit are reached); sinks N(1, 1); norms 1 + N(0, 0.1); embeddings N(0, 1).
Usage: make_gpt_oss.py --out DIR [--seed N] [--layers N] [--window N] ...
"""
import argparse
import json
import math
import os

import numpy as np

# E2M1 values (doubled, as GGUF's table: the E8M0 scale is then taken as 2^(e - 128)).
E2M1_X2 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float64)
MXFP4_TYPE = 39  # ggml_type GGML_TYPE_MXFP4
SPECIAL = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>", "<|constrain|>",
           "<|endoftext|>"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=20)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=16)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--experts-used", type=int, default=4)
    p.add_argument("--expert-ff", type=int, default=64)
    p.add_argument("--window", type=int, default=16)
    p.add_argument("--vocab", type=int, default=300)
    p.add_argument("--rope-theta", type=float, default=150000.0)
    p.add_argument("--yarn-factor", type=float, default=8.0)
    p.add_argument("--yarn-original", type=int, default=32, help="original_max_position_embeddings")
    p.add_argument("--rms-eps", type=float, default=1e-5)
    p.add_argument("--chat-template", default=None, help="a file whose text goes into tokenizer.chat_template")
    return p.parse_args(argv)


class Spec:
    def __init__(self, a):
        self.L, self.D, self.H, self.HKV, self.Dh = a.layers, a.hidden, a.heads, a.kv_heads, a.head_dim
        self.E, self.k, self.F, self.window, self.V = a.experts, a.experts_used, a.expert_ff, a.window, a.vocab
        self.theta, self.factor, self.orig, self.eps = a.rope_theta, a.yarn_factor, a.yarn_original, a.rms_eps
        self.chat_template = open(a.chat_template, encoding="utf-8").read() if a.chat_template else None
        if self.D % 32 or self.F % 32:
            raise SystemExit("--hidden and --expert-ff must be multiples of 32 (MXFP4 blocks)")
        self.layer_types = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(self.L)]


# ---- MXFP4 -------------------------------------------------------------------------------------------

def mxfp4_quantize(w):
    """Rows of |w| [..., K] (K a multiple of 32) as GGUF MXFP4 blocks: bytes [..., K / 32 * 17] and
    the dequantised values. Scale: the smallest power of two that brings the block's absmax within
    6 (E2M1's largest); each value the nearest E2M1 value (ties to the lower code)."""
    shape = w.shape
    x = w.reshape(-1, 32).astype(np.float64)
    amax = np.max(np.abs(x), axis=1)
    e = np.where(amax > 0, np.ceil(np.log2(np.maximum(amax, 1e-30) / 6.0)), -127).astype(np.int64) + 127
    e = np.clip(e, 1, 254)
    half_scale = np.exp2(e.astype(np.float64) - 128.0)  # value = E2M1_X2[code] * 2^(e - 128)
    codes = np.argmin(np.abs(x[:, :, None] / half_scale[:, None, None] - E2M1_X2[None, None, :]), axis=2)
    deq = E2M1_X2[codes] * half_scale[:, None]
    qs = (codes[:, :16] | (codes[:, 16:] << 4)).astype(np.uint8)
    blocks = np.concatenate([e.astype(np.uint8)[:, None], qs], axis=1)  # [n_blocks, 17]
    out_bytes = blocks.reshape(shape[:-1] + (shape[-1] // 32 * 17,))
    return out_bytes, deq.reshape(shape).astype(np.float32)


def mxfp4_dequantize(b, k):
    """GGUF MXFP4 bytes [..., k / 32 * 17] -> f32 [..., k] (the check of the writer above)."""
    blocks = b.reshape(-1, 17)
    half_scale = np.exp2(blocks[:, 0].astype(np.float64) - 128.0)
    lo, hi = blocks[:, 1:] & 15, blocks[:, 1:] >> 4
    codes = np.concatenate([lo, hi], axis=1)
    return (E2M1_X2[codes] * half_scale[:, None]).reshape(b.shape[:-1] + (k,)).astype(np.float32)


# ---- weights -----------------------------------------------------------------------------------------

def hf_weights(s, seed):
    """{HF name: f32 array} as transformers' GptOss names them; expert weights MXFP4-rounded."""
    rng = np.random.default_rng(seed)
    f32 = np.float32

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols)) / math.sqrt(cols)).astype(f32)

    def vec(n, mean=0.0, sd=0.5):
        return (mean + sd * rng.standard_normal(n)).astype(f32)

    D, F, E = s.D, s.F, s.E
    t = {"model.embed_tokens.weight": rng.standard_normal((s.V, D)).astype(f32)}
    for i in range(s.L):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = vec(D, 1.0, 0.1)
        t[p + "post_attention_layernorm.weight"] = vec(D, 1.0, 0.1)
        a = p + "self_attn."
        t[a + "q_proj.weight"], t[a + "q_proj.bias"] = mat(s.H * s.Dh, D), vec(s.H * s.Dh)
        t[a + "k_proj.weight"], t[a + "k_proj.bias"] = mat(s.HKV * s.Dh, D), vec(s.HKV * s.Dh)
        t[a + "v_proj.weight"], t[a + "v_proj.bias"] = mat(s.HKV * s.Dh, D), vec(s.HKV * s.Dh)
        t[a + "o_proj.weight"], t[a + "o_proj.bias"] = mat(D, s.H * s.Dh), vec(D)
        t[a + "sinks"] = vec(s.H, 1.0, 1.0)
        m = p + "mlp."
        t[m + "router.weight"] = (3.0 * mat(E, D)).astype(f32)  # a peaked router: top-k away from ties
        t[m + "router.bias"] = vec(E)
        # gate_up rows (output features) interleaved gate, up; scaled so gate/up reach the clamps.
        gu = np.stack([3.0 * mat(2 * F, D) for _ in range(E)])  # [E, 2F, D]
        _, gu = mxfp4_quantize(gu)
        down = np.stack([mat(D, F) for _ in range(E)])          # [E, D, F]
        _, down = mxfp4_quantize(down)
        t[m + "experts.gate_up_proj"] = np.ascontiguousarray(gu.transpose(0, 2, 1))    # [E, D, 2F]
        t[m + "experts.gate_up_proj_bias"] = (2.0 * rng.standard_normal((E, 2 * F))).astype(f32)
        t[m + "experts.down_proj"] = np.ascontiguousarray(down.transpose(0, 2, 1))     # [E, F, D]
        t[m + "experts.down_proj_bias"] = (0.5 * rng.standard_normal((E, D))).astype(f32)
    t["model.norm.weight"] = vec(D, 1.0, 0.1)
    t["lm_head.weight"] = mat(s.V, D)
    return t


def config_json(s):
    return {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
        "attention_dropout": 0.0, "eos_token_id": special_id("<|return|>"), "pad_token_id": special_id("<|endoftext|>"),
        "experts_per_token": s.k, "num_experts_per_tok": s.k, "head_dim": s.Dh, "hidden_act": "silu",
        "hidden_size": s.D, "initializer_range": 0.02, "intermediate_size": s.F, "layer_types": s.layer_types,
        "max_position_embeddings": int(s.orig * s.factor), "num_attention_heads": s.H, "num_hidden_layers": s.L,
        "num_key_value_heads": s.HKV, "num_local_experts": s.E, "output_router_logits": False,
        "rms_norm_eps": s.eps, "router_aux_loss_coef": 0.9, "sliding_window": s.window, "swiglu_limit": 7.0,
        "tie_word_embeddings": False, "use_cache": True, "vocab_size": s.V, "dtype": "float32",
        # truncate: true (HF's default) rounds YaRN's correction range as llama.cpp does; the released
        # checkpoints say false (docs/gpt-oss.md).
        "rope_parameters": {"rope_type": "yarn", "rope_theta": s.theta, "factor": s.factor, "beta_fast": 32.0,
                            "beta_slow": 1.0, "original_max_position_embeddings": s.orig, "truncate": True},
    }


def byte_tokens():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out, extra = [], 0
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


MERGED = ["\u0120\u0120"]  # one merge ("  "): a BPE vocabulary needs merges


def vocab_tokens():
    return byte_tokens() + MERGED + SPECIAL


def special_id(tok):
    return 256 + len(MERGED) + SPECIAL.index(tok)


# o200k_harmony's split (tiktoken's o200k pattern), as gpt-oss's tokenizer.json spells it.
O200K_REGEX = (r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"""
               r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"""
               r"""\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def write_tokenizer(path):
    """tokenizer.json and tokenizer_config.json for the GGUF's vocabulary (bytes, the merge, the specials)."""
    toks = vocab_tokens()
    n_base = 256 + len(MERGED)
    added = [{"id": n_base + i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, tok in enumerate(SPECIAL)]
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": O200K_REGEX}, "behavior": "Isolated", "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
           "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                                "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": {t: i for i, t in enumerate(toks[:n_base])}, "merges": [list(MERGED[0])]}}
    with open(os.path.join(path, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    cfg = {"bos_token": "<|start|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>", "add_bos_token": False,
           "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast"}
    with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)


def write_hf(path, s, t):
    from safetensors.numpy import save_file
    os.makedirs(path, exist_ok=True)
    save_file(t, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config_json(s), f, indent=2)
    write_tokenizer(path)


# ---- GGUF, as llama.cpp's converter writes it (conversion/gpt_oss.py) ----------------------------------

def gguf_tensors(s, t, mxfp4):
    """{GGUF name: (array, raw ggml type or None)} in numpy (reversed GGUF) order."""
    out = {"token_embd.weight": (t["model.embed_tokens.weight"], None)}
    for i in range(s.L):
        p, d = f"model.layers.{i}.", f"blk.{i}."
        a, m = p + "self_attn.", p + "mlp."
        out[d + "attn_norm.weight"] = (t[p + "input_layernorm.weight"], None)
        out[d + "post_attention_norm.weight"] = (t[p + "post_attention_layernorm.weight"], None)
        for hf, gg in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")):
            out[d + gg + ".weight"] = (t[a + hf + ".weight"], None)
            out[d + gg + ".bias"] = (t[a + hf + ".bias"], None)
        out[d + "attn_sinks.weight"] = (t[a + "sinks"], None)
        out[d + "ffn_gate_inp.weight"] = (t[m + "router.weight"], None)
        out[d + "ffn_gate_inp.bias"] = (t[m + "router.bias"], None)
        gu = t[m + "experts.gate_up_proj"].transpose(0, 2, 1)  # [E, 2F, D]
        down = t[m + "experts.down_proj"].transpose(0, 2, 1)   # [E, D, F]
        gub = t[m + "experts.gate_up_proj_bias"]
        for name, w in (("ffn_gate_exps", gu[:, ::2, :]), ("ffn_up_exps", gu[:, 1::2, :]), ("ffn_down_exps", down)):
            w = np.ascontiguousarray(w)
            if mxfp4:
                q, deq = mxfp4_quantize(w)
                assert np.array_equal(deq, w), "expert weights must already be MXFP4 values"
                assert np.array_equal(mxfp4_dequantize(q, w.shape[-1]), w)
                out[d + name + ".weight"] = (q, MXFP4_TYPE)
            else:
                out[d + name + ".weight"] = (w, None)
        out[d + "ffn_gate_exps.bias"] = (np.ascontiguousarray(gub[:, ::2]), None)
        out[d + "ffn_up_exps.bias"] = (np.ascontiguousarray(gub[:, 1::2]), None)
        out[d + "ffn_down_exps.bias"] = (t[m + "experts.down_proj_bias"], None)
    out["output_norm.weight"] = (t["model.norm.weight"], None)
    out["output.weight"] = (t["lm_head.weight"], None)
    return out


def write_gguf(path, s, t, mxfp4, edit_tensors=None, keys=None, drop_keys=()):
    """edit_tensors(dict) may drop or replace tensors; keys overrides gpt-oss.* integer keys and
    drop_keys leaves keys out (the bad files of compare_gpt_oss.py)."""
    import gguf
    arch = "gpt-oss"
    tensors = gguf_tensors(s, t, mxfp4)
    if edit_tensors:
        edit_tensors(tensors)
    keys = keys or {}
    w = gguf.GGUFWriter(path, arch)
    w.add_type("model")
    w.add_name("Tiny Gpt Oss Hf")
    w.add_block_count(keys.get("block_count", s.L))
    w.add_context_length(int(s.orig * s.factor))
    w.add_embedding_length(s.D)
    w.add_feed_forward_length(s.F)
    w.add_head_count(s.H)
    w.add_head_count_kv(s.HKV)
    w.add_rope_freq_base(float(s.theta))
    w.add_layer_norm_rms_eps(s.eps)
    w.add_expert_count(keys.get("expert_count", s.E))
    w.add_expert_used_count(keys.get("expert_used_count", s.k))
    w.add_key_length(s.Dh)
    w.add_value_length(s.Dh)
    w.add_file_type(38 if mxfp4 else 0)  # LLAMA_FTYPE_MOSTLY_MXFP4_MOE or ALL_F32
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(s.factor)
    w.add_rope_scaling_orig_ctx_len(s.orig)
    if "sliding_window" not in drop_keys:
        w.add_sliding_window(keys.get("sliding_window", s.window))
    w.add_expert_feed_forward_length(keys.get("expert_feed_forward_length", s.F))
    w.add_quantization_version(2)
    toks = vocab_tokens()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(toks + [f"<|reserved_{i}|>" for i in range(len(toks), s.V)])
    w.add_token_types([1] * (256 + len(MERGED)) + [3] * len(SPECIAL) + [3] * (s.V - len(toks)))
    w.add_token_merges([" ".join(MERGED[0])])
    w.add_bos_token_id(special_id("<|start|>"))
    w.add_eos_token_id(special_id("<|return|>"))
    w.add_pad_token_id(special_id("<|endoftext|>"))
    if s.chat_template:
        w.add_chat_template(s.chat_template)
    for name, (a, raw) in tensors.items():
        if raw is None:
            w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
        else:
            w.add_tensor(name, a, raw_dtype=gguf.GGMLQuantizationType(raw))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv=None):
    a = parse_args(argv)
    s = Spec(a)
    os.makedirs(a.out, exist_ok=True)
    t = hf_weights(s, a.seed)
    write_hf(os.path.join(a.out, "tiny-gpt-oss-hf"), s, t)
    write_gguf(os.path.join(a.out, "tiny-gpt-oss-mxfp4.gguf"), s, t, mxfp4=True)
    write_gguf(os.path.join(a.out, "tiny-gpt-oss-f32.gguf"), s, t, mxfp4=False)


if __name__ == "__main__":
    main()
