#!/usr/bin/env python3
"""Tessera's logits vs the independent numpy forward pass (tests/python/numpy_llama.py).

For random-weight tiny llama and qwen3 GGUFs written by our writer (make_tiny_model) in f32, f16,
q8_0, q4_0 and q4_1, and for the real SmolLM2-135M-Instruct, a 64-token prompt goes through
`tessera eval` (KV cache in f32) and through the numpy oracle (float64, weights dequantised by the
`gguf` package). Two checks per model:
  * normalised RMS error  sqrt(sum((ours - ref)^2) / sum(ref^2))  <= TOL[dtype]
  * at every position where the reference's top-2 margin exceeds 2 * TOL[dtype] * rms(ref row)
    (so no error within the tolerance could swap them), our argmax equals the reference's.
Tolerances (stated, not fitted): f32 models 1e-4 (f32 vs f64 arithmetic); f16 1e-3 (f16 weights
are exact in both, f16 KV is not used); q8_0 3e-2 and q4_0/q4_1 5e-2 (the CPU kernels quantise
activations to 8 bits per 32-block before the integer dot products, the oracle does not; 30 layers
for SmolLM2).
Usage: compare_numpy.py TESSERA_BIN_DIR SCRATCH_DIR MODELS_DIR [--device cpu]
Exit 77 (skip) when the device is not usable on this machine (the registry's reason is printed);
a missing SmolLM2 file skips only the SmolLM2 part.
"""
import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import numpy_llama  # noqa: E402

TOL = {"f32": 1e-4, "f16": 1e-3, "q8_0": 3e-2, "q4_0": 5e-2, "q4_1": 5e-2}
N_TOKENS = 64


def tessera_logits(bin_dir, model, ids, device, scratch, chunk=0, loras=(), extra=()):
    """Tessera's logits for |ids| (f32 KV cache); |chunk| > 0: prefill in chunks of that many tokens;
    |loras|: NAME=PATH adapters (--lora), the first applied; |extra|: more flags of `tessera eval`."""
    out = os.path.join(scratch, "ours.npy")
    cmd = [os.path.join(bin_dir, "tessera"), "eval", "-q", "-m", model, "--device", device,
           "--kv-dtype", "f32", "--tokens", ",".join(map(str, ids)), "-o", out]
    if chunk:
        cmd += ["--chunk", str(chunk)]
    for spec in loras:
        cmd += ["--lora", spec]
    subprocess.run(cmd + list(extra), check=True)
    return np.load(out).astype(np.float64)


def nrmse(a, b):
    """Normalised RMS of a - b relative to b."""
    return float(np.sqrt(np.sum((a - b) ** 2) / np.sum(b ** 2)))


def device_unusable(bin_dir, model, device, scratch):
    """The registry's reason when |device| cannot be used here (no driver, not built), else None."""
    r = subprocess.run([os.path.join(bin_dir, "tessera"), "eval", "-q", "-m", model, "--device", device,
                        "--tokens", "1", "-o", os.path.join(scratch, "probe.npy")], capture_output=True, text=True)
    if r.returncode != 0 and ("is unavailable" in r.stderr or "no device '" in r.stderr):
        return r.stderr.strip()
    return None


def bad_hf_folder_problems(bin_dir, scratch, device, tokens, cases):
    """Each case (name, write, weights, edit_t, edit_cfg, want): write(path, weights) makes a Hugging Face folder
    from a copy of |weights| that edit_t (if any) changed, then edit_cfg (if any) changes its config.json; `tessera
    eval` of |tokens| on it must fail naming every string of |want| and the folder. Returns the problems."""
    import json
    import shutil
    problems = []
    for name, write, weights, edit_t, edit_cfg, want in cases:
        path = os.path.join(scratch, "bad-hf-" + name.replace(" ", "-"))
        shutil.rmtree(path, ignore_errors=True)
        ts = dict(weights)
        if edit_t:
            edit_t(ts)
        write(path, ts)
        if edit_cfg:
            with open(os.path.join(path, "config.json")) as f:
                cfg = json.load(f)
            edit_cfg(cfg)
            with open(os.path.join(path, "config.json"), "w") as f:
                json.dump(cfg, f)
        r = subprocess.run([os.path.join(bin_dir, "tessera"), "eval", "-q", "-m", path, "--device", device,
                            "--tokens", tokens, "-o", os.path.join(scratch, "bad.npy")], capture_output=True, text=True)
        msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        print(f"{name}: exit {r.returncode}: {msg}")
        if r.returncode == 0 or not all(w in r.stderr for w in want + [os.path.basename(path)]):
            problems.append(f"{name}: expected a failure naming {want} and the folder, got exit {r.returncode}: {msg}")
    return problems


def convert_refusal_problems(bin_dir, scratch, write):
    """`tessera convert` of the folder write(path) makes must refuse ("cannot be written as GGUF"), naming the
    folder: a family whose GGUF keys Tessera does not write. Returns the problems."""
    path = os.path.join(scratch, "hf-convert")
    write(path)
    r = subprocess.run([os.path.join(bin_dir, "tessera"), "convert", "-q", path, os.path.join(scratch, "x.gguf")],
                       capture_output=True, text=True)
    print(f"convert: exit {r.returncode}: {r.stderr.strip()}")
    if r.returncode == 0 or "cannot be written as GGUF" not in r.stderr or "hf-convert" not in r.stderr:
        return [f"convert: expected a refusal naming the folder, got exit {r.returncode}: {r.stderr.strip()}"]
    return []


def compare(name, ours, ref, tol, positions=None):
    """|positions| (default: all) restricts both checks to those rows (compare_numpy_moe.py)."""
    if ours.shape != ref.shape:
        return [f"{name}: shape {ours.shape} != reference {ref.shape}"]
    if not np.all(np.isfinite(ours)):
        return [f"{name}: non-finite logits"]
    positions = list(range(ref.shape[0])) if positions is None else list(positions)
    ours, ref = ours[positions], ref[positions]
    nrmse = float(np.sqrt(np.sum((ours - ref) ** 2) / np.sum(ref ** 2)))
    failures = []
    checked = agree = 0
    for t in range(ref.shape[0]):
        top2 = np.sort(ref[t])[-2:]
        margin = top2[1] - top2[0]
        if margin > 2 * tol * np.sqrt(np.mean(ref[t] ** 2)):
            checked += 1
            if int(np.argmax(ours[t])) == int(np.argmax(ref[t])):
                agree += 1
            else:
                failures.append(f"{name}: argmax differs at position {positions[t]} (ours {int(np.argmax(ours[t]))}, "
                                f"reference {int(np.argmax(ref[t]))}, margin {margin:.4f})")
    print(f"{name:36s} nrmse {nrmse:.3e} (tol {tol:g})  argmax agrees at {agree}/{checked} decisive positions")
    if nrmse > tol:
        failures.append(f"{name}: nrmse {nrmse:.3e} > tolerance {tol:g}")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("scratch")
    ap.add_argument("models_dir")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    os.makedirs(args.scratch, exist_ok=True)
    subprocess.run([os.path.join(args.bin_dir, "make_tiny_model"), "--all", args.scratch], check=True,
                   stdout=subprocess.DEVNULL)
    why = device_unusable(args.bin_dir, os.path.join(args.scratch, "tiny-llama-f32.gguf"), args.device, args.scratch)
    if why:
        print(f"SKIP: [hardware] {why}")  # a device that is absent: the one skip CI allows
        sys.exit(77)
    rng = np.random.default_rng(1234)
    failures = []
    for arch in ("llama", "qwen3"):
        ids = [int(x) for x in rng.integers(0, 256, N_TOKENS)]
        for dtype, tol in TOL.items():
            path = os.path.join(args.scratch, f"tiny-{arch}-{dtype}.gguf")
            ref = numpy_llama.forward(numpy_llama.Model(path), ids)
            ours = tessera_logits(args.bin_dir, path, ids, args.device, args.scratch)
            failures += compare(f"tiny {arch} {dtype}", ours, ref, tol)
    smol = os.path.join(args.models_dir, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if os.path.exists(smol):
        text = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
                "combined movable metal type, oil-based ink and a wooden screw press. Within fifty years, "
                "printing shops had spread across Europe, and books became cheaper. Scholars could compare "
                "identical copies of a text for the first time, which changed how knowledge was checked, "
                "argued over and passed on to the next generation of readers and writers.")
        tok = subprocess.run([os.path.join(args.bin_dir, "tessera"), "tokenize", "-q", "-m", smol, "--format", "csv",
                              "-p", text], check=True, capture_output=True, text=True).stdout
        ids = [int(x) for x in tok.strip().split(",")][:N_TOKENS]
        assert len(ids) == N_TOKENS, f"only {len(ids)} tokens"
        ref = numpy_llama.forward(numpy_llama.Model(smol), ids)
        ours = tessera_logits(args.bin_dir, smol, ids, args.device, args.scratch)
        failures += compare("SmolLM2-135M q4_1", ours, ref, TOL["q4_1"])
    else:
        print(f"SKIP SmolLM2: {smol} not found (run .ci/fetch-model)")
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
