#!/usr/bin/env python3
"""An independent numpy forward pass of a BERT sentence encoder (sentence-transformers layout),
read straight from a checkpoint directory's model.safetensors.

A test oracle written from the model's definition (Hugging Face transformers'
`models/bert/modeling_bert.py` and sentence-transformers' Pooling and Normalize modules),
sharing no code with Tessera. Tokens come from the HF `tokenizers` library reading the
checkpoint's own tokenizer.json. Arithmetic is float64. Per the definition:

  x = LayerNorm(word_emb[ids] + pos_emb[0..T-1] + type_emb[0])          (BertEmbeddings)
  per layer (post-norm):
    a = softmax(q k^T / sqrt(d_head)) v per head, no mask within one sentence (BertSelfAttention)
    x = LayerNorm(x + a W_o^T + b_o)                                     (BertSelfOutput)
    x = LayerNorm(x + gelu(x W_i^T + b_i) W_o2^T + b_o2)                 (BertIntermediate, BertOutput)
  gelu(x) = x * 0.5 * (1 + erf(x / sqrt 2))   (hidden_act "gelu": the exact form)
  LayerNorm(x) = (x - mean) / sqrt(var + eps) * gamma + beta, var the biased variance
  embedding = mean over the sentence's tokens ([CLS] and [SEP] included: the attention mask is
              all ones for one unpadded sentence), or the [CLS] row; then x / max(|x|, 1e-12)

Usage:
  numpy_bert.py MODEL_DIR "text" ... [--out vectors.npy]
"""
import argparse
import json
import math
import os

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer


class Encoder:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = json.load(f)
        assert self.cfg["model_type"] == "bert", self.cfg["model_type"]
        assert self.cfg.get("hidden_act", "gelu") == "gelu"
        raw = load_file(os.path.join(model_dir, "model.safetensors"))
        root = "bert." if "bert.embeddings.word_embeddings.weight" in raw else ""
        self.w = {k[len(root):]: v.astype(np.float64) for k, v in raw.items() if k.startswith(root) and v.dtype != np.int64}
        self.tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tok.no_padding()
        self.tok.no_truncation()
        self.pooling = "mean"
        pool_cfg = os.path.join(model_dir, "1_Pooling", "config.json")
        if os.path.exists(pool_cfg):
            with open(pool_cfg) as f:
                if json.load(f).get("pooling_mode_cls_token"):
                    self.pooling = "cls"

    def ids(self, text):
        return self.tok.encode(text).ids

    def layer_norm(self, x, prefix):
        eps = self.cfg.get("layer_norm_eps", 1e-12)
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(var + eps) * self.w[prefix + ".weight"] + self.w[prefix + ".bias"]

    def dense(self, x, prefix):
        return x @ self.w[prefix + ".weight"].T + self.w[prefix + ".bias"]

    def hidden(self, ids):
        T = len(ids)
        w = self.w
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:T] \
            + w["embeddings.token_type_embeddings.weight"][0]
        x = self.layer_norm(x, "embeddings.LayerNorm")
        H = self.cfg["num_attention_heads"]
        Dh = self.cfg["hidden_size"] // H
        erf = np.vectorize(math.erf)
        for l in range(self.cfg["num_hidden_layers"]):
            p = f"encoder.layer.{l}."
            q = self.dense(x, p + "attention.self.query").reshape(T, H, Dh).transpose(1, 0, 2)
            k = self.dense(x, p + "attention.self.key").reshape(T, H, Dh).transpose(1, 0, 2)
            v = self.dense(x, p + "attention.self.value").reshape(T, H, Dh).transpose(1, 0, 2)
            s = q @ k.transpose(0, 2, 1) / math.sqrt(Dh)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            a = (s @ v).transpose(1, 0, 2).reshape(T, H * Dh)
            x = self.layer_norm(x + self.dense(a, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            h = self.dense(x, p + "intermediate.dense")
            h = h * 0.5 * (1.0 + erf(h / math.sqrt(2.0)))
            x = self.layer_norm(x + self.dense(h, p + "output.dense"), p + "output.LayerNorm")
        return x

    def embed(self, text):
        x = self.hidden(self.ids(text))
        e = x[0] if self.pooling == "cls" else x.mean(axis=0)
        return e / max(np.linalg.norm(e), 1e-12)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("texts", nargs="+")
    ap.add_argument("--out")
    a = ap.parse_args()
    enc = Encoder(a.model_dir)
    vecs = np.stack([enc.embed(t) for t in a.texts])
    if a.out:
        np.save(a.out, vecs)
    for t, v in zip(a.texts, vecs):
        print(f"{t[:40]!r}: {np.array2string(v[:6], precision=5)}")


if __name__ == "__main__":
    main()
