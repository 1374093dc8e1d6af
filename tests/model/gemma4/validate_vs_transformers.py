#!/usr/bin/env python3
"""One-off check (needs torch and transformers >= 5.5, so not in CI): the float64 numpy Gemma 4
(numpy_gemma4.py) against transformers' Gemma4ForCausalLM on the tiny checkpoints make_gemma4.py
writes, in float64 with eager attention. Prints the max absolute and normalised RMS difference of
the logits over a prompt longer than the sliding window, whole and token by token through
transformers' KV cache (its cache path: sliding-window cache, KV sharing).
Usage: validate_vs_transformers.py DIR (with make_gemma4.py's three variants in it)
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_gemma4  # noqa: E402


def float64_everywhere():
    """transformers computes Gemma4RMSNorm (x.float()) and the eager softmax (dtype=float32) in
    float32 even for a float64 model: made float64 here, so the comparison shows the oracle's
    own error and not float32 rounding."""
    import torch.nn.functional as F
    from transformers.models.gemma4 import modeling_gemma4 as mg

    def norm_forward(self, x):
        y = x * torch.pow(x.pow(2).mean(-1, keepdim=True) + self.eps, -0.5)
        return y * self.weight if self.with_scale else y
    mg.Gemma4RMSNorm.forward = norm_forward
    softmax = F.softmax

    def softmax64(x, dim=None, dtype=None, **kw):
        return softmax(x, dim=dim, dtype=None if x.dtype == torch.float64 else dtype, **kw)
    F.softmax = softmax64

    def rope_forward(self, x, position_ids, layer_type):
        # HF's float32 inverse frequencies recomputed in float64 (the same zero entries).
        inv32 = getattr(self, f"{layer_type}_inv_freq").double()
        rp = self.config.rope_parameters[layer_type]
        dim = 2 * inv32.numel()
        inv = torch.where(inv32 == 0, 0.0, 1.0 / rp["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        freqs = position_ids[..., None].double() * inv
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    mg.Gemma4TextRotaryEmbedding.forward = rope_forward


def main():
    from transformers import Gemma4ForCausalLM
    float64_everywhere()
    d = sys.argv[1]
    rng = np.random.default_rng(44)
    ids = [int(x) for x in rng.integers(0, 300, 40)]
    worst = 0.0
    for stem in ("tiny-gemma4-hf", "tiny-gemma4-31b-hf", "tiny-gemma4-26b-hf"):
        folder = os.path.join(d, stem)
        ref = numpy_gemma4.load(folder).forward(ids)
        m = Gemma4ForCausalLM.from_pretrained(folder, torch_dtype=torch.float64, attn_implementation="eager",
                                                 experts_implementation="eager").eval()
        with torch.no_grad():
            whole = m(torch.tensor([ids])).logits[0].numpy()
            out, cache = [], None
            for t in ids:
                r = m(torch.tensor([[t]]), past_key_values=cache, use_cache=True)
                cache = r.past_key_values
                out.append(r.logits[0, -1].numpy())
            steps = np.stack(out)
        for what, hf in (("whole", whole), ("token by token", steps)):
            diff = np.abs(hf - ref).max()
            nrmse = np.sqrt(np.sum((hf - ref) ** 2) / np.sum(ref ** 2))
            worst = max(worst, diff)
            print(f"{stem} {what}: max |transformers - numpy| {diff:.3e}, normalised RMS {nrmse:.3e}, "
                  f"max |logit| {np.abs(ref).max():.2f}")
    print(f"worst max abs difference {worst:.3e}")
    sys.exit(0 if worst < 1e-9 else 1)


if __name__ == "__main__":
    main()
