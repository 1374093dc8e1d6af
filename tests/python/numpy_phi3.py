#!/usr/bin/env python3
"""An independent float64 numpy forward pass of Phi-3 (HF `Phi3ForCausalLM`), read from a GGUF file.

A test oracle written from HF's modeling_phi3.py, sharing no code with Tessera (tensors come from
the PyPI `gguf` reader and `gguf.quants.dequantize`):
  h = embed_tokens[ids]
  per layer:  x = RMSNorm(h) * input_layernorm
              qkv = x @ qkv_proj^T;  q, k, v = qkv[:, :Q], qkv[:, Q:Q+KV], qkv[:, Q+KV:]
              q, k rotated by rotate_half RoPE: inv_freq = 1 / (ext_factors * base^(2i/d)),
                  cos/sin = cos/sin(pos * inv_freq) repeated twice, times the longrope scaling factor
              causal GQA attention, scale 1/sqrt(head_dim); with sliding_window W a query at p sees keys
                  (p - W, p]
              h += o_proj(attn)
              x = RMSNorm(h) * post_attention_layernorm
              gate, up = (x @ gate_up_proj^T).chunk(2);  h += down_proj(up * silu(gate))
  logits = (RMSNorm(h) * norm) @ lm_head^T
Longrope ("su"): ext_factors are long_factor when the model's context (phi3.context_length) exceeds
original_max_position_embeddings (phi3.rope.scaling.original_context_length), else short_factor;
the scaling factor is phi3.rope.scaling.attn_factor (HF: sqrt(1 + ln(scale) / ln(original))).
HF picks long/short per forward by the sequence length; GGUF engines pick once by the context they
run at, as this oracle does.

Usage: numpy_phi3.py MODEL.gguf --tokens 1,2,3 --out logits.npy   ([n_tokens, n_vocab] float64)
"""
import argparse

import numpy as np
from gguf import GGUFReader, GGUFValueType
from gguf.quants import dequantize


class Phi3:
    def __init__(self, path):
        self.reader = GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}
        if self.meta("general.architecture") != "phi3":
            raise SystemExit(f"{path}: not a phi3 GGUF")
        p = "phi3."
        self.n_layer = int(self.meta(p + "block_count"))
        self.d = int(self.meta(p + "embedding_length"))
        self.n_head = int(self.meta(p + "attention.head_count"))
        self.n_kv = int(self.meta(p + "attention.head_count_kv", self.n_head))
        self.dh = self.d // self.n_head
        self.n_rot = int(self.meta(p + "rope.dimension_count", self.dh))
        self.eps = float(self.meta(p + "attention.layer_norm_rms_epsilon"))
        self.base = float(self.meta(p + "rope.freq_base", 10000.0))
        self.window = int(self.meta(p + "attention.sliding_window", 0))
        ctx = int(self.meta(p + "context_length"))
        orig = int(self.meta(p + "rope.scaling.original_context_length", ctx))
        self.mscale = float(self.meta(p + "rope.scaling.attn_factor", 1.0))
        name = "rope_factors_long.weight" if ctx > orig else "rope_factors_short.weight"
        self.ext = self.weight(name) if name in self.tensors else np.ones(self.n_rot // 2)

    def meta(self, key, default=None):
        f = self.reader.get_field(key)
        if f is None:
            if default is None:
                raise SystemExit(f"missing key {key}")
            return default
        if f.types[0] == GGUFValueType.STRING:
            return bytes(f.parts[f.data[0]]).decode()
        return f.parts[f.data[0]][0]

    def weight(self, name):
        t = self.tensors[name]
        shape = tuple(int(x) for x in reversed(t.shape))
        return np.asarray(dequantize(np.asarray(t.data), t.tensor_type), dtype=np.float64).reshape(shape)


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def apply_rope(m, x, pos):
    """x: [T, heads, dh]; HF's apply_rotary_pos_emb over the first n_rot dims."""
    inv_freq = 1.0 / (m.ext * m.base ** (np.arange(0, m.n_rot, 2, dtype=np.float64) / m.n_rot))
    freqs = pos[:, None].astype(np.float64) * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = (np.cos(emb) * m.mscale)[:, None, :], (np.sin(emb) * m.mscale)[:, None, :]
    r = x[..., :m.n_rot]
    return np.concatenate([r * cos + rotate_half(r) * sin, x[..., m.n_rot:]], axis=-1)


def forward(m, ids):
    T = len(ids)
    pos = np.arange(T)
    Q, KV = m.n_head * m.dh, m.n_kv * m.dh
    h = m.weight("token_embd.weight")[ids]
    qi, ki = pos[:, None], pos[None, :]
    allowed = ki <= qi
    if m.window > 0:
        allowed &= ki > qi - m.window
    for l in range(m.n_layer):
        p = f"blk.{l}."
        x = rms_norm(h, m.weight(p + "attn_norm.weight"), m.eps)
        qkv = x @ m.weight(p + "attn_qkv.weight").T
        q = apply_rope(m, qkv[:, :Q].reshape(T, m.n_head, m.dh), pos)
        k = apply_rope(m, qkv[:, Q:Q + KV].reshape(T, m.n_kv, m.dh), pos)
        v = qkv[:, Q + KV:].reshape(T, m.n_kv, m.dh)
        rep = m.n_head // m.n_kv
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(m.dh)
        s = np.where(allowed[None], s, -np.inf)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        a = np.einsum("hqk,khd->qhd", s, v).reshape(T, Q)
        h = h + a @ m.weight(p + "attn_output.weight").T
        x = rms_norm(h, m.weight(p + "ffn_norm.weight"), m.eps)
        gu = x @ m.weight(p + "ffn_up.weight").T
        gate, up = np.split(gu, 2, axis=-1)
        h = h + (up * gate / (1.0 + np.exp(-gate))) @ m.weight(p + "ffn_down.weight").T
    h = rms_norm(h, m.weight("output_norm.weight"), m.eps)
    head = m.weight("output.weight") if "output.weight" in m.tensors else m.weight("token_embd.weight")
    return h @ head.T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    np.save(a.out, forward(Phi3(a.model), [int(x) for x in a.tokens.split(",")]))


if __name__ == "__main__":
    main()
