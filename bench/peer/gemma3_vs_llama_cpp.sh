#!/usr/bin/env bash
# Gemma 3 270M in Tessera against llama.cpp (the peer), on this machine, CPU only:
#   1. greedy text of the 20 prompts in gemma3_prompts.txt (fixed before any was run), on the CPU
#      and, where it is usable, the Vulkan device:
#      `tessera run --raw --temp 0 -n N` vs `llama-simple -n N` (both add BOS and parse special
#      tokens; llama-simple echoes the prompt first); where they part, the float64 oracle
#      (tests/python/numpy_gemma3.py) says whose token the exact model prefers and by how much;
#   2. logits of 256 positions of alice_ch1.txt against the oracle, for Tessera's CPU and Vulkan
#      devices and for llama.cpp (logits_vs_oracle.py: KL, top-1 agreement, logit NRMSE);
#   3. token ids of llama.cpp's SentencePiece vocab-test inputs and a few more texts:
#      `tessera tokenize` vs `llama-tokenize --ids` (tokenize_vs_llama_cpp.py);
#   4. perplexity of tests/data/text/alice_ch{1,2}.txt (Lewis Carroll, public domain) at the same
#      windows: `tessera perplexity --window W` vs `llama-perplexity -c W` (both score the second
#      half of non-overlapping windows that start with BOS).
# Usage: gemma3_vs_llama_cpp.sh PEER_DIR [TESSERA_BIN_DIR] [N_TOKENS]
#   PEER_DIR: what /work/shared/peer/llama-cpp.sh prints (bins in build/bin, vocab tests in models/,
#   llama-cpp-python's sources in src/ for step 2).
# Prints a report; exits 1 when at a greedy parting Tessera's token is not a near-tie of the exact
# model's choice (more than 0.5 logits below it), Tessera's CPU logits are further from the oracle
# than llama.cpp's (mean KL), a tokenisation differs, or a perplexity differs by more than 0.5 %. Greedy texts of two engines that both round activations to 8 bits part at
# near-ties on many prompts (docs/gemma3.md); step 2 measures which engine is closer to the model.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# PEER_DIR as llama-cpp.sh prints it (build/bin, models/) or a folder with bin/ directly.
peer="$1/build/bin"
[ -d "$peer" ] || peer="$1/bin"
py="${TESSERA_PYTHON:-$root/.venv/bin/python}"
[ -x "$py" ] || py=python3
bin="${2:-$root/build/bin}"
n="${3:-16}"
model="$root/models-cache/gemma-3-270m-q4_k_m.gguf"
[ -s "$model" ] || "$root/.ci/fetch-model"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
status=0

# Tessera's devices: the CPU, and Vulkan where `tessera info` lists a usable vulkan:0.
devices=(cpu)
info="$("$bin/tessera" info 2>/dev/null || true)"
grep -Eq '^ *vulkan:0 ' <<<"$info" && ! grep -Eq '^ *vulkan:0 +unavailable' <<<"$info" && devices+=(vulkan)

for d in "${devices[@]}"; do
  echo "== greedy tokens on $d, $n per prompt (llama-simple vs tessera run --temp 0; float64 oracle where they part)"
  "$py" "$root/bench/peer/greedy_vs_llama_cpp.py" "$peer" "$bin" "$model" "$n" --device "$d" \
    --oracle "$root/tests/python/numpy_gemma3.py" --prompts-file "$root/bench/peer/gemma3_prompts.txt" || status=1
done

echo "== logits against the float64 oracle (256 positions of alice_ch1.txt)"
"$py" "$root/bench/peer/logits_vs_oracle.py" "$1" "$bin" "$model" --oracle "$root/tests/python/numpy_gemma3.py" \
  --tokens 256 "${devices[@]/#/--device=}" --expect-closer || status=1

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
