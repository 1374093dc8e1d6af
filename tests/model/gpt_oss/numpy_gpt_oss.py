#!/usr/bin/env python3
"""An independent float64 numpy forward pass of gpt-oss (HF `gpt_oss`), written from transformers'
modeling_gpt_oss.py, sharing no code with Tessera or llama.cpp.

  h = embed_tokens[ids]
  per layer (layer_types: sliding_attention / full_attention):
    x = RMSNorm(h) * input_layernorm
    q, k, v = x @ W^T + b (q/k/v_proj, biases);  q, k: rotate_half RoPE with YaRN inverse frequencies
      (interpolated below the correction range, extrapolated above it, a linear ramp between;
      rounded bounds when rope_parameters.truncate, HF's default) and cos/sin times the attention
      factor 0.1 ln(factor) + 1
    logits = q k^T / sqrt(head_dim), causal (sliding layers: keys (p - window, p]), GQA;
    p = softmax([logits, sink_h]) without the sink's column;  h += (p v) @ o_proj^T + o_bias
    x = RMSNorm(h) * post_attention_layernorm
    router: r = x @ router^T + router_bias; the top-k r, softmax over them
    expert e: gu = x @ gate_up_proj[e] + gate_up_proj_bias[e]; gate = gu[::2], up = gu[1::2]
      gate = min(gate, limit); up = clamp(up, -limit, limit); y = (up + 1) * gate * sigmoid(alpha gate)
      out_e = y @ down_proj[e] + down_proj_bias[e]
    h += sum_j w_j out_{e_j}
  logits = (RMSNorm(h) * norm) @ lm_head^T

Switches for the tests that show a feature matters: sinks (False: plain softmax), window (False:
every layer full), truncate (None: as the config says).
Usage: numpy_gpt_oss.py HF_DIR --tokens 1,2,3 --out logits.npy
"""
import argparse
import json
import math
import os

import numpy as np

ALPHA = 1.702


class GptOss:
    def __init__(self, folder):
        from safetensors.numpy import load_file
        with open(os.path.join(folder, "config.json")) as f:
            self.cfg = json.load(f)
        self.w = {k: v.astype(np.float64) for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
        c = self.cfg
        self.L, self.H, self.HKV = c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"]
        self.Dh = c.get("head_dim") or c["hidden_size"] // self.H
        self.eps, self.limit, self.k = c["rms_norm_eps"], c["swiglu_limit"], c["num_experts_per_tok"]
        self.window_size = c["sliding_window"]
        self.sinks, self.window, self.truncate = True, True, None
        self.inv_freq = None  # an override of the YaRN inverse frequencies (validate_vs_transformers.py)

    def rope_tables(self, positions):
        rp = self.cfg["rope_parameters"]
        dim, base = self.Dh, rp["rope_theta"]
        pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
        inv_extra, inv_inter = 1.0 / pos_freqs, 1.0 / (rp["factor"] * pos_freqs)
        attn_factor = 1.0
        if rp.get("rope_type") == "yarn":
            factor, orig = rp["factor"], rp["original_max_position_embeddings"]
            attn_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0

            def corr_dim(rot):
                return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
            low, high = corr_dim(rp.get("beta_fast") or 32), corr_dim(rp.get("beta_slow") or 1)
            truncate = rp.get("truncate", True) if self.truncate is None else self.truncate
            if truncate:
                low, high = math.floor(low), math.ceil(high)
            low, high = max(low, 0), min(high, dim - 1)
            if low == high:
                high += 0.001
            ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
            extra = 1.0 - ramp
            inv = inv_inter * (1 - extra) + inv_extra * extra
        else:
            inv = inv_extra
        if self.inv_freq is not None:
            inv = self.inv_freq
        ang = np.asarray(positions, dtype=np.float64)[:, None] * inv[None, :]
        return np.cos(ang) * attn_factor, np.sin(ang) * attn_factor

    def rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    @staticmethod
    def rotate(x, cos, sin):  # x [T, H, Dh]; rotate_half (NeoX)
        half = x.shape[-1] // 2
        a, b = x[..., :half], x[..., half:]
        c, s = cos[:, None, :], sin[:, None, :]
        return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)

    def attention(self, i, x, cos, sin):
        p, T = f"model.layers.{i}.self_attn.", x.shape[0]
        w = self.w
        q = (x @ w[p + "q_proj.weight"].T + w[p + "q_proj.bias"]).reshape(T, self.H, self.Dh)
        k = (x @ w[p + "k_proj.weight"].T + w[p + "k_proj.bias"]).reshape(T, self.HKV, self.Dh)
        v = (x @ w[p + "v_proj.weight"].T + w[p + "v_proj.bias"]).reshape(T, self.HKV, self.Dh)
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        sliding = self.window and self.cfg["layer_types"][i] == "sliding_attention"
        pos = np.arange(T)
        visible = pos[None, :] <= pos[:, None]
        if sliding:
            visible &= pos[:, None] - pos[None, :] < self.window_size
        out = np.zeros((T, self.H, self.Dh))
        g = self.H // self.HKV
        for h in range(self.H):
            s = (q[:, h, :] @ k[:, h // g, :].T) / math.sqrt(self.Dh)
            s = np.where(visible, s, -np.inf)
            sink = w[p + "sinks"][h] if self.sinks else -np.inf
            m = np.maximum(s.max(axis=1), sink)
            e = np.exp(s - m[:, None])
            den = e.sum(axis=1) + np.exp(sink - m)
            out[:, h, :] = (e / den[:, None]) @ v[:, h // g, :]
        return out.reshape(T, -1) @ w[p + "o_proj.weight"].T + w[p + "o_proj.bias"]

    def moe(self, i, x):
        p = f"model.layers.{i}.mlp."
        w = self.w
        r = x @ w[p + "router.weight"].T + w[p + "router.bias"]
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            top = np.argsort(-r[t], kind="stable")[: self.k]
            z = r[t, top] - r[t, top].max()
            wts = np.exp(z) / np.exp(z).sum()
            for e, wt in zip(top, wts):
                gu = x[t] @ w[p + "experts.gate_up_proj"][e] + w[p + "experts.gate_up_proj_bias"][e]
                gate = np.minimum(gu[::2], self.limit)
                up = np.clip(gu[1::2], -self.limit, self.limit)
                y = (up + 1.0) * gate / (1.0 + np.exp(-ALPHA * gate))
                out[t] += wt * (y @ w[p + "experts.down_proj"][e] + w[p + "experts.down_proj_bias"][e])
        return out

    def forward(self, ids):
        w = self.w
        h = w["model.embed_tokens.weight"][np.asarray(ids)]
        cos, sin = self.rope_tables(np.arange(len(ids)))
        for i in range(self.L):
            p = f"model.layers.{i}."
            h = h + self.attention(i, self.rms(h, w[p + "input_layernorm.weight"]), cos, sin)
            h = h + self.moe(i, self.rms(h, w[p + "post_attention_layernorm.weight"]))
        return self.rms(h, w["model.norm.weight"]) @ w["lm_head.weight"].T


def load(folder):
    return GptOss(folder)


# The interface bench/peer/logits_vs_oracle.py calls: a GGUF made by make_gpt_oss.py stands for the
# checkpoint beside it (tiny-gpt-oss-hf in the same folder).
def Model(path):  # noqa: N802
    if path.endswith(".gguf"):
        path = os.path.join(os.path.dirname(os.path.abspath(path)), "tiny-gpt-oss-hf")
    return GptOss(path)


def forward(model, ids):
    return model.forward([int(t) for t in ids])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    np.save(a.out, load(a.model).forward([int(x) for x in a.tokens.split(",")]))


if __name__ == "__main__":
    main()
