#!/usr/bin/env python3
"""Greedy continuations of prompts in Tessera vs llama.cpp's llama-simple, compared token by token.
Both add BOS and run greedy; llama-simple echoes the prompt (with "<bos>") before its continuation.
Where they part, an optional float64 oracle of the architecture (tests/python/numpy_*.py, written
from the model's definition) scores the shared prefix, so the report says which engine picked the
exact model's argmax and by what logit margin: a near-tie that 8-bit activation rounding flips is
not a bug, a wide margin is.
Usage: greedy_vs_llama_cpp.py PEER_BIN TESSERA_BIN MODEL N [--oracle numpy_x.py] PROMPT...
Prints one line per prompt; exits 1 when fewer than --min tokens (default 16) agree for a prompt.
"""
import argparse
import os
import subprocess
import sys
import tempfile


def ids(bin_dir, model, text):
    out = subprocess.run([os.path.join(bin_dir, "tessera"), "tokenize", "-q", "-m", model, "--format", "csv", "-p", text],
                         capture_output=True, check=True, text=True)
    return [int(x) for x in out.stdout.strip().split(",") if x.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("peer_bin")
    ap.add_argument("bin")
    ap.add_argument("model")
    ap.add_argument("n", type=int)
    ap.add_argument("prompts", nargs="+")
    ap.add_argument("--oracle")
    ap.add_argument("--min", type=int, default=16)
    a = ap.parse_args()
    status = 0
    for p in a.prompts:
        peer = subprocess.run([os.path.join(a.peer_bin, "llama-simple"), "-m", a.model, "-n", str(a.n), p],
                              capture_output=True, text=True, check=True).stdout
        peer = peer.removeprefix("<bos>")
        ours = subprocess.run([os.path.join(a.bin, "tessera"), "run", "-q", "-m", a.model, "-d", "cpu", "--raw", "--temp",
                               "0", "-n", str(a.n), "-p", p], capture_output=True, text=True, check=True).stdout
        ours = p + ours.rstrip("\n")
        n_prompt = len(ids(a.bin, a.model, p))
        pi, oi = ids(a.bin, a.model, peer.rstrip("\n")), ids(a.bin, a.model, ours)
        same = 0
        while n_prompt + same < min(len(pi), len(oi)) and pi[n_prompt + same] == oi[n_prompt + same]:
            same += 1
        # The last token of a continuation cut at n may re-tokenise differently: n - 1 counts as all.
        if same >= min(a.n - 1, len(pi) - n_prompt, len(oi) - n_prompt):
            print(f"same {same} tokens: {p!r}")
            continue
        line = f"{same} tokens agree for {p!r}, then llama.cpp {pi[n_prompt + same]} vs tessera {oi[n_prompt + same]}"
        if a.oracle:
            prefix = ",".join(str(t) for t in oi[:n_prompt + same])
            with tempfile.TemporaryDirectory() as tmp:
                import numpy as np
                subprocess.run([sys.executable, a.oracle, a.model, "--tokens", prefix, "--out", os.path.join(tmp, "l.npy")],
                               capture_output=True, check=True)
                logits = np.load(os.path.join(tmp, "l.npy"))[-1]
            lp, lo = float(logits[pi[n_prompt + same]]), float(logits[oi[n_prompt + same]])
            best = int(np.argmax(logits))
            who = "tessera" if best == oi[n_prompt + same] else "llama.cpp" if best == pi[n_prompt + same] else "neither"
            line += f"; float64 oracle: argmax {best} ({who}), logits llama.cpp's {lp:.4f} vs tessera's {lo:.4f}"
        print(line)
        if same < a.min:
            status = 1
    sys.exit(status)


if __name__ == "__main__":
    main()
