#!/usr/bin/env python3
"""An independent float64 numpy forward pass of the Gemma 4 text decoder, written from
transformers' models/gemma4/modeling_gemma4.py (Gemma4TextModel, Gemma4ForCausalLM) and its
configuration (per-layer head dims and KV heads, rope_parameters per layer type, KV sharing), for
a Hugging Face checkpoint folder (config.json + model.safetensors). Checked once against
transformers itself (tests/model/gemma4/validate_vs_transformers.py; docs/gemma4.md has the numbers).

Switches that turn one feature off (for tests showing each one matters): window (sliding-window
mask on the sliding layers), ple (per-layer embeddings), v_norm (RMSNorm of the values),
proportional (the global layers' partial "proportional" RoPE; off: RoPE over the whole head),
layer_scalar, softcap, share (KV sharing; off: a sharing layer reads the first layer of its type),
expert_scale (MoE: the router's per-expert scale), renormalize (MoE: top-k weights summing to 1;
it hardly shows: post_feedforward_layernorm_2 normalises away a common factor per token).
Usage: numpy_gemma4.py HF_DIR|GGUF --tokens 1,2,3 --out logits.npy
"""
import argparse
import json
import math
import os

import numpy as np


def rms_norm(x, w, eps):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * w if w is not None else y


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class Gemma4:
    def __init__(self, folder):
        from safetensors.numpy import load_file
        with open(os.path.join(folder, "config.json")) as f:
            c = json.load(f)
        c = c.get("text_config", c)
        self.c = c
        raw = load_file(os.path.join(folder, "model.safetensors"))
        self.w = {k.replace("model.language_model.", "").replace("model.", "", 1): v.astype(np.float64) for k, v in raw.items()}
        self.L, self.D, self.H = c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"]
        self.eps = c["rms_norm_eps"]
        self.types = c["layer_types"]
        self.P = c.get("hidden_size_per_layer_input") or 0
        self.window_size = c["sliding_window"]
        # Per layer: head dim and KV heads (the global layers' from global_head_dim and, with
        # attention_k_eq_v, num_global_key_value_heads).
        self.head_dim = [c["head_dim"] if t == "sliding_attention" else c["global_head_dim"] for t in self.types]
        hkv_g = c.get("num_global_key_value_heads") if c.get("attention_k_eq_v", False) else None
        self.kv_heads = [c["num_key_value_heads"] if t == "sliding_attention" or hkv_g is None else hkv_g for t in self.types]
        self.first_shared = self.L - c.get("num_kv_shared_layers", 0)
        self.window = self.ple = self.v_norm = self.proportional = self.layer_scalar = self.softcap = self.share = True
        self.expert_scale = self.renormalize = True

    def inv_freq(self, layer):
        t = self.types[layer]
        rp = self.c["rope_parameters"][t]
        base, hd = rp["rope_theta"], self.head_dim[layer]
        if rp.get("rope_type", "default") == "proportional" and self.proportional:
            angles = int(rp.get("partial_rotary_factor", 1.0) * hd // 2)
            rot = 1.0 / base ** (np.arange(0, 2 * angles, 2, dtype=np.float64) / hd)
            return np.concatenate([rot, np.zeros(hd // 2 - angles)])
        return 1.0 / base ** (np.arange(0, hd, 2, dtype=np.float64) / hd)

    def rope(self, x, pos, inv):  # x [T, h, d]: rotate_half pairs (i, i + d/2)
        ang = pos[:, None] * inv[None, :]
        cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
        half = x.shape[-1] // 2
        rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
        return x * cos[:, None, :] + rot * sin[:, None, :]

    def attend(self, q, k, v, sliding):
        T, H, d = q.shape
        group = H // k.shape[1]
        i = np.arange(T)[:, None]
        j = np.arange(T)[None, :]
        allowed = j <= i
        if sliding and self.window:
            allowed &= (i - j) < self.window_size
        out = np.empty_like(q)
        for h in range(H):
            s = q[:, h, :] @ k[:, h // group, :].T  # scaling 1.0
            s = np.where(allowed, s, -np.inf)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            out[:, h, :] = s @ v[:, h // group, :]
        return out

    def experts(self, p, x):
        """Gemma4TextRouter + Gemma4TextExperts on the residual stream x [T, D]."""
        w, c = self.w, self.c
        k, F = c["top_k_experts"], c["moe_intermediate_size"]
        r = rms_norm(x, None, self.eps) * w[p + "router.scale"] / math.sqrt(self.D)
        logits = r @ w[p + "router.proj.weight"].T
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        h = rms_norm(x, w[p + "pre_feedforward_layernorm_2.weight"], self.eps)
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            top = np.argsort(-probs[t], kind="stable")[:k]
            wt = probs[t, top] / (probs[t, top].sum() if self.renormalize else 1.0)
            if self.expert_scale:
                wt = wt * w[p + "router.per_expert_scale"][top]
            for e, we in zip(top, wt):
                gu = w[p + "experts.gate_up_proj"][e] @ h[t]
                out[t] += we * (w[p + "experts.down_proj"][e] @ (gelu_tanh(gu[:F]) * gu[F:]))
        return out

    def forward(self, ids):
        w, D, T = self.w, self.D, len(ids)
        ids = np.asarray(ids)
        pos = np.arange(T, dtype=np.float64)
        x = w["embed_tokens.weight"][ids] * math.sqrt(D)
        pli = None
        if self.P and self.ple:
            tok = (w["embed_tokens_per_layer.weight"][ids] * math.sqrt(self.P)).reshape(T, self.L, self.P)
            proj = (x @ w["per_layer_model_projection.weight"].T) / math.sqrt(D)
            proj = rms_norm(proj.reshape(T, self.L, self.P), w["per_layer_projection_norm.weight"], self.eps)
            pli = (proj + tok) / math.sqrt(2.0)
        stored, own = {}, {}
        for l in range(self.L):
            p, hd, hkv, t = f"layers.{l}.", self.head_dim[l], self.kv_heads[l], self.types[l]
            sliding = t == "sliding_attention"
            inv = self.inv_freq(l)
            h = rms_norm(x, w[p + "input_layernorm.weight"], self.eps)
            q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, self.H, hd)
            q = self.rope(rms_norm(q, w[p + "self_attn.q_norm.weight"], self.eps), pos, inv)
            if l < self.first_shared:
                kr = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, hkv, hd)
                vr = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, hkv, hd) if p + "self_attn.v_proj.weight" in w else kr
                k = self.rope(rms_norm(kr, w[p + "self_attn.k_norm.weight"], self.eps), pos, inv)
                v = rms_norm(vr, None, self.eps) if self.v_norm else vr
                stored[t] = own[l] = (k, v)  # the last non-sharing layer of each type is what sharing layers read
            else:
                k, v = stored[t] if self.share else own[self.types.index(t)]
            o = self.attend(q, k, v, sliding).reshape(T, self.H * hd) @ w[p + "self_attn.o_proj.weight"].T
            x = x + rms_norm(o, w[p + "post_attention_layernorm.weight"], self.eps)
            h = rms_norm(x, w[p + "pre_feedforward_layernorm.weight"], self.eps)
            h = (gelu_tanh(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
            if self.c.get("enable_moe_block"):
                h = rms_norm(h, w[p + "post_feedforward_layernorm_1.weight"], self.eps) + \
                    rms_norm(self.experts(p, x), w[p + "post_feedforward_layernorm_2.weight"], self.eps)
            x = x + rms_norm(h, w[p + "post_feedforward_layernorm.weight"], self.eps)
            if pli is not None:
                y = gelu_tanh(x @ w[p + "per_layer_input_gate.weight"].T) * pli[:, l, :]
                y = rms_norm(y @ w[p + "per_layer_projection.weight"].T, w[p + "post_per_layer_input_norm.weight"], self.eps)
                x = x + y
            if self.layer_scalar and p + "layer_scalar" in w:
                x = x * w[p + "layer_scalar"][0]
        x = rms_norm(x, w["norm.weight"], self.eps)
        head = w["lm_head.weight"] if "lm_head.weight" in w else w["embed_tokens.weight"]
        logits = x @ head.T
        cap = self.c.get("final_logit_softcapping")
        if cap and self.softcap:
            logits = cap * np.tanh(logits / cap)
        return logits


def load(folder):
    """The oracle of an HF folder, or of make_gemma4.py's GGUF (NAME-f32.gguf beside NAME-hf/)."""
    if folder.endswith("-f32.gguf"):
        folder = folder[: -len("-f32.gguf")] + "-hf"
    return Gemma4(folder)


# The interface of bench/peer/logits_vs_oracle.py: Model(path), forward(model, ids).
Model = load


def forward(model, ids):
    return model.forward([int(t) for t in ids])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    np.save(a.out, load(a.model).forward([int(t) for t in a.tokens.split(",")]))


if __name__ == "__main__":
    main()
