#!/usr/bin/env python3
"""Greedy continuations of the tiny byte-vocabulary Phi-3 (tests/python/make_tiny_phi3.py) in
Tessera vs llama.cpp's llama-simple, compared token by token.

The tiny model's vocabulary is the 256 bytes plus control tokens and one merged pair, and random
weights emit any byte, often not UTF-8, so text will not do: llama-simple's raw stdout bytes (each
piece as it is) are matched against the pieces of Tessera's token ids (`tessera run --ids`). Both
add BOS (<|endoftext|>, which llama-simple echoes with the prompt), decode greedily, and stop at
an end-of-generation control token. Where they part, the float64 oracle
(tests/python/numpy_phi3.py) scores the shared prefix and the report gives both tokens' logits:
random weights make near-ties common.
Usage: phi3_greedy_vs_llama_cpp.py PEER_BIN TESSERA_BIN MODEL N PROMPT...
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))
import numpy_phi3  # noqa: E402

BOS_TEXT = b"<|endoftext|>"
BOS = 256
# Pieces that are not one byte: the merged pair (token 260), and byte 0, which llama-simple prints
# with printf("%s") and so not at all. Control tokens print nothing there; <|end|> (259) and
# <|endoftext|> (256) end generation in both engines, Tessera listing the last one among its ids.
PIECES = {260: b"\x01\x02", 0: b""}
PIECE_IDS = {b"\x01\x02": 260}
EOG = {256, 259}


def main():
    peer_bin, bin_dir, model, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    oracle = numpy_phi3.Phi3(model)
    total_same = total = 0
    for p in sys.argv[5:]:
        pb = p.encode()
        peer = subprocess.run([os.path.join(peer_bin, "llama-simple"), "-m", model, "-n", str(n), p],
                              capture_output=True, check=True).stdout
        peer = peer.removeprefix(BOS_TEXT)
        assert peer.startswith(pb), f"llama-simple did not echo the prompt: {peer[:40]!r}"
        peer = peer[len(pb):].rstrip(b"\n")
        r = subprocess.run([os.path.join(bin_dir, "tessera"), "run", "-q", "-m", model, "-d", "cpu", "--raw", "--temp", "0",
                            "--ids", "-n", str(n), "-p", p], capture_output=True, check=True)
        line = [x for x in r.stderr.decode().splitlines() if x.startswith("ids: ")][0]
        ours = [int(x) for x in line[5:].split(",") if x]
        # Walk Tessera's tokens through llama.cpp's bytes: the first token whose piece differs.
        same, at = 0, 0
        while same < len(ours):
            t = ours[same]
            if t in EOG and at == len(peer):  # both stopped here
                same += 1
                break
            piece = PIECES.get(t, bytes([t]) if t < 256 else None)
            if piece is None or peer[at:at + len(piece)] != piece:
                break
            same, at = same + 1, at + len(piece)
        total_same += same
        total += n
        if same >= n or (same == len(ours) and at == len(peer)):
            stop = " (both stopped at an end-of-generation token)" if same < n else ""
            print(f"{p!r}: {same}/{n} tokens identical{stop}")
            total_same += n - same  # nothing left to differ

            continue
        ctx = [BOS] + list(pb) + ours[:same]
        row = numpy_phi3.forward(oracle, ctx)[-1]
        a = (PIECE_IDS.get(peer[at:at + 2]) or peer[at]) if at < len(peer) else None
        b = ours[same] if same < len(ours) else None
        best = int(row.argmax())
        la = f"{row[a]:.4f}" if a is not None else "(stopped)"
        lb = f"{row[b]:.4f}" if b is not None else "(stopped)"
        margin = f"{abs(row[a] - row[b]):.4f}" if a is not None and b is not None else "-"
        print(f"{p!r}: {same}/{n} tokens identical, then llama.cpp {a} vs tessera {b}; oracle logits {la} vs {lb} "
              f"(margin {margin}; oracle argmax {best}, logit {row[best]:.4f})")
    print(f"total: {total_same}/{total} tokens identical before the first parting")


if __name__ == "__main__":
    main()
