#!/usr/bin/env python3
"""An independent numpy forward pass of Gemma 3 (text), read straight from a GGUF file.

A test oracle written from the model's definition (Hugging Face transformers'
`models/gemma3/modeling_gemma3.py`, and the Gemma 3 technical report), sharing no code with
Tessera or with numpy_llama.py. Tensors come from the PyPI `gguf` package's reader and
`gguf.quants.dequantize`; arithmetic is float64. Per the definition:

  x = embed(tokens) * sqrt(hidden_size)
  per layer:  x = x + post_attention_norm(attn(input_norm(x)))
              x = x + post_feedforward_norm(mlp(pre_feedforward_norm(x)))
  logits = final_norm(x) @ embed^T            (tied head; optional final logit softcap)

  Gemma3RMSNorm(x) = x / sqrt(mean(x^2) + eps) * (1 + weight)
  attn: q, k, v projections -> per-head RMSNorm of q and k (q_norm, k_norm) -> RoPE with
        rotate_half (NeoX pairs (i, i + d/2)) -> causal GQA softmax(q k^T * scaling) v,
        scaling = query_pre_attn_scalar^-0.5 (= head_dim^-0.5 for the released sizes but 27B);
        "sliding_attention" layers see only the last `sliding_window` keys (q - k < window)
        and use rope_local_base_freq (10000); "full_attention" layers (every 6th: layer i with
        (i + 1) % 6 == 0) use rope_theta.
  mlp:  down(gelu_tanh(gate(x)) * up(x))

GGUF conventions checked separately, not assumed (see NORM_SHIFT below): llama.cpp's converter
stores Gemma norm weights as (1 + weight), so the GGUF value is the multiplier itself.

Usage:
  numpy_gemma3.py MODEL.gguf --tokens 2,651,6037 --out logits.npy [--top 5] [--norm-shift 0|1]
Writes logits of every position, shape [n_tokens, n_vocab], float64.
"""
import argparse
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType
from gguf.quants import dequantize

# What to add to a GGUF norm weight to get Gemma's multiplier (1 + w). llama.cpp's
# convert_hf_to_gguf.py adds 1 when it writes gemma3 norms, so 0 here. check_gemma3.py verifies
# this from the numbers: with 0 the model predicts text (perplexity ~10s); adding 1 again does not.
NORM_SHIFT = 0.0
ROPE_LOCAL_BASE = 10000.0   # Gemma3TextConfig.rope_local_base_freq
SLIDING_PATTERN = 6         # every 6th layer is global (Gemma3TextConfig.sliding_window_pattern)


class Model:
    """Metadata and dequantised weights of one Gemma 3 GGUF file."""

    def __init__(self, path, norm_shift=NORM_SHIFT):
        self.reader = GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}
        a = self.meta("general.architecture")
        if a != "gemma3":
            raise SystemExit(f"{path}: architecture '{a}' is not gemma3")
        self.n_layer = int(self.meta("gemma3.block_count"))
        self.hidden = int(self.meta("gemma3.embedding_length"))
        self.n_head = int(self.meta("gemma3.attention.head_count"))
        self.n_kv = int(self.meta("gemma3.attention.head_count_kv"))
        self.head_dim = int(self.meta("gemma3.attention.key_length"))
        self.eps = float(self.meta("gemma3.attention.layer_norm_rms_epsilon"))
        self.rope_theta = float(self.meta("gemma3.rope.freq_base"))
        self.window = int(self.meta("gemma3.attention.sliding_window"))
        self.softcap = float(self.meta("gemma3.final_logit_softcapping", 0.0))
        self.scaling = self.head_dim ** -0.5
        self.norm_shift = norm_shift
        self._cache = {}

    def meta(self, key, default=None):
        field = self.reader.get_field(key)
        if field is None:
            if default is None:
                raise SystemExit(f"missing metadata key {key}")
            return default
        if field.types[0] == GGUFValueType.STRING:
            return bytes(field.parts[field.data[0]]).decode("utf-8")
        return field.parts[field.data[0]][0]

    def weight(self, name, dtype=np.float64):
        """The tensor, outermost dimension first (a projection is [out, in])."""
        key = (name, dtype)
        if key not in self._cache:
            t = self.tensors[name]
            shape = tuple(int(x) for x in reversed(t.shape))
            self._cache[key] = np.asarray(dequantize(np.asarray(t.data), t.tensor_type), dtype=dtype).reshape(shape)
        return self._cache[key]

    def norm(self, name):
        return self.weight(name) + self.norm_shift

    def vocab(self):
        field = self.reader.get_field("tokenizer.ggml.tokens")
        return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]


def rms_norm(x, mult, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * mult


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope(x, positions, base):
    """x [T, heads, head_dim]; HF's cos/sin duplicated over both halves."""
    d = x.shape[-1]
    inv_freq = 1.0 / base ** (np.arange(0, d, 2, dtype=np.float64) / d)
    freqs = positions[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]
    return x * cos + rotate_half(x) * sin


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def is_sliding(layer):
    return (layer + 1) % SLIDING_PATTERN != 0


def attention(m, layer, h, positions):
    p = f"blk.{layer}."
    T = h.shape[0]
    q = (h @ m.weight(p + "attn_q.weight").T).reshape(T, m.n_head, m.head_dim)
    k = (h @ m.weight(p + "attn_k.weight").T).reshape(T, m.n_kv, m.head_dim)
    v = (h @ m.weight(p + "attn_v.weight").T).reshape(T, m.n_kv, m.head_dim)
    q = rms_norm(q, m.norm(p + "attn_q_norm.weight"), m.eps)
    k = rms_norm(k, m.norm(p + "attn_k_norm.weight"), m.eps)
    sliding = is_sliding(layer)
    base = ROPE_LOCAL_BASE if sliding else m.rope_theta
    q, k = apply_rope(q, positions, base), apply_rope(k, positions, base)
    qi, ki = np.arange(T)[:, None], np.arange(T)[None, :]
    masked = ki > qi
    if sliding:
        masked |= (qi - ki) >= m.window
    group = m.n_head // m.n_kv
    out = np.empty((T, m.n_head, m.head_dim))
    for head in range(m.n_head):
        kv = head // group
        s = q[:, head, :] @ k[:, kv, :].T * m.scaling
        s[masked] = -np.inf
        s -= s.max(axis=-1, keepdims=True)
        pr = np.exp(s)
        pr /= pr.sum(axis=-1, keepdims=True)
        out[:, head, :] = pr @ v[:, kv, :]
    return out.reshape(T, -1) @ m.weight(p + "attn_output.weight").T


def mlp(m, layer, h):
    p = f"blk.{layer}."
    gate = h @ m.weight(p + "ffn_gate.weight").T
    up = h @ m.weight(p + "ffn_up.weight").T
    return (gelu_tanh(gate) * up) @ m.weight(p + "ffn_down.weight").T


def forward(m, tokens, rows=0):
    """Logits [len(tokens), n_vocab] for a prompt starting at position 0; with |rows| > 0 only
    the last |rows| positions' (a long prompt's head would be [T, 262144] float64)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    positions = np.arange(len(tokens), dtype=np.float64)
    # The embedding is Q8_0 (f16 scale x int8): exact in float32, which halves its 670 MB.
    embd = m.weight("token_embd.weight", np.float32)
    x = embd[tokens].astype(np.float64) * np.sqrt(float(m.hidden))
    for layer in range(m.n_layer):
        p = f"blk.{layer}."
        a = attention(m, layer, rms_norm(x, m.norm(p + "attn_norm.weight"), m.eps), positions)
        x = x + rms_norm(a, m.norm(p + "post_attention_norm.weight"), m.eps)
        f = mlp(m, layer, rms_norm(x, m.norm(p + "ffn_norm.weight"), m.eps))
        x = x + rms_norm(f, m.norm(p + "post_ffw_norm.weight"), m.eps)
    if rows > 0:
        x = x[-rows:]
    x = rms_norm(x, m.norm("output_norm.weight"), m.eps)
    head = m.weight("output.weight", np.float32) if "output.weight" in m.tensors else embd
    logits = np.empty((x.shape[0], head.shape[0]))
    for i in range(0, head.shape[0], 32768):  # float64 products without a 1.3 GB temporary
        logits[:, i:i + 32768] = x @ head[i:i + 32768].astype(np.float64).T
    if m.softcap > 0:
        logits = m.softcap * np.tanh(logits / m.softcap)
    return logits


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--out", required=True, help="where to write logits (.npy)")
    ap.add_argument("--top", type=int, default=0, help="print the top-k next tokens")
    ap.add_argument("--norm-shift", type=float, default=NORM_SHIFT)
    args = ap.parse_args(argv)
    m = Model(args.model, args.norm_shift)
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    logits = forward(m, tokens)
    np.save(args.out, logits)
    if args.top:
        vocab = m.vocab()
        for t in np.argsort(-logits[-1])[: args.top]:
            print(f"{int(t)}\t{logits[-1][t]:.4f}\t{vocab[t]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
