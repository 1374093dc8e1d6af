#!/usr/bin/env python3
"""Greedy continuations of prompts in Tessera vs llama.cpp's llama-simple, compared token by token.
Both add BOS and run greedy; llama-simple echoes the prompt (with "<bos>") before its continuation.
Where they part, an optional float64 oracle of the architecture (tests/python/numpy_*.py, written
from the model's definition) scores the shared prefix, so the report says which engine picked the
exact model's argmax and by what logit margin: a near-tie that 8-bit activation rounding flips is
not a bug, a wide margin is.
Usage: greedy_vs_llama_cpp.py PEER_BIN TESSERA_BIN MODEL N [--oracle numpy_x.py] [--device D]
                              [--tie T] [--min M] [--prompts-file F] [PROMPT...]
Both engines generate N + 1 tokens and the first N are compared (the last of a cut continuation
may re-tokenise differently); a continuation that stops early (EOS) agrees only if the other stops
at the same token.
Prints one line per prompt and a count. Exit status 1: without --oracle, when fewer than --min
tokens (default 16) agree for a prompt; with it, when at a parting Tessera's token is more than
--tie (default 0.5) below the oracle's argmax logit, i.e. Tessera left the exact model's choice
where it was not a near-tie (both engines' 8-bit activation rounding moves logits by ~0.1;
bench/peer/logits_vs_oracle.py measures it).
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
    ap.add_argument("prompts", nargs="*")
    ap.add_argument("--oracle")
    ap.add_argument("--min", type=int, default=16)
    ap.add_argument("--tie", type=float, default=0.5, help="oracle logit gap below which a parting is a near-tie")
    ap.add_argument("--device", default="cpu", help="tessera's device (cpu, vulkan, ...)")
    ap.add_argument("--prompts-file", help="more prompts, one per line")
    a = ap.parse_args()
    prompts = list(a.prompts)
    if a.prompts_file:
        with open(a.prompts_file, encoding="utf-8") as f:
            prompts += [line.rstrip("\r\n") for line in f if line.strip()]
    if not prompts:
        ap.error("no prompts (PROMPT... or --prompts-file)")
    status = 0
    agreeing = 0
    partings = []  # (whose token the oracle picked, oracle logit gap) where the engines part
    for p in prompts:
        peer = subprocess.run([os.path.join(a.peer_bin, "llama-simple"), "-m", a.model, "-n", str(a.n + 1), p],
                              capture_output=True, text=True, check=True).stdout
        peer = peer.removeprefix("<bos>")
        ours = subprocess.run([os.path.join(a.bin, "tessera"), "run", "-q", "-m", a.model, "-d", a.device, "--raw", "--temp",
                               "0", "-n", str(a.n + 1), "-p", p], capture_output=True, text=True, check=True).stdout
        ours = p + ours.rstrip("\n")
        n_prompt = len(ids(a.bin, a.model, p))
        pi, oi = ids(a.bin, a.model, peer.rstrip("\n")), ids(a.bin, a.model, ours)
        same = 0
        while same < a.n and n_prompt + same < min(len(pi), len(oi)) and pi[n_prompt + same] == oi[n_prompt + same]:
            same += 1
        # Equal for n tokens, or both stopped (EOS) at the same token.
        if same >= a.n or len(pi) == len(oi) == n_prompt + same:
            print(f"same {same} tokens: {p!r}")
            agreeing += 1
            continue
        if n_prompt + same >= min(len(pi), len(oi)):
            who_stopped = "llama.cpp" if len(pi) <= n_prompt + same else "tessera"
            print(f"{same} tokens agree for {p!r}, then {who_stopped} stops (EOS) and the other goes on")
            status = 1
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
            # Tessera's token is wrong only if the exact model ranks it clearly below its argmax.
            gap = float(logits[best]) - lo
            partings.append((who, gap))
            if gap > a.tie:
                line += f" -- tessera's token is {gap:.4f} below the oracle's argmax: NOT a near-tie"
                status = 1
        elif same < a.min:
            status = 1
        print(line)
        if same >= a.min:
            agreeing += 1
    print(f"{agreeing} of {len(prompts)} prompts agree for at least {a.min} tokens (tessera on {a.device})")
    if partings:
        sides = {w: sum(1 for x, _ in partings if x == w) for w in ("tessera", "llama.cpp", "neither")}
        print(f"at the {len(partings)} partings the float64 oracle picks tessera's token {sides['tessera']} times, "
              f"llama.cpp's {sides['llama.cpp']}, neither {sides['neither']}; largest gap below the argmax for tessera's token {max(g for _, g in partings):.4f}")
    sys.exit(status)


if __name__ == "__main__":
    main()
