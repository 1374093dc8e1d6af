#!/usr/bin/env python3
"""An independent numpy forward pass of the llama family, read straight from a GGUF file.

This is a test oracle: it shares no code with Tessera (tensors come from the PyPI `gguf`
package's reader and `gguf.quants.dequantize`), computes in float64, and is written for clarity
over speed. Supported: llama (and the same graph under qwen2 / qwen3 names):
  token embedding -> per layer [RMSNorm, Q/K/V projections (optional biases, qwen2), optional
  per-head QK RMSNorm (qwen3), RoPE, causal GQA attention, output projection, residual, RMSNorm,
  SwiGLU FFN, residual] -> RMSNorm -> output head (tied to token_embd when output.weight is absent).
RoPE layout: GGUF llama stores Q/K rows permuted for the "normal" layout, which rotates adjacent
pairs (2i, 2i+1); qwen2/qwen3 use the NeoX layout, which rotates (i, i + n_rot/2).

Usage:
  numpy_llama.py MODEL.gguf --tokens 504,3575,282,4649,314 --out logits.npy [--top 5]
Writes logits of every position, shape [n_tokens, n_vocab], float64.
"""
import argparse
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType
from gguf.quants import dequantize

NEOX_ARCHS = {"qwen2", "qwen3", "qwen2moe", "qwen3moe", "olmoe"}
SUPPORTED_ARCHS = {"llama", "qwen2", "qwen3"}
# The mixture-of-experts archs share this attention; their FFN is in numpy_moe.py.
MOE_ARCHS = {"qwen2moe", "qwen3moe", "olmoe"}


class Model:
    """Metadata and dequantised float64 weights of one GGUF file."""

    def __init__(self, path, moe=False):
        self.reader = GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}
        self.arch = self.meta("general.architecture")
        if self.arch not in SUPPORTED_ARCHS | (MOE_ARCHS if moe else set()):
            raise SystemExit(f"{path}: architecture '{self.arch}' is not supported")
        a = self.arch
        self.n_layer = int(self.meta(f"{a}.block_count"))
        self.n_embd = int(self.meta(f"{a}.embedding_length"))
        self.n_head = int(self.meta(f"{a}.attention.head_count"))
        self.n_head_kv = int(self.meta(f"{a}.attention.head_count_kv", self.n_head))
        self.head_dim = int(self.meta(f"{a}.attention.key_length", self.n_embd // self.n_head))
        self.n_rot = int(self.meta(f"{a}.rope.dimension_count", self.head_dim))
        self.eps = float(self.meta(f"{a}.attention.layer_norm_rms_epsilon"))
        self.freq_base = float(self.meta(f"{a}.rope.freq_base", 10000.0))
        self.rope_scale = 1.0
        scaling = self.meta(f"{a}.rope.scaling.type", "none")
        if scaling == "linear":
            self.rope_scale = float(self.meta(f"{a}.rope.scaling.factor", 1.0))
        elif scaling not in ("none", ""):
            raise SystemExit(f"{path}: rope scaling '{scaling}' is not supported")
        self.neox = a in NEOX_ARCHS
        if self.n_head % self.n_head_kv != 0:
            raise SystemExit(f"{path}: head_count {self.n_head} is not a multiple of "
                             f"head_count_kv {self.n_head_kv}")

    def meta(self, key, default=None):
        field = self.reader.get_field(key)
        if field is None:
            if default is None:
                raise SystemExit(f"missing metadata key {key}")
            return default
        if field.types[0] == GGUFValueType.STRING:
            return bytes(field.parts[field.data[0]]).decode("utf-8")
        if field.types[0] == GGUFValueType.ARRAY:
            return field.contents()
        return field.parts[field.data[0]][0]

    def has(self, name):
        return name in self.tensors

    def weight(self, name):
        """The tensor as float64, outermost dimension first (a projection is [out, in])."""
        t = self.tensors[name]
        shape = tuple(int(x) for x in reversed(t.shape))
        values = dequantize(np.asarray(t.data), t.tensor_type)
        return np.asarray(values, dtype=np.float64).reshape(shape)

    def vocab(self):
        field = self.reader.get_field("tokenizer.ggml.tokens")
        return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, positions, n_rot, base, neox, scale):
    """Rotates the first n_rot dims of every head. x: [T, heads, head_dim]."""
    half = n_rot // 2
    inv_freq = base ** (-np.arange(half, dtype=np.float64) * 2.0 / n_rot)
    angles = (positions[:, None] / scale) * inv_freq[None, :]  # [T, half]
    cos = np.cos(angles)[:, None, :]
    sin = np.sin(angles)[:, None, :]
    out = x.copy()
    if neox:
        a, b = x[..., :half], x[..., half:n_rot]
        out[..., :half] = a * cos - b * sin
        out[..., half:n_rot] = a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    return out


def linear(m, x, name):
    y = x @ m.weight(name + ".weight").T
    if m.has(name + ".bias"):
        y = y + m.weight(name + ".bias")
    return y


def attention(m, layer, h, positions):
    p = f"blk.{layer}."
    T = h.shape[0]
    q = linear(m, h, p + "attn_q").reshape(T, m.n_head, m.head_dim)
    k = linear(m, h, p + "attn_k").reshape(T, m.n_head_kv, m.head_dim)
    v = linear(m, h, p + "attn_v").reshape(T, m.n_head_kv, m.head_dim)
    if m.has(p + "attn_q_norm.weight"):
        qn, kn = m.weight(p + "attn_q_norm.weight"), m.weight(p + "attn_k_norm.weight")
        if qn.shape[0] == m.head_dim:  # qwen3: RMSNorm over each head before RoPE
            q, k = rms_norm(q, qn, m.eps), rms_norm(k, kn, m.eps)
        else:  # olmoe: RMSNorm over the whole q and k projections
            q = rms_norm(q.reshape(T, -1), qn, m.eps).reshape(q.shape)
            k = rms_norm(k.reshape(T, -1), kn, m.eps).reshape(k.shape)
    q = rope(q, positions, m.n_rot, m.freq_base, m.neox, m.rope_scale)
    k = rope(k, positions, m.n_rot, m.freq_base, m.neox, m.rope_scale)
    group = m.n_head // m.n_head_kv
    causal = np.triu(np.ones((T, T), dtype=bool), k=1)
    out = np.empty((T, m.n_head, m.head_dim))
    for head in range(m.n_head):
        kv = head // group
        scores = q[:, head, :] @ k[:, kv, :].T / np.sqrt(m.head_dim)  # [T, T]
        scores[causal] = -np.inf
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        out[:, head, :] = probs @ v[:, kv, :]
    return linear(m, out.reshape(T, m.n_head * m.head_dim), p + "attn_output")


def feed_forward(m, layer, h):
    p = f"blk.{layer}."
    gate = linear(m, h, p + "ffn_gate")
    up = linear(m, h, p + "ffn_up")
    silu = gate / (1.0 + np.exp(-gate))
    return linear(m, silu * up, p + "ffn_down")


def forward(m, tokens, ffn=feed_forward):
    """Logits [len(tokens), n_vocab] for a prompt starting at position 0. |ffn|(m, layer, h) is
    the feed-forward block (numpy_moe passes its mixture of experts)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    positions = np.arange(len(tokens), dtype=np.float64)
    x = m.weight("token_embd.weight")[tokens]
    for layer in range(m.n_layer):
        p = f"blk.{layer}."
        x = x + attention(m, layer, rms_norm(x, m.weight(p + "attn_norm.weight"), m.eps), positions)
        x = x + ffn(m, layer, rms_norm(x, m.weight(p + "ffn_norm.weight"), m.eps))
    x = rms_norm(x, m.weight("output_norm.weight"), m.eps)
    head = "output.weight" if m.has("output.weight") else "token_embd.weight"
    return x @ m.weight(head).T


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--out", required=True, help="where to write logits (.npy)")
    ap.add_argument("--top", type=int, default=0, help="print the top-k next tokens")
    args = ap.parse_args(argv)
    m = Model(args.model)
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    if not tokens:
        raise SystemExit("no tokens")
    n_vocab = m.tensors["token_embd.weight"].shape[1]
    bad = [t for t in tokens if not 0 <= t < n_vocab]
    if bad:
        raise SystemExit(f"token ids {bad} are outside the vocabulary (0..{n_vocab - 1})")
    logits = forward(m, tokens)
    np.save(args.out, logits)
    if args.top:
        vocab = m.vocab()
        last = logits[-1]
        for t in np.argsort(-last)[: args.top]:
            print(f"{int(t)}\t{last[t]:.4f}\t{vocab[t]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
