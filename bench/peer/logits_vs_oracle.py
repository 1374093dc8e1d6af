#!/usr/bin/env python3
"""How close Tessera's and llama.cpp's logits are to an exact (float64) forward pass of the model.

Greedy text equality between two engines that both round activations to 8 bits says little on a
small model with many near-ties (docs/gemma3.md): each engine's rounding flips a different set of
them. This script measures what that comparison stands in for. On one token sequence (the start
of a text, BOS first) it takes the logits of every position from
  - the float64 oracle (a module with Model(path) and forward(model, ids), as
    tests/python/numpy_gemma3.py and numpy_llama.py are; written from the model's definition),
  - `tessera eval` on each device asked for (cpu, vulkan, ...),
  - llama.cpp, through llama-cpp-python's ctypes bindings over the peer build's libllama
    (logits_all; the peer's own Python environment, see --peer-python),
and prints, per engine against the oracle: mean KL(oracle || engine) of the next-token
distributions, top-1 agreement, the normalised RMS error of the logits (sqrt(sum err^2 /
sum ref^2) over all positions, as tests/model/compare_numpy.py), and the oracle's margin at every
position where the engine's argmax differs from the oracle's. Both engines keep their default f16
KV cache. With --expect-closer, exits 1 unless Tessera's CPU device is at least as close to the
oracle as llama.cpp by mean KL.

Usage: logits_vs_oracle.py PEER_DIR TESSERA_BIN MODEL --oracle numpy_gemma3.py [--text F]
                           [--tokens N] [--device cpu --device vulkan] [--peer-python PY]
                           [--expect-closer]
PEER_DIR is what /work/shared/peer/llama-cpp.sh prints (build/bin, or bin/, with libllama.so, and
src/ with the llama-cpp-python sources). --peer-python: a Python with numpy, diskcache, typing_extensions and
jinja2 (llama-cpp-python's imports); default ~/.cache/tessera-peer-py/bin/python, created with
those packages when missing.
"""
import argparse
import glob
import importlib.util
import os
import subprocess
import sys
import tempfile

import numpy as np

# Runs in the peer's Python: libllama's logits for every position of the given ids.
PEER_SCRIPT = r"""
import sys, numpy as np, llama_cpp
model, ids, out, threads = sys.argv[1], [int(t) for t in sys.argv[2].split(",")], sys.argv[3], int(sys.argv[4])
llm = llama_cpp.Llama(model_path=model, n_ctx=len(ids) + 8, n_batch=512, n_threads=threads, logits_all=True,
                      verbose=False)
llm.eval(ids)
np.save(out, np.asarray(llm.scores[: len(ids)], dtype=np.float32))
"""


def peer_python(path):
    if os.path.exists(path):
        return path
    venv = os.path.dirname(os.path.dirname(path))
    subprocess.run(["python3", "-m", "venv", venv], check=True)
    subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", "numpy", "diskcache", "typing_extensions", "jinja2"],
                   check=True)
    return path


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def compare(name, ref, got):
    lp_ref, lp_got = log_softmax(ref), log_softmax(got)
    kl = (np.exp(lp_ref) * (lp_ref - lp_got)).sum(axis=-1)
    top_ref, top_got = ref.argmax(axis=-1), got.argmax(axis=-1)
    err = got.astype(np.float64) - ref
    nrmse = float(np.sqrt(np.sum(err ** 2) / np.sum(ref ** 2)))
    flips = np.nonzero(top_ref != top_got)[0]
    margins = [float(ref[i, top_ref[i]] - ref[i, top_got[i]]) for i in flips]
    print(f"{name:<14} KL mean {kl.mean():.3e} (p99 {np.quantile(kl, 0.99):.3e}, max {kl.max():.3e}), "
          f"top-1 {100.0 * (1 - len(flips) / len(ref)):.2f} %, logit NRMSE {nrmse:.3e}, "
          f"max |dlogit| {np.abs(err).max():.3f}")
    if margins:
        print(f"{'':<14} {len(flips)} argmax flips; oracle margin there: median {np.median(margins):.4f}, "
              f"max {max(margins):.4f}")
    return kl.mean(), len(flips)


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("peer_dir")
    ap.add_argument("bin")
    ap.add_argument("model")
    ap.add_argument("--oracle", required=True, help="tests/python/numpy_<arch>.py")
    ap.add_argument("--text", default=os.path.join(root, "tests", "data", "text", "alice_ch1.txt"))
    ap.add_argument("--tokens", type=int, default=256, help="positions compared (BOS first)")
    ap.add_argument("--device", action="append", help="tessera devices (repeatable; default cpu)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--peer-python", default=os.path.expanduser("~/.cache/tessera-peer-py/bin/python"))
    ap.add_argument("--expect-closer", action="store_true",
                    help="exit 1 unless tessera cpu's mean KL to the oracle is at most llama.cpp's")
    a = ap.parse_args()
    devices = a.device or ["cpu"]

    out = subprocess.run([os.path.join(a.bin, "tessera"), "tokenize", "-q", "-m", a.model, "--format", "csv", "-f", a.text],
                         capture_output=True, check=True, text=True).stdout
    ids = [int(t) for t in out.strip().split(",")][: a.tokens]
    csv = ",".join(str(t) for t in ids)
    print(f"model {os.path.basename(a.model)}, {len(ids)} positions of {os.path.basename(a.text)} (BOS first)")

    spec = importlib.util.spec_from_file_location("oracle", a.oracle)
    oracle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(oracle)
    ref = oracle.forward(oracle.Model(a.model), np.array(ids))

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dev in devices:
            path = os.path.join(tmp, f"tessera-{dev.replace(':', '_')}.npy")
            subprocess.run([os.path.join(a.bin, "tessera"), "eval", "-q", "-m", a.model, "-d", dev, "-t", csv, "-o", path],
                           check=True)
            results[f"tessera {dev}"] = np.load(path)
        src = glob.glob(os.path.join(a.peer_dir, "src", "llama_cpp_python-*"))
        lib = os.path.join(a.peer_dir, "build", "bin")
        if not os.path.isdir(lib):
            lib = os.path.join(a.peer_dir, "bin")
        if not src or not os.path.exists(os.path.join(lib, "libllama.so")):
            sys.exit(f"{a.peer_dir}: no llama-cpp-python sources in src/ or no libllama.so in build/bin or bin")
        env = dict(os.environ, LLAMA_CPP_LIB_PATH=lib, PYTHONPATH=src[0])
        path = os.path.join(tmp, "llama.npy")
        subprocess.run([peer_python(a.peer_python), "-c", PEER_SCRIPT, a.model, csv, path, str(a.threads)], env=env,
                       check=True)
        results["llama.cpp"] = np.load(path)

    kl = {}
    for name, got in results.items():
        if got.shape != ref.shape:
            sys.exit(f"{name}: logits of shape {got.shape}, the oracle's {ref.shape}")
        kl[name], _ = compare(name, ref, got)
    if a.expect_closer and "tessera cpu" in kl and kl["tessera cpu"] > kl["llama.cpp"]:
        print(f"FAIL: tessera cpu's mean KL to the oracle {kl['tessera cpu']:.3e} exceeds llama.cpp's {kl['llama.cpp']:.3e}")
        sys.exit(1)


if __name__ == "__main__":
    main()
