#!/usr/bin/env python3
"""One-off check (not a test: it needs torch and transformers, which the project venv lacks): the
numpy gpt-oss (numpy_gpt_oss.py) against transformers' GptOssForCausalLM (eager attention, float64)
on make_gpt_oss.py's tiny checkpoint, for truncate true and false. Run with a Python that has both:
  python validate_vs_transformers.py DIR_WITH_tiny-gpt-oss-hf
The result is recorded in tests/model/gpt_oss/NOTES.md.
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
from transformers import GptOssConfig, GptOssForCausalLM
from safetensors.numpy import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_gpt_oss  # noqa: E402


def float64_islands(model, oracle):
    """transformers computes RMSNorm's variance, YaRN's inverse frequencies and RoPE's angles in
    float32 whatever the model's dtype. Patched: the norms and angles in float64, and both sides
    given transformers' own inverse frequencies (as float64), so what remains is the rest of the
    model's arithmetic. Returns how far the numpy inverse frequencies are from transformers'."""
    from transformers.models.gpt_oss import modeling_gpt_oss as m

    def rms_forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    def rope_forward(self, x, position_ids):
        freqs = position_ids[..., None].to(torch.float64) * self.inv_freq.to(torch.float64)
        return freqs.cos() * self.attention_scaling, freqs.sin() * self.attention_scaling

    m.GptOssRMSNorm.forward = rms_forward
    m.GptOssRotaryEmbedding.forward = rope_forward
    theirs = model.model.rotary_emb.inv_freq.to(torch.float64).numpy()
    ours = np.arctan2(*oracle.rope_tables(np.array([1.0]))[::-1])[0]  # angle at position 1 = inv_freq
    oracle.inv_freq = theirs
    return float(np.max(np.abs(ours - theirs) / theirs)), model.model.rotary_emb.attention_scaling


def run(folder, ids, islands):
    oracle = numpy_gpt_oss.load(folder)
    cfg = GptOssConfig.from_pretrained(folder)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"  # the grouped_mm path has no float64
    model = GptOssForCausalLM(cfg).to(torch.float64).eval()
    sd = {k: torch.from_numpy(v.astype(np.float64)) for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert all("rotary" in m for m in missing), missing
    note = ""
    if islands:
        rel, scaling = float64_islands(model, oracle)
        note = f" (numpy's inverse frequencies within {rel:.1e} of transformers' float32 ones; attention factor {scaling})"
    with torch.no_grad():
        ours = model(torch.tensor([ids])).logits[0].numpy()
    ref = oracle.forward(ids)
    return float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref))), note


def main():
    src = os.path.join(sys.argv[1], "tiny-gpt-oss-hf")
    ids = [int(x) for x in np.random.default_rng(7).integers(0, 264, 64)]
    # Unpatched first: the float64 patches replace class methods for the rest of the process.
    for islands in (False, True):
        for truncate in (True, False):
            with tempfile.TemporaryDirectory() as d:
                for f in os.listdir(src):
                    shutil.copy(os.path.join(src, f), d)
                with open(os.path.join(d, "config.json")) as f:
                    c = json.load(f)
                c["rope_parameters"]["truncate"] = truncate
                with open(os.path.join(d, "config.json"), "w") as f:
                    json.dump(c, f)
                err, note = run(d, ids, islands)
                print(f"truncate={truncate}, float64 norm/rope {islands}: max |transformers - numpy| / max |logit| = "
                      f"{err:.3e}{note}")


if __name__ == "__main__":
    main()
