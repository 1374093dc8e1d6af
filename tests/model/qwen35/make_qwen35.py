#!/usr/bin/env python3
"""A tiny random-weight Qwen3.5 (HF `qwen3_5`, GGUF architecture `qwen35`): the dense hybrid of
Gated DeltaNet (linear attention) layers and gated full-attention layers, 3 : 1. With --experts N
the MoE variant instead (HF `qwen3_5_moe`, GGUF `qwen35moe`, files named tiny-qwen35moe-*): every
layer's MLP is a softmax top-k router over N SwiGLU experts (fused gate_up_proj [N, 2F, D] and
down_proj [N, D, F], as Qwen3.5-35B-A3B's checkpoint), renormalised, plus a shared SwiGLU expert
scaled by sigmoid(shared_expert_gate x); the config has no dense intermediate_size.

Written to OUT_DIR:
  tiny-qwen35-hf/               a Hugging Face checkpoint shaped like Qwen/Qwen3.5-0.8B's: the
                                multimodal Qwen3_5ForConditionalGeneration config with the text
                                model in text_config, tensors named model.language_model.*, a
                                (tiny, random) vision tower under model.visual.*, the MTP head under
                                mtp.* (mtp_num_hidden_layers 1), all f32; a byte-level tokenizer.json
  tiny-qwen35-f32.gguf          what llama.cpp's convert_hf_to_gguf.py writes for that folder with
                                --outtype f32: the MTP head becomes an extra block blk.{L} (nextn.*),
                                block_count L + 1, nextn_predict_layers 1
  tiny-qwen35-nomtp-f32.gguf    the same with --no-mtp: block_count L, no MTP tensors

Shapes are the real ones in miniature (Qwen3.5-0.8B: hidden 1024, head_dim 256, 8 q / 2 kv heads,
rotary 0.25 of the head, mrope_section [11, 11, 10]; linear_* 16 key heads x 128, value heads 16
(0.8B), 32 (9B) or 48 (27B) x 128, conv kernel 4). The defaults here: 8 layers (linear x3, full),
hidden 256, head_dim 64 (8 q heads, 2 kv heads), rotary 16 dims with mrope_section [3, 3, 2],
4 linear key heads and 8 value heads of 32 (value heads twice the key heads, as the 9B, so the
converter's V-head reorder matters), tied embeddings as the 0.8B (--untied: as the 9B and 27B).

Weights are seeded normals scaled 1/sqrt(fan_in) (0.0625 at 256 inputs), embeddings N(0, 0.1);
the zero-centred norms (HF stores w, applies 1 + w) N(0, 0.1); the gated norm of the linear layers
(applied as w) 1 + N(0, 0.1); A_log = log U(0.5, 8) and dt_bias U(-3, 0), so the per-token decay
exp(-exp(A_log) softplus(a + dt_bias)) ranges from ~0 to ~0.97 across heads.

GGUF transforms, as llama.cpp's converter (conversion/qwen.py: Qwen3_5TextModel and its bases):
  * "language_model." dropped from names, model.visual.* skipped, mtp.* renamed to layer L
  * linear-attention tensors with value heads != key heads: the value heads go from grouped
    (v head g*r + j belongs to key head g, r = n_v / n_k) to tiled order (new head j*n_k + g), in
    the v rows of in_proj_qkv, the v channels of conv1d, the rows of in_proj_z, in_proj_a,
    in_proj_b, the entries of A_log and dt_bias, and the input columns of out_proj
  * A_log -> ssm_a = -exp(A_log);  dt_bias -> ssm_dt.bias;  conv1d [C, 1, K] -> [C, K]
  * every *norm.weight except linear_attn.norm gets + 1 (the zero-centred RMSNorm made plain)
Usage: make_qwen35.py --out DIR [--seed N] [--layers N] [--hidden N] [--untied] [--no-vision] ...
"""
import argparse
import json
import math
import os

import numpy as np

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
           "<|image_pad|>", "<|video_pad|>"]
MERGED = ["\u0101\u0102"]  # one merge (bytes 0x01 0x02): llama.cpp refuses a BPE vocabulary without merges
PRETOKENIZE_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"""
                     r""" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--full-attention-interval", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--intermediate", type=int, default=896, help="3.5 x hidden, as the 0.8B")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--partial-rotary-factor", type=float, default=0.25)
    p.add_argument("--mrope-section", default="3,3,2", help="sums to head_dim * factor / 2")
    p.add_argument("--rope-theta", type=float, default=10000000.0)
    p.add_argument("--linear-key-heads", type=int, default=4)
    p.add_argument("--linear-value-heads", type=int, default=8)
    p.add_argument("--linear-head-dim", type=int, default=32, help="key and value head dim (equal, as all real ones)")
    p.add_argument("--conv-kernel", type=int, default=4)
    p.add_argument("--vocab", type=int, default=320, help="embedding rows; the tokenizer has fewer (padded, as the real 248320)")
    p.add_argument("--rms-eps", type=float, default=1e-6)
    p.add_argument("--untied", action="store_true", help="separate lm_head (as the 9B/27B); default tied (as the 0.8B)")
    p.add_argument("--no-vision", action="store_true", help="leave the vision tower's tensors out of the checkpoint")
    p.add_argument("--no-mtp", action="store_true", help="no mtp.* tensors (mtp_num_hidden_layers 0) and no MTP GGUF")
    p.add_argument("--gguf-only", action="store_true",
                   help="write only the no-MTP GGUF, drawing the weights as float32 normals (other values than the "
                        "default float64 draw; for real-size models, e.g. the bench's Qwen3.5-2B shape)")
    p.add_argument("--outtype", choices=["f32", "f16"], default="f32",
                   help="GGUF type of the matrices (f16: as the converter's --outtype f16; 1-D tensors and "
                        "ssm_conv1d stay f32)")
    p.add_argument("--chat-template", default=None, help="a chat template to store in the GGUFs (tokenizer.chat_template)")
    p.add_argument("--experts", type=int, default=0, help="> 0: the MoE variant with this many routed experts")
    p.add_argument("--experts-used", type=int, default=2, help="experts per token (num_experts_per_tok)")
    p.add_argument("--expert-ff", type=int, default=128, help="moe_intermediate_size")
    p.add_argument("--shared-ff", type=int, default=192, help="shared_expert_intermediate_size")
    return p.parse_args(argv)


class Spec:
    """The hyperparameters of one tiny model."""

    def __init__(self, a):
        self.L, self.D, self.F = a.layers, a.hidden, a.intermediate
        self.H, self.HKV, self.Dh = a.heads, a.kv_heads, a.head_dim
        self.rot_factor, self.theta = a.partial_rotary_factor, a.rope_theta
        self.mrope = [int(x) for x in a.mrope_section.split(",")]
        self.nk, self.nv, self.dk = a.linear_key_heads, a.linear_value_heads, a.linear_head_dim
        self.dv = self.dk
        self.K = a.conv_kernel
        self.V, self.eps = a.vocab, a.rms_eps
        self.interval = a.full_attention_interval
        self.tied, self.vision, self.mtp = not a.untied, not a.no_vision, not a.no_mtp
        self.E, self.E_used, self.Fe, self.Fs = a.experts, a.experts_used, a.expert_ff, a.shared_ff
        self.chat_template = a.chat_template
        self.moe = self.E > 0
        self.stem = "tiny-qwen35moe" if self.moe else "tiny-qwen35"
        if self.moe and not 1 <= self.E_used <= self.E:
            raise SystemExit("--experts-used must be in [1, --experts]")
        self.layer_types = ["linear_attention" if (i + 1) % self.interval else "full_attention" for i in range(self.L)]
        n_rot = int(self.Dh * self.rot_factor)
        if sum(self.mrope) * 2 != n_rot:
            raise SystemExit(f"mrope_section {self.mrope} must sum to rotary dims / 2 = {n_rot // 2}")
        if self.nv % self.nk:
            raise SystemExit("linear value heads must be a multiple of linear key heads")
        if len(SPECIAL) + 256 + len(MERGED) > self.V:
            raise SystemExit("vocab too small for the tokenizer")
        # the tiny vision tower: real keys, small sizes
        self.vis = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "in_channels": 3,
                    "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                    "num_position_embeddings": 16, "out_hidden_size": self.D}


def special_id(tok):
    return 256 + len(MERGED) + SPECIAL.index(tok)


def config_json(s):
    text = {
        "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True, "dtype": "float32",
        "eos_token_id": special_id("<|endoftext|>"), "full_attention_interval": s.interval, "head_dim": s.Dh, "hidden_act": "silu",
        "hidden_size": s.D, "initializer_range": 0.02, "intermediate_size": s.F, "layer_types": s.layer_types,
        "linear_conv_kernel_dim": s.K, "linear_key_head_dim": s.dk, "linear_num_key_heads": s.nk,
        "linear_num_value_heads": s.nv, "linear_value_head_dim": s.dv, "max_position_embeddings": 262144,
        "mlp_only_layers": [], "model_type": "qwen3_5_text", "mtp_num_hidden_layers": 1 if s.mtp else 0,
        "mtp_use_dedicated_embeddings": False, "num_attention_heads": s.H, "num_hidden_layers": s.L,
        "num_key_value_heads": s.HKV, "rms_norm_eps": s.eps, "tie_word_embeddings": s.tied, "use_cache": True,
        "vocab_size": s.V, "mamba_ssm_dtype": "float32",
        **({"num_experts": s.E, "num_experts_per_tok": s.E_used, "moe_intermediate_size": s.Fe,
            "shared_expert_intermediate_size": s.Fs, "router_aux_loss_coef": 0.001, "output_router_logits": False}
           if s.moe else {}),
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": list(s.mrope), "rope_type": "default",
                            "rope_theta": int(s.theta) if float(s.theta).is_integer() else s.theta,
                            "partial_rotary_factor": s.rot_factor},
    }
    vision = {"deepstack_visual_indexes": [], "depth": s.vis["depth"], "hidden_act": "gelu_pytorch_tanh",
              "hidden_size": s.vis["hidden_size"], "in_channels": s.vis["in_channels"], "initializer_range": 0.02,
              "intermediate_size": s.vis["intermediate_size"], "model_type": "qwen3_5",
              "num_heads": s.vis["num_heads"], "num_position_embeddings": s.vis["num_position_embeddings"],
              "out_hidden_size": s.vis["out_hidden_size"], "patch_size": s.vis["patch_size"],
              "spatial_merge_size": s.vis["spatial_merge_size"], "temporal_patch_size": s.vis["temporal_patch_size"]}
    if s.moe:
        del text["intermediate_size"]
        text["model_type"] = "qwen3_5_moe_text"
        vision["model_type"] = "qwen3_5_moe"
    return {"architectures": ["Qwen3_5MoeForConditionalGeneration" if s.moe else "Qwen3_5ForConditionalGeneration"],
            "image_token_id": special_id("<|image_pad|>"), "model_type": "qwen3_5_moe" if s.moe else "qwen3_5",
            "text_config": text, "tie_word_embeddings": s.tied, "transformers_version": "4.57.0.dev0",
            "video_token_id": special_id("<|video_pad|>"), "vision_config": vision,
            "vision_end_token_id": special_id("<|vision_end|>"),
            "vision_start_token_id": special_id("<|vision_start|>")}


def hf_weights(s, seed, draw_f32=False):
    """{HF name: f32 array} in the real checkpoint's naming. draw_f32: normals drawn as float32
    (half the memory and time of the float64 draw; other values)."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    if draw_f32:
        base = rng

        class Rng32:
            def standard_normal(self, size):
                return base.standard_normal(size, dtype=np.float32)

            def uniform(self, lo, hi, n):
                return base.uniform(lo, hi, n)
        rng = Rng32()  # noqa: F811

    def mat(rows, cols, gain=1.0):
        m = rng.standard_normal((rows, cols))
        m *= gain / math.sqrt(cols)  # float64 draw: as before; float32 draw: stays float32
        return m.astype(f32, copy=False)

    def zc_norm(n):  # zero-centred RMSNorm weight (applied as 1 + w)
        return (0.1 * rng.standard_normal(n)).astype(f32)

    def plain_norm(n):  # applied as w
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(f32)

    D, F = s.D, s.F
    t = {}
    lm = "model.language_model."
    t[lm + "embed_tokens.weight"] = (0.1 * rng.standard_normal((s.V, D))).astype(f32)

    def full_attn(p):
        t[p + "self_attn.q_proj.weight"] = mat(2 * s.H * s.Dh, D)  # per head: Dh query rows, then Dh gate rows
        t[p + "self_attn.k_proj.weight"] = mat(s.HKV * s.Dh, D)
        t[p + "self_attn.v_proj.weight"] = mat(s.HKV * s.Dh, D)
        t[p + "self_attn.o_proj.weight"] = mat(D, s.H * s.Dh)
        t[p + "self_attn.q_norm.weight"] = zc_norm(s.Dh)
        t[p + "self_attn.k_norm.weight"] = zc_norm(s.Dh)

    def block_common(p):
        t[p + "input_layernorm.weight"] = zc_norm(D)
        t[p + "post_attention_layernorm.weight"] = zc_norm(D)
        if s.moe:
            t[p + "mlp.gate.weight"] = mat(s.E, D, 4.0)  # a peaked router: top-k choices away from ties
            t[p + "mlp.experts.gate_up_proj"] = np.stack([mat(2 * s.Fe, D) for _ in range(s.E)])
            t[p + "mlp.experts.down_proj"] = np.stack([mat(D, s.Fe) for _ in range(s.E)])
            t[p + "mlp.shared_expert.gate_proj.weight"] = mat(s.Fs, D)
            t[p + "mlp.shared_expert.up_proj.weight"] = mat(s.Fs, D)
            t[p + "mlp.shared_expert.down_proj.weight"] = mat(D, s.Fs)
            t[p + "mlp.shared_expert_gate.weight"] = mat(1, D)
            return
        t[p + "mlp.gate_proj.weight"] = mat(F, D)
        t[p + "mlp.up_proj.weight"] = mat(F, D)
        t[p + "mlp.down_proj.weight"] = mat(D, F)

    key_dim, value_dim = s.nk * s.dk, s.nv * s.dv
    for i in range(s.L):
        p = f"{lm}layers.{i}."
        block_common(p)
        if s.layer_types[i] == "full_attention":
            full_attn(p)
        else:
            la = p + "linear_attn."
            t[la + "in_proj_qkv.weight"] = mat(2 * key_dim + value_dim, D)
            t[la + "in_proj_z.weight"] = mat(value_dim, D)
            t[la + "in_proj_b.weight"] = mat(s.nv, D)
            t[la + "in_proj_a.weight"] = mat(s.nv, D)
            t[la + "conv1d.weight"] = (0.5 * rng.standard_normal((2 * key_dim + value_dim, 1, s.K))).astype(f32)
            t[la + "dt_bias"] = rng.uniform(-3.0, 0.0, s.nv).astype(f32)
            t[la + "A_log"] = np.log(rng.uniform(0.5, 8.0, s.nv)).astype(f32)
            t[la + "norm.weight"] = plain_norm(s.dv)
            t[la + "out_proj.weight"] = mat(D, value_dim)
    t[lm + "norm.weight"] = zc_norm(D)
    if not s.tied:
        t["lm_head.weight"] = (0.1 * rng.standard_normal((s.V, D))).astype(f32)
    if s.mtp:
        t["mtp.fc.weight"] = mat(D, 2 * D)
        t["mtp.pre_fc_norm_embedding.weight"] = zc_norm(D)
        t["mtp.pre_fc_norm_hidden.weight"] = zc_norm(D)
        t["mtp.norm.weight"] = zc_norm(D)
        block_common("mtp.layers.0.")
        full_attn("mtp.layers.0.")
    if s.vision:
        v, vp = s.vis, "model.visual."
        hd, inter = v["hidden_size"], v["intermediate_size"]
        t[vp + "patch_embed.proj.weight"] = (0.02 * rng.standard_normal(
            (hd, v["in_channels"], v["temporal_patch_size"], v["patch_size"], v["patch_size"]))).astype(f32)
        t[vp + "patch_embed.proj.bias"] = (0.02 * rng.standard_normal(hd)).astype(f32)
        t[vp + "pos_embed.weight"] = (0.02 * rng.standard_normal((v["num_position_embeddings"], hd))).astype(f32)
        for b in range(v["depth"]):
            bp = f"{vp}blocks.{b}."
            for n in ("norm1", "norm2"):
                t[bp + n + ".weight"] = plain_norm(hd)
                t[bp + n + ".bias"] = (0.02 * rng.standard_normal(hd)).astype(f32)
            for n, (o, i_) in {"attn.qkv": (3 * hd, hd), "attn.proj": (hd, hd),
                               "mlp.linear_fc1": (inter, hd), "mlp.linear_fc2": (hd, inter)}.items():
                t[bp + n + ".weight"] = mat(o, i_)
                t[bp + n + ".bias"] = (0.02 * rng.standard_normal(o)).astype(f32)
        m = hd * v["spatial_merge_size"] ** 2
        t[vp + "merger.norm.weight"] = plain_norm(hd)
        t[vp + "merger.norm.bias"] = (0.02 * rng.standard_normal(hd)).astype(f32)
        t[vp + "merger.linear_fc1.weight"] = mat(m, m)
        t[vp + "merger.linear_fc1.bias"] = (0.02 * rng.standard_normal(m)).astype(f32)
        t[vp + "merger.linear_fc2.weight"] = mat(v["out_hidden_size"], m)
        t[vp + "merger.linear_fc2.bias"] = (0.02 * rng.standard_normal(v["out_hidden_size"])).astype(f32)
    return t


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


def vocab_tokens():
    """The tokenizer's tokens by id: 256 bytes, the one merge, the specials (fewer than vocab_size).
    The BPE vocabulary is contiguous and the added tokens follow it, as in Qwen's tokenizer.json
    (transformers' Qwen3_5Tokenizer renumbers added tokens that leave a gap)."""
    return byte_tokens() + MERGED + SPECIAL


def write_tokenizer(path):
    toks = vocab_tokens()
    n_base = 256 + len(MERGED)
    added = [{"id": n_base + i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, tok in enumerate(SPECIAL)]
    vocab = {tok: i for i, tok in enumerate(toks[:n_base])}
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": {"type": "NFC"},
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": PRETOKENIZE_REGEX}, "behavior": "Isolated", "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
           "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                                                "use_regex": False},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                     "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": [list(MERGED[0])]}}
    with open(os.path.join(path, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    cfg = {"add_bos_token": False, "add_prefix_space": False, "bos_token": None, "eos_token": "<|im_end|>",
           "pad_token": "<|endoftext|>", "unk_token": None, "model_max_length": 262144,
           "tokenizer_class": "Qwen2Tokenizer", "errors": "replace", "clean_up_tokenization_spaces": False}
    with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)


def write_hf(path, s, t):
    from safetensors.numpy import save_file
    os.makedirs(path, exist_ok=True)
    save_file(t, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config_json(s), f, indent=4)
    write_tokenizer(path)


# ---- GGUF, as llama.cpp's converter writes it -------------------------------------------------------

def reorder_v_heads(a, axis, n_k, r, head_dim):
    """Grouped (v head g*r + j of key head g) -> tiled (position j*n_k + g) along |axis|."""
    a = np.moveaxis(a, axis, 0)
    shape = a.shape
    a = a.reshape((n_k, r, head_dim) + shape[1:]).swapaxes(0, 1).reshape(shape)
    return np.ascontiguousarray(np.moveaxis(a, 0, axis))


def gguf_tensors(s, t, with_mtp):
    """{GGUF name: f32 array in numpy (= reversed GGUF) order}, the converter's transforms applied."""
    f32 = np.float32
    out = {}
    r = s.nv // s.nk
    key_dim = s.nk * s.dk

    def vre(a, axis, hd):
        return reorder_v_heads(a, axis, s.nk, r, hd) if r != 1 else a

    def norm1(a):  # zero-centred -> plain
        return (a + f32(1.0)).astype(f32)

    lm = "model.language_model."
    out["token_embd.weight"] = t[lm + "embed_tokens.weight"]

    def common(src, dst):
        out[dst + "attn_norm.weight"] = norm1(t[src + "input_layernorm.weight"])
        out[dst + "post_attention_norm.weight"] = norm1(t[src + "post_attention_layernorm.weight"])
        if s.moe:  # conversion/qwen.py (Qwen2MoeModel): gate_up_proj split into gate and up
            gu = t[src + "mlp.experts.gate_up_proj"]
            out[dst + "ffn_gate_inp.weight"] = t[src + "mlp.gate.weight"]
            out[dst + "ffn_gate_exps.weight"] = gu[:, :s.Fe, :]
            out[dst + "ffn_up_exps.weight"] = gu[:, s.Fe:, :]
            out[dst + "ffn_down_exps.weight"] = t[src + "mlp.experts.down_proj"]
            out[dst + "ffn_gate_inp_shexp.weight"] = t[src + "mlp.shared_expert_gate.weight"]
            out[dst + "ffn_gate_shexp.weight"] = t[src + "mlp.shared_expert.gate_proj.weight"]
            out[dst + "ffn_up_shexp.weight"] = t[src + "mlp.shared_expert.up_proj.weight"]
            out[dst + "ffn_down_shexp.weight"] = t[src + "mlp.shared_expert.down_proj.weight"]
            return
        out[dst + "ffn_gate.weight"] = t[src + "mlp.gate_proj.weight"]
        out[dst + "ffn_up.weight"] = t[src + "mlp.up_proj.weight"]
        out[dst + "ffn_down.weight"] = t[src + "mlp.down_proj.weight"]

    def full(src, dst):
        out[dst + "attn_q.weight"] = t[src + "self_attn.q_proj.weight"]
        out[dst + "attn_k.weight"] = t[src + "self_attn.k_proj.weight"]
        out[dst + "attn_v.weight"] = t[src + "self_attn.v_proj.weight"]
        out[dst + "attn_output.weight"] = t[src + "self_attn.o_proj.weight"]
        out[dst + "attn_q_norm.weight"] = norm1(t[src + "self_attn.q_norm.weight"])
        out[dst + "attn_k_norm.weight"] = norm1(t[src + "self_attn.k_norm.weight"])

    for i in range(s.L):
        src, dst = f"{lm}layers.{i}.", f"blk.{i}."
        common(src, dst)
        if s.layer_types[i] == "full_attention":
            full(src, dst)
            continue
        la = src + "linear_attn."
        qkv = t[la + "in_proj_qkv.weight"]
        out[dst + "attn_qkv.weight"] = np.concatenate([qkv[:2 * key_dim], vre(qkv[2 * key_dim:], 0, s.dv)], 0)
        out[dst + "attn_gate.weight"] = vre(t[la + "in_proj_z.weight"], 0, s.dv)
        out[dst + "ssm_beta.weight"] = vre(t[la + "in_proj_b.weight"], 0, 1)
        out[dst + "ssm_alpha.weight"] = vre(t[la + "in_proj_a.weight"], 0, 1)
        conv = t[la + "conv1d.weight"][:, 0, :]
        out[dst + "ssm_conv1d.weight"] = np.concatenate([conv[:2 * key_dim], vre(conv[2 * key_dim:], 0, s.dv)], 0)
        out[dst + "ssm_dt.bias"] = vre(t[la + "dt_bias"], 0, 1)
        # exp in float64, rounded once to f32: matches torch's f32 exp here where numpy's f32 exp is 1 ulp off
        out[dst + "ssm_a"] = (-np.exp(vre(t[la + "A_log"], 0, 1).astype(np.float64))).astype(f32)
        out[dst + "ssm_norm.weight"] = t[la + "norm.weight"]
        out[dst + "ssm_out.weight"] = vre(t[la + "out_proj.weight"], 1, s.dv)
    out["output_norm.weight"] = norm1(t[lm + "norm.weight"])
    if not s.tied:
        out["output.weight"] = t["lm_head.weight"]
    if with_mtp:
        dst = f"blk.{s.L}."
        common("mtp.layers.0.", dst)
        full("mtp.layers.0.", dst)
        out[dst + "nextn.eh_proj.weight"] = t["mtp.fc.weight"]
        out[dst + "nextn.enorm.weight"] = norm1(t["mtp.pre_fc_norm_embedding.weight"])
        out[dst + "nextn.hnorm.weight"] = norm1(t["mtp.pre_fc_norm_hidden.weight"])
        out[dst + "nextn.shared_head_norm.weight"] = norm1(t["mtp.norm.weight"])
    return {k: np.ascontiguousarray(v, dtype=f32) for k, v in out.items()}


def write_gguf(path, s, t, with_mtp, name="Tiny Qwen35 Hf", edit_tensors=None, u32=None, outtype="f32"):
    """name: what the converter derives from the folder name tiny-qwen35-hf.
    edit_tensors(dict) may drop or replace tensors and u32 override qwen35.* integer keys (the bad
    files of compare_qwen35.py)."""
    import gguf
    arch = "qwen35moe" if s.moe else "qwen35"
    tensors = gguf_tensors(s, t, with_mtp)
    if edit_tensors:
        edit_tensors(tensors)
    u32 = u32 or {}
    w = gguf.GGUFWriter(path, arch)
    n_blocks = s.L + (1 if with_mtp else 0)
    w.add_type("model")
    w.add_name(name)
    probe = gguf.GGUFWriter(None, arch)  # the converter's parameter count (experts counted per expert)
    for name_, a in tensors.items():
        probe.add_tensor(name_, a)
    w.add_string("general.size_label", gguf.size_label(*probe.get_total_parameter_count()))
    w.add_block_count(n_blocks)
    w.add_context_length(262144)
    w.add_embedding_length(s.D)
    if not s.moe:  # the MoE config has no intermediate_size, so no feed_forward_length
        w.add_feed_forward_length(s.F)
    w.add_head_count(s.H)
    w.add_head_count_kv(s.HKV)
    w.add_array(f"{arch}.rope.dimension_sections", list(s.mrope) + [0] * (4 - len(s.mrope)))
    w.add_rope_freq_base(float(s.theta))
    w.add_layer_norm_rms_eps(s.eps)
    if s.moe:
        w.add_expert_count(u32.get("expert_count", s.E))
        w.add_expert_used_count(u32.get("expert_used_count", s.E_used))
    w.add_key_length(s.Dh)
    w.add_value_length(s.Dh)
    w.add_file_type(1 if outtype == "f16" else 0)  # MOSTLY_F16 or ALL_F32
    if s.moe:
        w.add_expert_feed_forward_length(s.Fe)
        w.add_expert_shared_feed_forward_length(s.Fs)
    if with_mtp:
        w.add_uint32(f"{arch}.nextn_predict_layers", 1)
    w.add_uint32(f"{arch}.ssm.conv_kernel", u32.get("ssm.conv_kernel", s.K))
    w.add_uint32(f"{arch}.ssm.state_size", u32.get("ssm.state_size", s.dk))
    w.add_uint32(f"{arch}.ssm.group_count", u32.get("ssm.group_count", s.nk))
    w.add_uint32(f"{arch}.ssm.time_step_rank", u32.get("ssm.time_step_rank", s.nv))
    w.add_uint32(f"{arch}.ssm.inner_size", u32.get("ssm.inner_size", s.nv * s.dv))
    w.add_array(f"{arch}.attention.recurrent_layers",
                [lt == "linear_attention" for lt in s.layer_types] + [False] * (n_blocks - s.L))
    w.add_uint32(f"{arch}.full_attention_interval", s.interval)
    w.add_rope_dimension_count(int(s.Dh * s.rot_factor))
    w.add_quantization_version(2)
    # vocabulary: what _set_vocab_gpt2 writes for tiny-qwen35-hf/tokenizer.json
    toks = vocab_tokens()
    n_tok = len(toks)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen35")
    w.add_token_list(toks + [f"[PAD{i}]" for i in range(n_tok, s.V)])
    w.add_token_types([1] * (256 + len(MERGED)) + [3] * len(SPECIAL) + [5] * (s.V - n_tok))
    w.add_token_merges([" ".join(MERGED[0])])
    w.add_eos_token_id(special_id("<|im_end|>"))
    w.add_pad_token_id(special_id("<|endoftext|>"))
    w.add_add_bos_token(False)
    if getattr(s, "chat_template", None):
        w.add_chat_template(s.chat_template)
    for name_, a in tensors.items():
        f16 = outtype == "f16" and a.ndim >= 2 and not name_.endswith("ssm_conv1d.weight")
        w.add_tensor(name_, a.astype(np.float16) if f16 else a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv=None):
    a = parse_args(argv)
    s = Spec(a)
    os.makedirs(a.out, exist_ok=True)
    t = hf_weights(s, a.seed, draw_f32=a.gguf_only)
    name = "Tiny Qwen35Moe Hf" if s.moe else "Tiny Qwen35 Hf"
    if a.gguf_only:
        write_gguf(os.path.join(a.out, f"{s.stem}-nomtp-{a.outtype}.gguf"), s, t, with_mtp=False, name=name,
                   outtype=a.outtype)
        return
    write_hf(os.path.join(a.out, s.stem + "-hf"), s, t)
    if s.mtp:
        write_gguf(os.path.join(a.out, s.stem + "-f32.gguf"), s, t, with_mtp=True, name=name)
    write_gguf(os.path.join(a.out, s.stem + "-nomtp-f32.gguf"), s, t, with_mtp=False, name=name)


if __name__ == "__main__":
    main()
