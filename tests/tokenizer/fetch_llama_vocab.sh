#!/usr/bin/env bash
# Fetches llama.cpp's tokenizer test vectors (models/ggml-vocab-<family>.gguf with .inp/.out)
# from the llama-cpp-python sdist on PyPI into a cache outside the checkout, once, and prints
# the folder that holds them. Only the vocabulary files are unpacked; nothing is built.
# Usage: fetch_llama_vocab.sh [PYTHON]    Env: PEER_DIR (default ~/.cache/tessera-peer)
# Exit 0 with the folder on stdout; exit 3 when pip could not be reached or the download failed.
set -euo pipefail
ver=0.3.36
python=${1:-python3}
base=${PEER_DIR:-$HOME/.cache/tessera-peer}
dest=$base/llama-vocab-$ver
if ls "$dest"/ggml-vocab-*.gguf.out >/dev/null 2>&1; then echo "$dest"; exit 0; fi
# The peer build (shared/peer/llama-cpp.sh) unpacks the whole sdist to the same cache.
peer=$base/llama-cpp-python-$ver/src/llama_cpp_python-$ver/vendor/llama.cpp/models
if ls "$peer"/ggml-vocab-*.gguf.out >/dev/null 2>&1; then echo "$peer"; exit 0; fi
dl=$base/dl
sdist=$dl/llama_cpp_python-$ver.tar.gz
mkdir -p "$dl"
if [ ! -s "$sdist" ]; then
  if ! "$python" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$ver" -d "$dl" >&2; then
    echo "fetch_llama_vocab: pip download llama-cpp-python==$ver failed" >&2
    exit 3
  fi
fi
tmp=$(mktemp -d "$base/vocab.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tar xzf "$sdist" -C "$tmp" --wildcards "llama_cpp_python-$ver/vendor/llama.cpp/models/ggml-vocab-*"
rm -rf "$dest"
mv "$tmp/llama_cpp_python-$ver/vendor/llama.cpp/models" "$dest"
echo "$dest"
