#!/usr/bin/env bash
# Gemma 3 270M in Tessera against llama.cpp (the peer), on this machine, CPU only:
#   1. greedy text of 3 prompts: `tessera run --raw --temp 0 -n N` vs `llama-simple -n N`
#      (both add BOS and parse special tokens; llama-simple echoes the prompt first);
#   2. token ids of llama.cpp's SentencePiece vocab-test inputs and a few more texts:
#      `tessera tokenize` vs `llama-tokenize --ids` (tokenize_vs_llama_cpp.py);
#   3. perplexity of tests/data/text/alice_ch{1,2}.txt (Lewis Carroll, public domain) at the same
#      windows: `tessera perplexity --window W` vs `llama-perplexity -c W` (both score the second
#      half of non-overlapping windows that start with BOS).
# Usage: gemma3_vs_llama_cpp.sh PEER_DIR [TESSERA_BIN_DIR] [N_TOKENS]
#   PEER_DIR: what /work/shared/peer/llama-cpp.sh prints (bins in build/bin, vocab tests in models/).
# Prints a report; exits 1 when a greedy text or a tokenisation differs, or a perplexity differs
# by more than 0.5 %.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# PEER_DIR as llama-cpp.sh prints it (build/bin, models/) or a folder with bin/ directly.
peer="$1/build/bin"
[ -d "$peer" ] || peer="$1/bin"
py="${TESSERA_PYTHON:-$root/.venv/bin/python}"
[ -x "$py" ] || py=python3
bin="${2:-$root/build/bin}"
n="${3:-24}"
model="$root/models-cache/gemma-3-270m-q4_k_m.gguf"
[ -s "$model" ] || "$root/.ci/fetch-model"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
status=0

prompts=("The capital of France is" "def fibonacci(n):" "Once upon a time, in a small village by the sea,")
echo "== greedy tokens, $n per prompt (llama-simple vs tessera run --temp 0; float64 oracle where they part)"
"$py" "$root/bench/peer/greedy_vs_llama_cpp.py" "$peer" "$bin" "$model" "$n" --oracle "$root/tests/python/numpy_gemma3.py" \
  "${prompts[@]}" || status=1

echo "== tokenizer"
"$py" "$root/bench/peer/tokenize_vs_llama_cpp.py" "$1" "$bin" "$model" || status=1

echo "== perplexity"
cat "$root/tests/data/text/alice_ch1.txt" "$root/tests/data/text/alice_ch2.txt" >"$tmp/alice.txt"
for w in 512 1024; do
  peer_ppl="$("$peer/llama-perplexity" -m "$model" -f "$tmp/alice.txt" -c "$w" -b "$w" -t "$(nproc)" 2>&1 |
              sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p')"
  ours_ppl="$("$bin/tessera" perplexity -q -m "$model" -d cpu -f "$tmp/alice.txt" --window "$w" | sed -n 's/^perplexity \([0-9.]*\) .*/\1/p')"
  rel="$(python3 -c "print(f'{100 * ($ours_ppl / $peer_ppl - 1):+.3f}')")"
  echo "window $w: llama.cpp $peer_ppl, tessera $ours_ppl ($rel %)"
  python3 -c "import sys; sys.exit(0 if abs($ours_ppl / $peer_ppl - 1) <= 0.005 else 1)" || status=1
done
exit $status
