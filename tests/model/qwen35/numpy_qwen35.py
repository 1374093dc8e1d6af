#!/usr/bin/env python3
"""An independent float64 numpy forward pass of Qwen3.5's text model (HF `qwen3_5` / `qwen3_5_text`,
GGUF `qwen35`), written from HF's modeling_qwen3_5.py, sharing no code with Tessera or llama.cpp.

  h = embed_tokens[ids]
  per layer:  x = RMSNorm(h) * (1 + input_layernorm)                       (zero-centred weights)
    linear_attention (Gated DeltaNet), per token t:
      qkv = x @ in_proj_qkv^T                          [2 * nk*dk + nv*dv]
      qkv = silu(causal depthwise conv1d over the last K inputs of each channel), the previous
            K - 1 inputs of a sequence kept as the conv state (zeros at the start)
      q, k, v = split(qkv) -> [nk, dk], [nk, dk], [nv, dv];  value head h reads key head h // (nv/nk)
      q, k = l2norm(q), l2norm(k) (x / sqrt(sum x^2 + 1e-6));  q *= dk^-0.5
      beta = sigmoid(x @ in_proj_b^T);  g = -exp(A_log) * softplus(x @ in_proj_a^T + dt_bias)   [nv]
      S = S * exp(g);  delta = beta * (v - S^T k);  S = S + k delta^T;  o = S^T q   (S: [nv, dk, dv])
      o = RMSNorm(o over dv) * norm.weight * silu(x @ in_proj_z^T)   (this norm's weight is plain)
      h += o.flatten() @ out_proj^T
    full_attention:
      qg = (x @ q_proj^T).view(H, 2 * Dh): q = qg[:, :Dh], gate = qg[:, Dh:]
      q = RMSNorm(q) * (1 + q_norm);  k = RMSNorm(x @ k_proj^T per head) * (1 + k_norm);  v = x @ v_proj^T
      q, k: rotate_half RoPE on the first Dh * partial_rotary_factor dims; the frequency pair i takes
            its position from axis T, H or W by the interleaved mrope_section layout (i % 3 == 1 and
            i < 3 * sec[1]: H; i % 3 == 2 and i < 3 * sec[2]: W; else T); text tokens have T = H = W
      causal GQA softmax attention, scale Dh^-0.5;  h += (attn * sigmoid(gate)) @ o_proj^T
    x = RMSNorm(h) * (1 + post_attention_layernorm);  h += down(silu(gate(x)) * up(x))
      (qwen3_5_moe: p = softmax(x @ gate^T); the top num_experts_per_tok experts by p, their p
       divided by their sum; h += sum_e p_e down_e(silu(gate_e(x)) * up_e(x)), gate_e and up_e the
       halves of gate_up_proj[e]; plus sigmoid(x @ shared_expert_gate^T) * shared_expert(x))
  logits = (RMSNorm(h) * (1 + norm)) @ lm_head^T   (lm_head = embed_tokens when tied)

Reads a Hugging Face folder (config.json with text_config, model.safetensors) or a GGUF written as
llama.cpp's converter writes Qwen3.5 (the converter's transforms undone: value heads back from tiled
to grouped order, ssm_a -> A_log = log(-ssm_a), the + 1 taken off the norms).
The state (conv window, delta-rule matrix, K/V) is carried across calls, so a prompt can be run
at once or as a prefill and then token by token; both give the same logits (--prefill N checks).

Usage: numpy_qwen35.py MODEL (HF_DIR or .gguf) --tokens 1,2,3 --out logits.npy
           [--prefill N]   also run N tokens, then the rest one at a time, and compare
           [--hidden-out F.npz]   per-layer outputs (the residual stream after each layer)
"""
import argparse
import json
import math
import os
import sys

import numpy as np

L2_EPS = 1e-6  # HF's l2norm (and llama.cpp uses rms_norm_eps, the same 1e-6 in every real config)


def rms_norm(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def l2norm(x):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + L2_EPS)


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.logaddexp(0.0, x)


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


class Config:
    def __init__(self, tc):
        self.L = tc["num_hidden_layers"]
        self.D = tc["hidden_size"]
        self.H = tc["num_attention_heads"]
        self.HKV = tc["num_key_value_heads"]
        self.Dh = tc.get("head_dim") or self.D // self.H
        self.eps = tc["rms_norm_eps"]
        rp = tc.get("rope_parameters") or {}
        self.theta = float(rp.get("rope_theta", tc.get("rope_theta", 10000.0)))
        factor = rp.get("partial_rotary_factor", tc.get("partial_rotary_factor", 0.25))
        self.n_rot = int(self.Dh * factor)
        self.mrope = list(rp.get("mrope_section", [11, 11, 10]))
        self.nk = tc["linear_num_key_heads"]
        self.nv = tc["linear_num_value_heads"]
        self.dk = tc["linear_key_head_dim"]
        self.dv = tc["linear_value_head_dim"]
        self.K = tc["linear_conv_kernel_dim"]
        lt = tc.get("layer_types")
        if lt is None:
            n = tc.get("full_attention_interval", 4)
            lt = ["linear_attention" if (i + 1) % n else "full_attention" for i in range(self.L)]
        self.layer_types = list(lt)
        self.tied = bool(tc.get("tie_word_embeddings", False))
        self.E = int(tc.get("num_experts", 0) or 0)
        self.E_used = int(tc.get("num_experts_per_tok", 0) or 0)
        self.Fe = int(tc.get("moe_intermediate_size", 0) or 0)


class Qwen35:
    """Weights in HF's naming (text model, "model.language_model." dropped), float64."""

    def __init__(self, cfg, w):
        self.c, self.w = cfg, w
        self.renormalize = True  # the top-k router weights divided by their sum (Qwen3.5-MoE always does)
        self.lm_head = w["lm_head.weight"] if "lm_head.weight" in w else w["embed_tokens.weight"]

    # ---- loading -----------------------------------------------------------------------------
    @classmethod
    def from_hf(cls, path):
        from safetensors.numpy import load_file
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
        tc = cfg.get("text_config", cfg)
        if tc is not cfg and "tie_word_embeddings" in cfg:  # the multimodal model's own flag governs
            tc = dict(tc, tie_word_embeddings=cfg["tie_word_embeddings"])
        files = sorted(fn for fn in os.listdir(path) if fn.endswith(".safetensors"))
        w = {}
        for fn in files:
            for name, a in load_file(os.path.join(path, fn)).items():
                if name.startswith("model.language_model."):
                    w[name[len("model.language_model."):]] = a.astype(np.float64)
                elif name.startswith("model.") and not name.startswith("model.visual."):
                    w[name[len("model."):]] = a.astype(np.float64)  # a text-only Qwen3_5ForCausalLM
                elif name == "lm_head.weight":
                    w[name] = a.astype(np.float64)
        c = Config(tc)
        if c.tied:
            w.pop("lm_head.weight", None)
        return cls(c, w)

    @classmethod
    def from_gguf(cls, path):
        from gguf import GGUFReader, GGUFValueType
        from gguf.quants import dequantize
        r = GGUFReader(path)

        def meta(key, default=None):
            f = r.get_field(key)
            if f is None:
                if default is None:
                    raise SystemExit(f"{path}: missing {key}")
                return default
            if f.types[0] == GGUFValueType.ARRAY:
                return [f.parts[i][0] for i in f.data]
            if f.types[0] == GGUFValueType.STRING:
                return bytes(f.parts[f.data[0]]).decode()
            return f.parts[f.data[0]][0]

        arch = meta("general.architecture")
        if arch not in ("qwen35", "qwen35moe"):
            raise SystemExit(f"{path}: not a qwen35 or qwen35moe GGUF")
        a = arch + "."
        n_blocks = int(meta(a + "block_count"))
        n_layer = n_blocks - int(meta(a + "nextn_predict_layers", 0))
        d_inner, nv = int(meta(a + "ssm.inner_size")), int(meta(a + "ssm.time_step_rank"))
        n_rot, Dh = int(meta(a + "rope.dimension_count")), int(meta(a + "attention.key_length"))
        recurrent = meta(a + "attention.recurrent_layers", [])
        if recurrent:
            types = ["linear_attention" if recurrent[i] else "full_attention" for i in range(n_layer)]
        else:
            n = int(meta(a + "full_attention_interval", 4))
            types = ["linear_attention" if (i + 1) % n else "full_attention" for i in range(n_layer)]
        tensors = {t.name: t for t in r.tensors}
        tc = {"num_hidden_layers": n_layer, "hidden_size": int(meta(a + "embedding_length")),
              "num_attention_heads": int(meta(a + "attention.head_count")),
              "num_key_value_heads": int(meta(a + "attention.head_count_kv")), "head_dim": Dh,
              "rms_norm_eps": float(meta(a + "attention.layer_norm_rms_epsilon")),
              "rope_parameters": {"rope_theta": float(meta(a + "rope.freq_base")),
                                  "partial_rotary_factor": n_rot / Dh,
                                  "mrope_section": [int(x) for x in meta(a + "rope.dimension_sections")][:3]},
              "linear_num_key_heads": int(meta(a + "ssm.group_count")), "linear_num_value_heads": nv,
              "linear_key_head_dim": int(meta(a + "ssm.state_size")), "linear_value_head_dim": d_inner // nv,
              "linear_conv_kernel_dim": int(meta(a + "ssm.conv_kernel")), "layer_types": types,
              "tie_word_embeddings": "output.weight" not in tensors}
        if arch == "qwen35moe":
            tc.update({"num_experts": int(meta(a + "expert_count")), "num_experts_per_tok": int(meta(a + "expert_used_count")),
                       "moe_intermediate_size": int(meta(a + "expert_feed_forward_length"))})
        c = Config(tc)

        def get(name):
            t = tensors[name]
            shape = tuple(int(x) for x in reversed(t.shape))
            return np.asarray(dequantize(np.asarray(t.data), t.tensor_type), dtype=np.float64).reshape(shape)

        r_ = c.nv // c.nk

        def ungroup(x, axis, hd):  # tiled (j * nk + g) -> grouped (g * r + j): the converter's reorder undone
            if r_ == 1:
                return x
            x = np.moveaxis(x, axis, 0)
            shape = x.shape
            x = x.reshape((r_, c.nk, hd) + shape[1:]).swapaxes(0, 1).reshape(shape)
            return np.moveaxis(x, 0, axis)

        w = {"embed_tokens.weight": get("token_embd.weight"), "norm.weight": get("output_norm.weight") - 1.0}
        if "output.weight" in tensors:
            w["lm_head.weight"] = get("output.weight")
        kd = c.nk * c.dk
        for i in range(c.L):
            b, p = f"blk.{i}.", f"layers.{i}."
            w[p + "input_layernorm.weight"] = get(b + "attn_norm.weight") - 1.0
            w[p + "post_attention_layernorm.weight"] = get(b + "post_attention_norm.weight") - 1.0
            if c.E:
                w[p + "mlp.gate.weight"] = get(b + "ffn_gate_inp.weight")
                w[p + "mlp.experts.gate_up_proj"] = np.concatenate(
                    [get(b + "ffn_gate_exps.weight"), get(b + "ffn_up_exps.weight")], axis=1)
                w[p + "mlp.experts.down_proj"] = get(b + "ffn_down_exps.weight")
                w[p + "mlp.shared_expert_gate.weight"] = get(b + "ffn_gate_inp_shexp.weight").reshape(1, -1)
                for n in ("gate", "up", "down"):
                    w[p + f"mlp.shared_expert.{n}_proj.weight"] = get(b + f"ffn_{n}_shexp.weight")
            else:
                w[p + "mlp.gate_proj.weight"] = get(b + "ffn_gate.weight")
                w[p + "mlp.up_proj.weight"] = get(b + "ffn_up.weight")
                w[p + "mlp.down_proj.weight"] = get(b + "ffn_down.weight")
            if c.layer_types[i] == "full_attention":
                for ours, theirs in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                                     ("o_proj", "attn_output")):
                    w[p + f"self_attn.{ours}.weight"] = get(b + theirs + ".weight")
                w[p + "self_attn.q_norm.weight"] = get(b + "attn_q_norm.weight") - 1.0
                w[p + "self_attn.k_norm.weight"] = get(b + "attn_k_norm.weight") - 1.0
                continue
            la = p + "linear_attn."
            qkv = get(b + "attn_qkv.weight")
            w[la + "in_proj_qkv.weight"] = np.concatenate([qkv[:2 * kd], ungroup(qkv[2 * kd:], 0, c.dv)], 0)
            w[la + "in_proj_z.weight"] = ungroup(get(b + "attn_gate.weight"), 0, c.dv)
            w[la + "in_proj_b.weight"] = ungroup(get(b + "ssm_beta.weight"), 0, 1)
            w[la + "in_proj_a.weight"] = ungroup(get(b + "ssm_alpha.weight"), 0, 1)
            conv = get(b + "ssm_conv1d.weight")
            w[la + "conv1d.weight"] = np.concatenate([conv[:2 * kd], ungroup(conv[2 * kd:], 0, c.dv)], 0)[:, None, :]
            w[la + "dt_bias"] = ungroup(get(b + "ssm_dt.bias"), 0, 1)
            w[la + "A_log"] = np.log(-ungroup(get(b + "ssm_a"), 0, 1))
            w[la + "norm.weight"] = get(b + "ssm_norm.weight")
            w[la + "out_proj.weight"] = ungroup(get(b + "ssm_out.weight"), 1, c.dv)
        return cls(c, w)

    # ---- state ---------------------------------------------------------------------------------
    def new_state(self):
        c = self.c
        conv_dim = 2 * c.nk * c.dk + c.nv * c.dv
        layers = []
        for lt in c.layer_types:
            if lt == "linear_attention":
                layers.append({"conv": np.zeros((c.K - 1, conv_dim)), "S": np.zeros((c.nv, c.dk, c.dv))})
            else:
                layers.append({"k": np.zeros((0, c.HKV, c.Dh)), "v": np.zeros((0, c.HKV, c.Dh))})
        return {"pos": 0, "layers": layers}

    # ---- blocks ------------------------------------------------------------------------------
    def rope_cos_sin(self, pos3):
        """pos3: [3, T] (T, H, W positions) -> cos, sin [T, n_rot]."""
        c = self.c
        half = c.n_rot // 2
        inv_freq = 1.0 / (c.theta ** (np.arange(0, c.n_rot, 2, dtype=np.float64) / c.n_rot))
        axis = np.zeros(half, dtype=int)
        axis[1:3 * c.mrope[1]:3] = 1
        axis[2:3 * c.mrope[2]:3] = 2
        freqs = pos3[axis, :].T.astype(np.float64) * inv_freq[None, :]  # [T, half]
        emb = np.concatenate([freqs, freqs], axis=-1)
        return np.cos(emb), np.sin(emb)

    def full_attention(self, i, x, st, cos, sin):
        c, w, p = self.c, self.w, f"layers.{i}.self_attn."
        T = x.shape[0]
        qg = (x @ w[p + "q_proj.weight"].T).reshape(T, c.H, 2 * c.Dh)
        q, gate = qg[..., :c.Dh], qg[..., c.Dh:].reshape(T, c.H * c.Dh)
        q = rms_norm(q, c.eps) * (1.0 + w[p + "q_norm.weight"])
        k = rms_norm((x @ w[p + "k_proj.weight"].T).reshape(T, c.HKV, c.Dh), c.eps) * (1.0 + w[p + "k_norm.weight"])
        v = (x @ w[p + "v_proj.weight"].T).reshape(T, c.HKV, c.Dh)
        r = c.n_rot
        cs, sn = cos[:, None, :], sin[:, None, :]
        q = np.concatenate([q[..., :r] * cs + rotate_half(q[..., :r]) * sn, q[..., r:]], axis=-1)
        k = np.concatenate([k[..., :r] * cs + rotate_half(k[..., :r]) * sn, k[..., r:]], axis=-1)
        st["k"] = np.concatenate([st["k"], k], 0)
        st["v"] = np.concatenate([st["v"], v], 0)
        K_, V_ = st["k"], st["v"]
        n_past = K_.shape[0] - T
        group = c.H // c.HKV
        out = np.empty((T, c.H, c.Dh))
        scale = c.Dh ** -0.5
        for h in range(c.H):
            kh, vh = K_[:, h // group], V_[:, h // group]
            s = (q[:, h] @ kh.T) * scale  # [T, n_past + T]
            mask = np.arange(K_.shape[0])[None, :] > (n_past + np.arange(T))[:, None]
            s = np.where(mask, -np.inf, s)
            s = np.exp(s - s.max(-1, keepdims=True))
            out[:, h] = (s / s.sum(-1, keepdims=True)) @ vh
        o = out.reshape(T, c.H * c.Dh) * sigmoid(gate)
        return o @ w[p + "o_proj.weight"].T

    def linear_attention(self, i, x, st):
        c, w, p = self.c, self.w, f"layers.{i}.linear_attn."
        T = x.shape[0]
        kd, vd = c.nk * c.dk, c.nv * c.dv
        qkv = x @ w[p + "in_proj_qkv.weight"].T  # [T, C]
        z = (x @ w[p + "in_proj_z.weight"].T).reshape(T, c.nv, c.dv)
        beta = sigmoid(x @ w[p + "in_proj_b.weight"].T)  # [T, nv]
        g = -np.exp(w[p + "A_log"]) * softplus(x @ w[p + "in_proj_a.weight"].T + w[p + "dt_bias"])  # [T, nv]
        # causal depthwise conv: out[t, ch] = sum_j kernel[ch, j] * window[t + j, ch], window = state ++ qkv
        kern = w[p + "conv1d.weight"][:, 0, :]  # [C, K]
        window = np.concatenate([st["conv"], qkv], 0)  # [K - 1 + T, C]
        conv = np.zeros_like(qkv)
        for j in range(c.K):
            conv += window[j:j + T] * kern[:, j]
        st["conv"] = window[T:]
        conv = silu(conv)
        q = l2norm(conv[:, :kd].reshape(T, c.nk, c.dk)) * (c.dk ** -0.5)
        k = l2norm(conv[:, kd:2 * kd].reshape(T, c.nk, c.dk))
        v = conv[:, 2 * kd:].reshape(T, c.nv, c.dv)
        rep = c.nv // c.nk
        if getattr(self, "tiled_pairing", False):  # a deliberately wrong pairing (compare_qwen35.py shows it matters)
            q, k = np.tile(q, (1, rep, 1)), np.tile(k, (1, rep, 1))
        else:
            q, k = np.repeat(q, rep, axis=1), np.repeat(k, rep, axis=1)  # value head h <- key head h // rep
        S = st["S"]
        o = np.empty((T, c.nv, c.dv))
        for t in range(T):
            S = S * np.exp(g[t])[:, None, None]
            kv_mem = np.einsum("hk,hkv->hv", k[t], S)
            delta = (v[t] - kv_mem) * beta[t][:, None]
            S = S + k[t][:, :, None] * delta[:, None, :]
            o[t] = np.einsum("hk,hkv->hv", q[t], S)
        st["S"] = S
        o = rms_norm(o, c.eps) * w[p + "norm.weight"] * silu(z)
        return o.reshape(T, vd) @ w[p + "out_proj.weight"].T

    def mlp(self, i, x):
        c, w, m = self.c, self.w, f"layers.{i}.mlp."
        if not c.E:
            return (silu(x @ w[m + "gate_proj.weight"].T) * (x @ w[m + "up_proj.weight"].T)) @ w[m + "down_proj.weight"].T
        logits = x @ w[m + "gate.weight"].T                                     # [T, E]
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out = np.zeros_like(x)
        gu, down = w[m + "experts.gate_up_proj"], w[m + "experts.down_proj"]
        for t in range(x.shape[0]):
            top = np.argsort(-p[t], kind="stable")[:c.E_used]
            wt = p[t, top] / p[t, top].sum() if self.renormalize else p[t, top]
            for e, we in zip(top, wt):
                g_u = gu[e] @ x[t]
                out[t] += we * (down[e] @ (silu(g_u[:c.Fe]) * g_u[c.Fe:]))
        sh = (silu(x @ w[m + "shared_expert.gate_proj.weight"].T) * (x @ w[m + "shared_expert.up_proj.weight"].T)) \
            @ w[m + "shared_expert.down_proj.weight"].T
        return out + sigmoid(x @ w[m + "shared_expert_gate.weight"].T) * sh

    def forward(self, ids, state=None, positions=None, hidden_out=None):
        """ids: [T] token ids continuing |state| (a new one if None). positions: [T] or [3, T]
        (T/H/W); default the next text positions. Returns logits [T, vocab]; |state| is updated."""
        c, w = self.c, self.w
        if state is None:
            state = self.new_state()
        ids = np.asarray(ids, dtype=np.int64)
        T = ids.shape[0]
        if positions is None:
            positions = np.arange(state["pos"], state["pos"] + T)
        positions = np.asarray(positions)
        pos3 = np.broadcast_to(positions, (3, T)) if positions.ndim == 1 else positions
        cos, sin = self.rope_cos_sin(pos3)
        h = w["embed_tokens.weight"][ids]
        for i in range(c.L):
            x = rms_norm(h, c.eps) * (1.0 + w[f"layers.{i}.input_layernorm.weight"])
            if c.layer_types[i] == "linear_attention":
                h = h + self.linear_attention(i, x, state["layers"][i])
            else:
                h = h + self.full_attention(i, x, state["layers"][i], cos, sin)
            x = rms_norm(h, c.eps) * (1.0 + w[f"layers.{i}.post_attention_layernorm.weight"])
            h = h + self.mlp(i, x)
            if hidden_out is not None:
                hidden_out.setdefault(f"layer{i}", []).append(h.copy())
        state["pos"] += T
        h = rms_norm(h, c.eps) * (1.0 + w["norm.weight"])
        return h @ self.lm_head.T


def load(path):
    return Qwen35.from_gguf(path) if path.endswith(".gguf") else Qwen35.from_hf(path)


# The oracle interface of bench/peer/logits_vs_oracle.py (Model(path), forward(model, ids)).
def Model(path):  # noqa: N802
    return load(path)


def forward(model, ids):
    return model.forward(ids)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="HF folder or .gguf")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--out", help="logits .npy, [n_tokens, n_vocab] float64")
    ap.add_argument("--prefill", type=int, default=None,
                    help="also run this many tokens at once, then the rest one at a time carrying the state, "
                         "and require the same logits (max abs diff <= 1e-9)")
    ap.add_argument("--hidden-out", help="save the residual stream after each layer ([n_tokens, hidden]) to this .npz")
    a = ap.parse_args(argv)
    ids = [int(x) for x in a.tokens.split(",") if x.strip()]
    m = load(a.model)
    hid = {} if a.hidden_out else None
    logits = m.forward(ids, hidden_out=hid)
    if a.out:
        np.save(a.out, logits)
    if hid is not None:
        np.savez(a.hidden_out, **{k: np.concatenate(v, 0) for k, v in hid.items()})
    print(f"{len(ids)} tokens, logits {logits.shape}, argmax {logits.argmax(-1).tolist()}")
    if a.prefill is not None:
        st = m.new_state()
        parts = [m.forward(ids[:a.prefill], st)] if a.prefill > 0 else []
        for t in ids[a.prefill:]:
            parts.append(m.forward([t], st))
        split = np.concatenate(parts, 0)
        diff = float(np.abs(split - logits).max())
        print(f"prefill {a.prefill} + decode {len(ids) - a.prefill} vs all at once: max abs diff {diff:.3e}")
        if not diff <= 1e-9:
            sys.exit(1)


if __name__ == "__main__":
    main()
