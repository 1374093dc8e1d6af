#!/usr/bin/env python3
"""Token ids of a model's tokenizer in Tessera vs llama.cpp's llama-tokenize, on the inputs of
llama.cpp's SentencePiece vocab test (models/ggml-vocab-llama-spm.gguf.inp of the peer build:
spaces, newlines, tabs, CJK, emoji, accents, code) plus a few texts of our own.
Both without BOS and with special-token text left as text (as llama.cpp's vocab tests run).
Usage: tokenize_vs_llama_cpp.py PEER_DIR TESSERA_BIN_DIR MODEL.gguf
Prints each difference and the agreement count; exits 1 on any difference.
"""
import os
import subprocess
import sys


def peer_ids(peer, model, text):
    bin_dir = os.path.join(peer, "build", "bin")
    if not os.path.isdir(bin_dir):
        bin_dir = os.path.join(peer, "bin")
    out = subprocess.run([os.path.join(bin_dir, "llama-tokenize"), "-m", model, "--stdin", "--ids", "--no-bos",
                          "--no-parse-special", "--log-disable"], input=text.encode(), capture_output=True, check=True)
    line = out.stdout.decode().strip().splitlines()[-1]
    return [int(x) for x in line.strip("[]").split(",") if x.strip()]


def our_ids(bin_dir, model, text):
    out = subprocess.run([os.path.join(bin_dir, "tessera"), "tokenize", "-q", "-m", model, "--no-special", "--format",
                          "csv", "-p", text], capture_output=True, check=True, text=True)
    return [int(x) for x in out.stdout.strip().split(",") if x.strip()]


def main():
    peer, bin_dir, model = sys.argv[1:4]
    with open(os.path.join(peer, "models", "ggml-vocab-llama-spm.gguf.inp"), encoding="utf-8") as f:
        texts = f.read().split("\n__ggml_vocab_test__\n")
    texts += ["<start_of_turn>user\nHi<end_of_turn>\n", "a\n\n\nb    c\t\td", "The café costs 3.50€ — naïve?"]
    texts = [t for t in texts if t]
    same = 0
    for t in texts:
        want, got = peer_ids(peer, model, t), our_ids(bin_dir, model, t)
        if want == got:
            same += 1
        else:
            print(f"DIFFERENT {t!r}: llama.cpp {want}, tessera {got}")
    print(f"tokenizer: {same}/{len(texts)} texts give llama-tokenize's ids")
    sys.exit(0 if same == len(texts) else 1)


if __name__ == "__main__":
    main()
