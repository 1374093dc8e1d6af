#!/usr/bin/env python3
"""One-off check (not run by CI: it needs torch, which the project venv does not have): the numpy
oracle (numpy_qwen35.py) against transformers' own Qwen3_5ForConditionalGeneration on a tiny
checkpoint from make_qwen35.py (with --moe: Qwen3_5MoeForConditionalGeneration on the MoE files), and optionally make_qwen35.py's GGUFs against llama.cpp's converter.

  python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch transformers==5.24.0 \
      safetensors numpy gguf
  /tmp/torchvenv/bin/python validate_vs_transformers.py OUT_DIR [--llama-cpp DIR]

For each of a few token sequences (one past HF's 64-token delta-rule chunk) it reports the max abs
and max relative logit difference of the numpy oracle (float64) against HF in float64 throughout
(HF's internal float32 casts redirected, see all_float64), HF's float64 model as it comes (norms,
rotary and delta rule still in float32), HF in float32, HF's own cached path (prefill, then one
token at a time, float64 throughout), and the oracle's own prefill-then-decode path. With --llama-cpp (a llama.cpp
source tree, unbuilt) it runs that tree's convert_hf_to_gguf.py on OUT_DIR/tiny-qwen35-hf
(--outtype f32, with and without --no-mtp; the BPE pre-tokenizer hash check answered "qwen35",
as this byte-level tokenizer is in no table) and compares every key and tensor with
make_qwen35.py's files, byte for byte.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import numpy_qwen35  # noqa: E402


class all_float64:
    """HF's Qwen3.5 computes its norms, rotary tables and the delta rule in float32 whatever the
    model's dtype (.float(), .to(torch.float32), dtype=torch.float). Within this context those all
    give float64, so a float64 model runs in float64 throughout and can be held to ~1e-12."""

    def __enter__(self):
        import torch
        self.saved = (torch.float32, torch.float, torch.Tensor.float)
        torch.float32 = torch.float = torch.float64
        torch.Tensor.float = lambda t, *a, **k: t.to(torch.float64)

    def __exit__(self, *exc):
        import torch
        torch.float32, torch.float, torch.Tensor.float = self.saved


def torch_logits(model_dir, ids, dtype, cached_split=None, pure64=False, pos3=None):
    import contextlib
    import torch
    import json
    with open(os.path.join(model_dir, "config.json")) as f:
        moe = json.load(f)["model_type"] == "qwen3_5_moe"
    if moe:
        from transformers import Qwen3_5MoeForConditionalGeneration as Model
        from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeTextRotaryEmbedding as Rotary
    else:
        from transformers import Qwen3_5ForConditionalGeneration as Model
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextRotaryEmbedding as Rotary
    m = Model.from_pretrained(model_dir, dtype=dtype, **({"experts_implementation": "eager"} if moe else {}))  # float64: no grouped_mm
    m.eval()
    x = torch.tensor([ids])
    with torch.no_grad(), (all_float64() if pure64 else contextlib.nullcontext()):
        if pure64:  # the rotary frequencies were made in float32 at load: make them again in float64
            for mod in m.modules():
                if isinstance(mod, Rotary):
                    mod.inv_freq = mod.compute_default_rope_parameters(mod.config)[0]
        if pos3 is not None:
            return m(input_ids=x, position_ids=torch.tensor(pos3)[:, None, :]).logits[0].double().numpy()
        if cached_split is None:
            return m(input_ids=x).logits[0].double().numpy()
        out = m(input_ids=x[:, :cached_split], use_cache=True)
        parts, cache = [out.logits[0]], out.cache
        for t in range(cached_split, len(ids)):
            out = m(input_ids=x[:, t:t + 1], cache=cache, use_cache=True)
            parts.append(out.logits[0])
            cache = out.cache
        return torch.cat(parts, 0).double().numpy()


def diffs(a, ref):
    d = np.abs(a - ref)
    return float(d.max()), float(d.max() / np.abs(ref).max())


def compare_gguf(mine, theirs):
    from gguf import GGUFReader
    a, b = GGUFReader(mine), GGUFReader(theirs)
    problems = []
    fa = {f.name: f for f in a.fields.values() if not f.name.startswith("GGUF.")}
    fb = {f.name: f for f in b.fields.values() if not f.name.startswith("GGUF.")}
    if list(fa) != list(fb):
        problems.append(f"keys differ: {sorted(set(fa) ^ set(fb))} (or their order)")
    for k in set(fa) & set(fb):
        if fa[k].types != fb[k].types or fa[k].contents() != fb[k].contents():
            problems.append(f"key {k}: {str(fa[k].contents())[:60]} vs {str(fb[k].contents())[:60]}")
    ta, tb = {t.name: t for t in a.tensors}, {t.name: t for t in b.tensors}
    if set(ta) != set(tb):
        problems.append(f"tensors differ: {sorted(set(ta) ^ set(tb))}")
    for n in set(ta) & set(tb):
        x, y = ta[n], tb[n]
        if x.tensor_type != y.tensor_type or list(x.shape) != list(y.shape):
            problems.append(f"tensor {n} differs in type or shape")
        elif np.asarray(x.data).tobytes() != np.asarray(y.data).tobytes():
            # ssm_a = -exp(A_log): torch's f32 exp and a float64 exp rounded to f32 can part by 1 ulp
            ulps = np.abs(np.asarray(x.data).view(np.int32).astype(np.int64) - np.asarray(y.data).view(np.int32))
            if not (n.endswith("ssm_a") and ulps.max() <= 1):
                problems.append(f"tensor {n} differs")
    return len(ta), problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--llama-cpp")
    ap.add_argument("--moe", action="store_true", help="the MoE files (make_qwen35.py --experts N): tiny-qwen35moe-*")
    a = ap.parse_args()
    import torch
    stem = "tiny-qwen35moe" if a.moe else "tiny-qwen35"
    hf = os.path.join(a.out_dir, stem + "-hf")
    oracle = numpy_qwen35.Qwen35.from_hf(hf)
    V = oracle.lm_head.shape[0]
    rng = np.random.default_rng(7)
    seqs = {"12 tokens": [1, 257, 100, 200, 33, 33, 33, 7, 259, 64, 65, 66],
            "100 random": rng.integers(0, V, 100).tolist()}
    worst = 0.0
    for label, ids in seqs.items():
        ref = oracle.forward(ids)
        t64 = torch_logits(hf, ids, torch.float64, pure64=True)
        t64_as_is = torch_logits(hf, ids, torch.float64)
        t32 = torch_logits(hf, ids, torch.float32)
        split = len(ids) // 2
        c64 = torch_logits(hf, ids, torch.float64, cached_split=split, pure64=True)
        st = oracle.new_state()
        o_split = np.concatenate([oracle.forward(ids[:split], st)] + [oracle.forward([t], st) for t in ids[split:]])
        for name, x in (("torch f64 (all f64)", t64), ("torch f64 (HF's f32 parts)", t64_as_is),
                        ("torch f32", t32), (f"torch f64 cached {split}+1..", c64),
                        (f"numpy prefill {split}+1..", o_split)):
            mx, rel = diffs(x, ref)
            print(f"{label:>10}: numpy f64 vs {name:<27} max abs {mx:.3e}  max rel {rel:.3e}  "
                  f"argmax agree {np.mean(x.argmax(-1) == ref.argmax(-1)) * 100:.0f}%")
            if "all f64" in name or "cached" in name or "numpy" in name:
                worst = max(worst, mx)
        gguf_files = [f for f in (stem + "-f32.gguf", stem + "-nomtp-f32.gguf")
                      if os.path.exists(os.path.join(a.out_dir, f))]
        for f in gguf_files:
            mx, rel = diffs(numpy_qwen35.Qwen35.from_gguf(os.path.join(a.out_dir, f)).forward(ids), ref)
            print(f"{label:>10}: numpy from HF vs numpy from {f:<27} max abs {mx:.3e}  max rel {rel:.3e}")
    # mrope: distinct T/H/W positions (as image tokens get) exercise the interleaved sections
    ids = seqs["12 tokens"]
    pos3 = np.stack([np.arange(12), 3 + (np.arange(12) * 7) % 5, 11 - np.arange(12) // 2])
    mx, rel = diffs(torch_logits(hf, ids, torch.float64, pure64=True, pos3=pos3), oracle.forward(ids, positions=pos3))
    print(f"mrope T/H/W positions: numpy f64 vs torch f64 (all f64) max abs {mx:.3e}  max rel {rel:.3e}")
    worst = max(worst, mx)
    ok = worst < 1e-9
    if a.llama_cpp:
        for flags, mine in (([], stem + "-f32.gguf"), (["--no-mtp"], stem + "-nomtp-f32.gguf")):
            if not os.path.exists(os.path.join(a.out_dir, mine)):
                continue
            with tempfile.TemporaryDirectory() as tmp:
                drv = os.path.join(tmp, "drv.py")
                with open(drv, "w") as fh:
                    fh.write(f"import sys\nsys.path.insert(0, {a.llama_cpp!r})\n"
                             f"sys.argv[0] = {os.path.join(a.llama_cpp, 'convert_hf_to_gguf.py')!r}\n"
                             "import convert_hf_to_gguf as c\nfrom conversion import base\n"
                             "base.TextModel.get_vocab_base_pre = lambda self, tok: 'qwen35'\nc.main()\n")
                ref_path = os.path.join(tmp, "ref.gguf")
                subprocess.run([sys.executable, drv, hf, "--outtype", "f32", "--outfile", ref_path] + flags,
                               check=True, capture_output=True)
                n, problems = compare_gguf(os.path.join(a.out_dir, mine), ref_path)
                print(f"{mine} vs llama.cpp convert_hf_to_gguf.py {' '.join(flags)}: {n} tensors, "
                      f"{'identical keys and tensors' if not problems else problems}")
                ok = ok and not problems
    print("OK" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
