#!/usr/bin/env python3
"""Tessera's Phi-3 logits vs the independent float64 numpy Phi-3 (tests/python/numpy_phi3.py).

Tiny random-weight phi3 GGUFs (tests/python/make_tiny_phi3.py: fused attn_qkv and ffn_up, GQA)
run a 64-token prompt through `tessera eval` (KV cache f32) and through the oracle, with
compare_numpy.py's checks and tolerances (normalised RMS error <= TOL[dtype]; the argmax agrees
wherever the oracle's top-2 margin is decisive):
  f32, q8_0        sliding window 48, so the last 16 positions depend on it
  longrope-f32     rope_factors_long and the attention factor (context 512 > original 128)
  shortrope-f32    rope_factors_short (context 128 = original)
Each feature is also shown to matter: the oracle with it switched off (no window; no factors)
must be far (> 20 x TOL) from Tessera, or the test would not notice it missing.
The f32 and longrope models written as Hugging Face checkpoints (qkv_proj, gate_up_proj,
rope_scaling long_factor/short_factor in config.json) hold the same weights: their logits must
match the oracle too.
`tessera convert` turns each checkpoint into a GGUF, which must match the oracle the same way and
the directly loaded checkpoint within 1e-6; the f32 and longrope ones must hold what
make_tiny_phi3.py writes directly (llama.cpp's phi3 layout): the same tensors, byte for byte, and
the same phi3.* values (read with the `gguf` package). The FP8 checkpoint (fused projections in
F8_E4M3) converts too (FP8 under Tessera's GGUF type id, split at load); an NVFP4 fused projection
with a global scale is refused naming the tensor. On the CPU, `tessera quantize` of a checkpoint
to q8_0 must hold the written model's tensors to within q8_0 rounding and match the oracle of its
own output on the reference device.
Usage: compare_phi3.py TESSERA_BIN_DIR SCRATCH_DIR [--device cpu|vulkan]
"""
import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import numpy_phi3  # noqa: E402
from compare_numpy import N_TOKENS, TOL, compare, device_unusable, nrmse, tessera_logits  # noqa: E402




def gguf_fields(reader):
    return {f.name: f.contents() for f in reader.fields.values() if not f.name.startswith("GGUF.")}


def converted_vs_written(converted, written, weight_tol=None):
    """What differs between `tessera convert`'s GGUF and the one make_tiny_phi3.py wrote from the
    same weights: tensors (names, types, shapes, bytes), phi3.* keys (a key one file lacks must
    hold what the loaders take when it is absent) and the vocabulary. weight_tol: the tensors may
    differ in type (a quantized file), their dequantised values by at most that normalised RMS."""
    from gguf import GGUFReader
    from gguf.quants import dequantize
    a, b = GGUFReader(converted), GGUFReader(written)
    problems = []
    ta, tb = {t.name: t for t in a.tensors}, {t.name: t for t in b.tensors}
    if set(ta) != set(tb):
        problems.append(f"tensors only in the converted file: {sorted(set(ta) - set(tb))}, "
                        f"only in the written one: {sorted(set(tb) - set(ta))}")
    for name in sorted(set(ta) & set(tb)):
        x, y = ta[name], tb[name]
        xs, ys = [int(d) for d in x.shape], [int(d) for d in y.shape]
        if (weight_tol is None and x.tensor_type != y.tensor_type) or xs != ys:
            problems.append(f"{name}: converted {x.tensor_type.name} {xs}, written {y.tensor_type.name} {ys}")
        elif weight_tol is None:
            if not np.array_equal(np.asarray(x.data), np.asarray(y.data)):
                problems.append(f"{name}: the values differ")
        else:
            xv = dequantize(np.asarray(x.data), x.tensor_type).astype(np.float64).ravel()
            yv = dequantize(np.asarray(y.data), y.tensor_type).astype(np.float64).ravel()
            if nrmse(xv, yv) > weight_tol:
                problems.append(f"{name}: values {nrmse(xv, yv):.3e} (normalised RMS) from the written ones (> {weight_tol:g})")
    fa, fb = gguf_fields(a), gguf_fields(b)
    head_dim = fb["phi3.embedding_length"] // fb["phi3.attention.head_count"]
    absent_means = {"phi3.attention.key_length": head_dim, "phi3.attention.value_length": head_dim,
                    "phi3.vocab_size": len(fb["tokenizer.ggml.tokens"]),
                    "phi3.rope.scaling.original_context_length": fb["phi3.context_length"],
                    "phi3.rope.scaling.attn_factor": 1.0, "phi3.attention.sliding_window": 0}
    for key in sorted(k for k in set(fa) | set(fb) if k.startswith("phi3.")):
        got, want = fa.get(key, absent_means.get(key)), fb.get(key, absent_means.get(key))
        if got is None or got != want:
            problems.append(f"{key}: converted {fa.get(key, '(absent)')}, written {fb.get(key, '(absent)')}")
    for key in ("phi3.rope.scaling.original_context_length", "phi3.attention.sliding_window"):
        if key not in fa:
            problems.append(f"{key}: absent (llama.cpp's converter always writes it)")
    for key in ("general.architecture", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
                "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token"):
        if fa.get(key) != fb.get(key):
            problems.append(f"{key}: converted {fa.get(key)!r:.80}, written {fb.get(key)!r:.80}")
    return problems


def run_tessera(bin_dir, *args):
    return subprocess.run([os.path.join(bin_dir, "tessera"), *args], capture_output=True, text=True)


def copy_checkpoint(src, dst, edit=None):
    """A fresh copy of checkpoint |src| at |dst|; |edit| (optional) changes its config.json dict in
    place. Returns the copy's config."""
    import json
    import shutil
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    with open(os.path.join(dst, "config.json")) as f:
        cfg = json.load(f)
    if edit:
        edit(cfg)
        write_config(dst, cfg)
    return cfg


def write_config(ckpt, cfg):
    import json
    with open(os.path.join(ckpt, "config.json"), "w") as f:
        json.dump(cfg, f)


def convert(args, hf_dir, out, what, failures):
    """`tessera convert hf_dir out`: |out|, or None after adding a failure naming |what|."""
    r = run_tessera(args.bin_dir, "convert", "-q", hf_dir, out)
    if r.returncode != 0:
        failures.append(f"tessera convert {what}: exit {r.returncode}: {r.stderr.strip()}")
        return None
    return out


def expect_error(args, cmd, want, what):
    """Runs `tessera CMD...`; a failure unless it exits non-zero with |want| in its stderr."""
    r = run_tessera(args.bin_dir, *cmd)
    print(f"{what}: exit {r.returncode}, {r.stderr.strip()}")
    return [] if r.returncode != 0 and want in r.stderr else [f"{what}: expected an error with {want!r}"]


def write_nvfp4_qkv(src, dst):
    """A copy of checkpoint |src| whose layer-0 qkv_proj is NVFP4 in ModelOpt form with a global
    scale (weight_scale_2 != 1), which no GGUF tensor type holds."""
    import ml_dtypes
    from safetensors.numpy import load_file, save_file
    copy_checkpoint(src, dst)
    t = load_file(os.path.join(src, "model.safetensors"))
    p = "model.layers.0.self_attn.qkv_proj."
    rows, cols = t[p + "weight"].shape
    rng = np.random.default_rng(7)
    t[p + "weight"] = rng.integers(0, 256, (rows, cols // 2), dtype=np.uint8)
    t[p + "weight_scale"] = np.full((rows, cols // 16), 0.25, dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)
    t[p + "weight_scale_2"] = np.array(0.5, dtype=np.float32)
    save_file(t, os.path.join(dst, "model.safetensors"))


def write_padded_vocab(src, dst, extra):
    """A copy of checkpoint |src| whose embedding and lm_head have |extra| rows more than
    tokenizer.json has tokens (negative: fewer), as real checkpoints pad them (Phi-3: 32064 rows
    for 32011 tokens)."""
    from safetensors.numpy import load_file, save_file
    t = load_file(os.path.join(src, "model.safetensors"))
    rng = np.random.default_rng(11)
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        w = t[name]
        if extra > 0:
            t[name] = np.concatenate([w, rng.standard_normal((extra, w.shape[1])).astype(w.dtype) * 0.02])
        else:
            t[name] = np.ascontiguousarray(w[:extra])
    n_rows = int(t["model.embed_tokens.weight"].shape[0])
    copy_checkpoint(src, dst, lambda cfg: cfg.update(vocab_size=n_rows))
    save_file(t, os.path.join(dst, "model.safetensors"))
    return n_rows


def check_padded_vocab(args, ids):
    """Embedding rows past the tokenizer become [PAD<id>] tokens of type unused, loaded directly or
    converted; the first rows' logits are those of the unpadded checkpoint. Fewer rows than tokens
    is an error naming both counts."""
    from gguf import GGUFReader
    failures = []
    base = os.path.join(args.scratch, "tiny-phi3-hf")
    padded = os.path.join(args.scratch, "tiny-phi3-padded-hf")
    n_rows = write_padded_vocab(base, padded, 8)
    plain = tessera_logits(args.bin_dir, base, ids, args.device, args.scratch)
    ours = tessera_logits(args.bin_dir, padded, ids, args.device, args.scratch)
    n_tok = plain.shape[1]
    if ours.shape[1] != n_rows:
        failures.append(f"padded vocabulary: {ours.shape[1]} logits per row, expected {n_rows}")
    else:
        d = nrmse(ours[:, :n_tok], plain)
        print(f"padded vocabulary ({n_tok} tokens, {n_rows} rows): the tokenizer's logits {d:.3e} from the unpadded model's")
        if d > 1e-6:
            failures.append(f"padded vocabulary: the first {n_tok} logits are {d:.3e} from the unpadded model's")
    converted = convert(args, padded, os.path.join(args.scratch, "tiny-phi3-padded-converted.gguf"),
                        "of a padded vocabulary", failures)
    if converted:
        reader = GGUFReader(converted)
        toks = reader.fields["tokenizer.ggml.tokens"]
        types = reader.fields["tokenizer.ggml.token_type"]
        last = bytes(toks.parts[toks.data[-1]]).decode()
        last_type = int(types.parts[types.data[-1]][0])
        print(f"  converted: {len(toks.data)} tokens, the last {last!r} of type {last_type}")
        if len(toks.data) != n_rows or last != f"[PAD{n_rows - 1}]" or last_type != 5:
            failures.append(f"converted padded vocabulary: {len(toks.data)} tokens, last {last!r} type {last_type}; "
                            f"expected {n_rows}, '[PAD{n_rows - 1}]', 5 (unused)")
        conv = tessera_logits(args.bin_dir, converted, ids, args.device, args.scratch)
        if conv.shape != ours.shape or nrmse(conv, ours) > 1e-6:
            failures.append("the converted padded checkpoint's logits differ from the directly loaded one's")
    short = os.path.join(args.scratch, "tiny-phi3-short-vocab-hf")
    write_padded_vocab(base, short, -1)
    want = f"the embedding has {n_tok - 1} rows but tokenizer.json has {n_tok} tokens"
    for cmd in (["eval", "-q", "-m", short, "--device", args.device, "--tokens", "1", "-o", os.path.join(args.scratch, "s.npy")],
                ["convert", "-q", short, os.path.join(args.scratch, "short.gguf")]):
        failures += expect_error(args, cmd, want, f"{cmd[0]} with fewer embedding rows than tokens")
    return failures


def check_rope_parameters(args, ids):
    """transformers 5 save RoPE settings in one rope_parameters object (rope_theta inside, no
    rope_scaling): the longrope checkpoint rewritten that way gives the same logits, directly and
    converted; a scaling type Phi-3 does not use is refused naming it."""
    failures = []
    orig = os.path.join(args.scratch, "tiny-phi3-longrope-hf")
    # rope_theta 50000 instead of the tiny model's 10000 (the default), so that a rope_theta
    # left unread in rope_parameters shows.
    src, v5 = os.path.join(args.scratch, "tiny-phi3-longrope-theta-hf"), os.path.join(args.scratch, "tiny-phi3-longrope-v5-hf")
    cfg = copy_checkpoint(orig, src, lambda c: c.update(rope_theta=50000.0))
    params = dict(cfg.pop("rope_scaling"), rope_type="longrope")
    params.pop("type", None)
    params["rope_theta"] = cfg.pop("rope_theta")
    params["partial_rotary_factor"] = 1.0
    copy_checkpoint(orig, v5, lambda c: (c.clear(), c.update(cfg, rope_parameters=params)))
    want = tessera_logits(args.bin_dir, src, ids, args.device, args.scratch)
    base = tessera_logits(args.bin_dir, orig, ids, args.device, args.scratch)
    if nrmse(want, base) < 1e-3:
        failures.append("rope_theta 50000 vs 10000 changes the tiny model's logits by < 1e-3: the check cannot see it")
    got = tessera_logits(args.bin_dir, v5, ids, args.device, args.scratch)
    d = nrmse(got, want)
    print(f"longrope and rope_theta in rope_parameters (transformers 5): nrmse {d:.3e} from the rope_scaling config's")
    if d > 1e-6:
        failures.append(f"a transformers 5 config (rope_parameters) gives logits {d:.3e} from the same model's rope_scaling config")
    converted = convert(args, v5, os.path.join(args.scratch, "tiny-phi3-longrope-v5.gguf"), "of a rope_parameters config",
                        failures)
    if converted and nrmse(tessera_logits(args.bin_dir, converted, ids, args.device, args.scratch), want) > 1e-6:
        failures.append("the converted rope_parameters checkpoint's logits differ from the rope_scaling one's")
    cfg["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": params["rope_theta"]}
    write_config(v5, cfg)
    failures += expect_error(args, ["eval", "-q", "-m", v5, "--device", args.device, "--tokens", "1", "-o",
                                    os.path.join(args.scratch, "lin.npy")],
                             "rope_scaling type 'linear' is not supported for phi3", "phi3 with linear rope scaling")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("scratch")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    os.makedirs(args.scratch, exist_ok=True)
    subprocess.run([sys.executable, os.path.join(HERE, "..", "python", "make_tiny_phi3.py"), args.scratch], check=True)
    why = device_unusable(args.bin_dir, os.path.join(args.scratch, "tiny-phi3-f32.gguf"), args.device, args.scratch)
    if why:
        print(f"SKIP: [hardware] {why}")  # a device that is absent: the one skip CI allows
        sys.exit(77)
    rng = np.random.default_rng(2024)
    ids = [int(x) for x in rng.integers(0, 260, N_TOKENS)]
    failures = []
    for variant, tol in (("f32", TOL["f32"]), ("q8_0", TOL["q8_0"]), ("longrope-f32", TOL["f32"]),
                         ("shortrope-f32", TOL["f32"])):
        path = os.path.join(args.scratch, f"tiny-phi3-{variant}.gguf")
        m = numpy_phi3.Phi3(path)
        ref = numpy_phi3.forward(m, ids)
        ours = tessera_logits(args.bin_dir, path, ids, args.device, args.scratch)
        failures += compare(f"tiny phi3 {variant} ({args.device})", ours, ref, tol)
        if variant == "q8_0" and args.device == "cpu":
            # The CPU's error here is its 8-bit activations; the scalar reference device keeps f32
            # activations, so the q8_0 rows split out of the fused tensors must give the f32 tolerance.
            exact = tessera_logits(args.bin_dir, path, ids, "reference", args.scratch)
            failures += compare("tiny phi3 q8_0 (reference device)", exact, ref, TOL["f32"])
        if variant in ("f32", "longrope-f32", "shortrope-f32"):
            if variant == "f32":
                what, m.window = "without the sliding window", 0
            else:
                what, m.ext, m.mscale = "without rope factors", np.ones_like(m.ext), 1.0
            off = nrmse(ours, numpy_phi3.forward(m, ids))
            print(f"  oracle {what}: nrmse {off:.3e} from ours")
            if off < 20 * tol:
                failures.append(f"{variant}: the oracle {what} is only {off:.3e} away: the test cannot see that feature")
    for hf, gguf_name in (("tiny-phi3-hf", "tiny-phi3-f32.gguf"), ("tiny-phi3-longrope-hf", "tiny-phi3-longrope-f32.gguf"),
                          ("tiny-phi3-fp8-hf", "tiny-phi3-fp8-f32.gguf")):
        hf_dir, written = os.path.join(args.scratch, hf), os.path.join(args.scratch, gguf_name)
        ref = numpy_phi3.forward(numpy_phi3.Phi3(written), ids)
        ours = tessera_logits(args.bin_dir, hf_dir, ids, args.device, args.scratch)
        failures += compare(f"tiny phi3 {hf} ({args.device})", ours, ref, TOL["f32"])
        # tessera convert: the GGUF it writes must give the same logits.
        converted = convert(args, hf_dir, os.path.join(args.scratch, hf + "-converted.gguf"), hf, failures)
        if not converted:
            continue
        conv = tessera_logits(args.bin_dir, converted, ids, args.device, args.scratch)
        failures += compare(f"tiny phi3 {hf} converted ({args.device})", conv, ref, TOL["f32"])
        d = nrmse(conv, ours)
        print(f"  converted vs the checkpoint loaded directly: nrmse {d:.3e}")
        if d > 1e-6:
            failures.append(f"{hf}: the converted GGUF's logits are {d:.3e} from the checkpoint's (> 1e-6)")
        if hf != "tiny-phi3-fp8-hf":  # FP8 is a Tessera GGUF type, which the gguf package cannot read
            problems = converted_vs_written(converted, written)
            print(f"  converted vs {gguf_name} (gguf package): {len(problems)} differences")
            failures += [f"{hf} converted vs {gguf_name}: {p}" for p in problems]
        if args.device == "cpu" and hf != "tiny-phi3-fp8-hf":
            # tessera quantize reads the checkpoint the same way (fused tensors whole, both factor
            # lists): its q8_0 output holds the written model's tensors to within q8_0's rounding
            # (a q8_0 step is ~0.5 % of a row's RMS; a misplaced row is ~140 %), and the reference
            # device (f32 activations) matches the oracle of that very file.
            q8 = os.path.join(args.scratch, hf + "-q8_0.gguf")
            r = run_tessera(args.bin_dir, "quantize", "-q", hf_dir, q8, "--type", "q8_0")
            if r.returncode != 0:
                failures.append(f"tessera quantize {hf}: exit {r.returncode}: {r.stderr.strip()}")
                continue
            problems = converted_vs_written(q8, written, weight_tol=1e-2)
            print(f"  quantized q8_0 vs {gguf_name} (gguf package): {len(problems)} differences")
            failures += [f"{hf} quantized vs {gguf_name}: {p}" for p in problems]
            q8_ref = numpy_phi3.forward(numpy_phi3.Phi3(q8), ids)
            exact = tessera_logits(args.bin_dir, q8, ids, "reference", args.scratch)
            failures += compare(f"tiny phi3 {hf} quantized q8_0 (reference)", exact, q8_ref, TOL["f32"])
    failures += check_padded_vocab(args, ids)
    failures += check_rope_parameters(args, ids)
    # What convert cannot write: an NVFP4 fused projection with a global scale, refused naming it.
    nvfp4 = os.path.join(args.scratch, "tiny-phi3-nvfp4-hf")
    write_nvfp4_qkv(os.path.join(args.scratch, "tiny-phi3-hf"), nvfp4)
    failures += expect_error(args, ["convert", "-q", nvfp4, os.path.join(args.scratch, "nvfp4.gguf")],
                             "tensor 'blk.0.attn_qkv.weight' (HF 'model.layers.0.self_attn.qkv_proj') loads as nvfp4",
                             "converting an NVFP4 qkv_proj with a global scale")
    # Bad input: a longrope factor list of the wrong length is refused naming the key.
    bad = os.path.join(args.scratch, "tiny-phi3-badrope-hf")
    copy_checkpoint(os.path.join(args.scratch, "tiny-phi3-longrope-hf"), bad,
                    lambda c: c["rope_scaling"].update(long_factor=c["rope_scaling"]["long_factor"][:-1]))
    failures += expect_error(args, ["eval", "-q", "-m", bad, "--device", args.device, "--tokens", "1", "-o",
                                    os.path.join(args.scratch, "bad.npy")],
                             "config.json: rope_scaling.long_factor must be a list of 8 numbers", "a short long_factor list")
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
