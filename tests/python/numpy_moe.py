#!/usr/bin/env python3
"""An independent numpy forward pass of mixture-of-experts models, read straight from a GGUF file.

A test oracle like numpy_llama.py (whose attention, norms and RoPE it reuses): float64, weights
dequantised by the PyPI `gguf` package, written from the published model definitions, not from
Tessera's C++. The sparse feed-forward block of each architecture:

  mixtral  (GGUF arch `llama` with llama.expert_count): router logits = x @ W_r^T; probabilities =
           softmax over all experts; keep the top k; divide their probabilities by their sum;
           y = sum_j p_j * W2_j (silu(W1_j x) * W3_j x)          (Mistral AI's Mixtral, HF
           MixtralSparseMoeBlock). GGUF: W1 = ffn_gate, W3 = ffn_up, W2 = ffn_down.
  qwen2moe same softmax top-k but without renormalisation (norm_topk_prob = False), plus a shared
           expert every token uses: y += sigmoid(x . w_sg) * FFN_shared(x)   (HF
           Qwen2MoeSparseMoeBlock; w_sg = ffn_gate_inp_shexp).
  qwen3moe softmax top-k, renormalised (norm_topk_prob = True), no shared expert.
  olmoe    softmax top-k, not renormalised (OLMoE's norm_topk_prob = False).
{arch}.expert_weights_norm, when present, overrides the renormalisation default.

Expert weights are read in either GGUF layout: merged 3-D blk.N.ffn_gate_exps.weight [E, F, D]
or the older per-expert blk.N.ffn_gate.E.weight [F, D].

Usage:
  numpy_moe.py MODEL.gguf --tokens 1,2,3 --out logits.npy [--counts counts.npy]
Writes logits [n_tokens, n_vocab] (float64); --counts writes the tokens routed to each expert,
[n_layers, n_experts].
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_llama  # noqa: E402

RENORMALISE = {"llama": True, "qwen2moe": False, "qwen3moe": True, "olmoe": False}


class MoeModel(numpy_llama.Model):
    def __init__(self, path):
        super().__init__(path, moe=True)
        a = self.arch
        if a not in RENORMALISE:
            raise SystemExit(f"{path}: architecture '{a}' has no mixture of experts here")
        self.n_expert = int(self.meta(f"{a}.expert_count"))
        self.n_expert_used = int(self.meta(f"{a}.expert_used_count"))
        self.renormalise = bool(self.meta(f"{a}.expert_weights_norm", RENORMALISE[a]))
        if not 1 <= self.n_expert_used <= self.n_expert:
            raise SystemExit(f"{path}: expert_used_count {self.n_expert_used} not in [1, {self.n_expert}]")
        self.counts = np.zeros((self.n_layer, self.n_expert), dtype=np.int64)
        # Per layer, per token: how decisively the router chose, as the gap between the k-th and
        # (k+1)-th router logits over the rms of that token's router logits (inf when k = E).
        self.route_margins = []
        self._cache = {}

    def expert(self, layer, kind, e):
        """Expert |e|'s matrix |kind| (ffn_gate/ffn_up/ffn_down) of |layer|, [out, in]."""
        merged = f"blk.{layer}.{kind}_exps.weight"
        if self.has(merged):
            if merged not in self._cache:
                self._cache[merged] = self.weight(merged)
            return self._cache[merged][e]
        return self.weight(f"blk.{layer}.{kind}.{e}.weight")


def silu(x):
    return x / (1.0 + np.exp(-x))


def swiglu_ffn(gate_w, up_w, down_w, h):
    return (silu(h @ gate_w.T) * (h @ up_w.T)) @ down_w.T


def route(m, layer, h):
    """(expert ids [T, k], weights [T, k]) of the router's softmax top-k."""
    logits = h @ m.weight(f"blk.{layer}.ffn_gate_inp.weight").T  # [T, E]
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    ids = np.argsort(-probs, axis=-1, kind="stable")[:, : m.n_expert_used]
    k = m.n_expert_used
    if k < m.n_expert:
        ordered = -np.sort(-logits, axis=-1)
        m.route_margins.append((ordered[:, k - 1] - ordered[:, k]) / np.sqrt(np.mean(logits ** 2, axis=-1)))
    else:
        m.route_margins.append(np.full(len(h), np.inf))
    weights = np.take_along_axis(probs, ids, axis=-1)
    if m.renormalise:
        weights = weights / weights.sum(axis=-1, keepdims=True)
    return ids, weights


def moe_feed_forward(m, layer, h):
    p = f"blk.{layer}."
    ids, weights = route(m, layer, h)
    y = np.zeros_like(h)
    for e in range(m.n_expert):
        rows, slots = np.nonzero(ids == e)
        m.counts[layer, e] += len(rows)
        if len(rows) == 0:
            continue
        out = swiglu_ffn(m.expert(layer, "ffn_gate", e), m.expert(layer, "ffn_up", e),
                         m.expert(layer, "ffn_down", e), h[rows])
        y[rows] += weights[rows, slots][:, None] * out
    if m.has(p + "ffn_gate_inp_shexp.weight"):
        gate = h @ m.weight(p + "ffn_gate_inp_shexp.weight").reshape(-1)  # [T]
        shared = swiglu_ffn(m.weight(p + "ffn_gate_shexp.weight"), m.weight(p + "ffn_up_shexp.weight"),
                            m.weight(p + "ffn_down_shexp.weight"), h)
        y += (1.0 / (1.0 + np.exp(-gate)))[:, None] * shared
    return y


def forward(m, tokens):
    """Logits [len(tokens), n_vocab]; adds this prompt's routing to m.counts and sets
    m.route_margins ([n_layers] arrays of [len(tokens)])."""
    m.route_margins = []
    return numpy_llama.forward(m, tokens, ffn=moe_feed_forward)


def route_margin(m):
    """Per position, the smallest routing margin over all layers (after forward)."""
    return np.min(np.stack(m.route_margins), axis=0)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--out", required=True, help="where to write logits (.npy)")
    ap.add_argument("--counts", help="where to write the per-layer expert counts (.npy)")
    args = ap.parse_args(argv)
    m = MoeModel(args.model)
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    n_vocab = m.tensors["token_embd.weight"].shape[1]
    if not tokens or any(not 0 <= t < n_vocab for t in tokens):
        raise SystemExit(f"need token ids in 0..{n_vocab - 1}")
    np.save(args.out, forward(m, tokens))
    if args.counts:
        np.save(args.counts, m.counts)


if __name__ == "__main__":
    main(sys.argv[1:])
