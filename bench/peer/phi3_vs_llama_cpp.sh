#!/usr/bin/env bash
# A tiny random-weight Phi-3 (tests/python/make_tiny_phi3.py: fused attn_qkv and ffn_up, GQA,
# byte vocabulary) in Tessera against llama.cpp (the peer), CPU only, f32 and q8_0:
#   1. perplexity of tests/data/text/alice_ch1.txt (public domain) at the same windows:
#      `tessera perplexity --window W` vs `llama-perplexity -c W` (both score the second half of
#      non-overlapping windows that start with BOS);
#   2. greedy tokens of 3 prompts: `tessera run --raw --temp 0 -n N` vs `llama-simple -n N`
#      (phi3_greedy_vs_llama_cpp.py; the float64 oracle scores any parting).
# The peer models have no sliding window: llama.cpp disables Phi's (Tessera applies it, as HF).
# Usage: phi3_vs_llama_cpp.sh PEER_DIR [TESSERA_BIN_DIR] [N_TOKENS]
#   PEER_DIR: what /work/shared/peer/llama-cpp.sh prints (bins in build/bin), or a folder with bin/.
# A bench script, not a CI test: it prints a report and exits 1 when a perplexity differs by more
# than 0.5 %.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
peer="$1/build/bin"
[ -d "$peer" ] || peer="$1/bin"
[ -d "$peer" ] || peer="$1"
export LD_LIBRARY_PATH="$peer${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
py="${TESSERA_PYTHON:-$root/.venv/bin/python}"
[ -x "$py" ] || py=python3
bin="${2:-$root/build/bin}"
n="${3:-32}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$py" "$root/tests/python/make_tiny_phi3.py" "$tmp"
status=0
for dt in f32 q8_0; do
  model="$tmp/tiny-phi3-peer-$dt.gguf"
  echo "== $dt: perplexity, alice_ch1.txt"
  for w in 256 1024; do
    # llama-perplexity on this build sometimes dies before its last lines (output lost with it):
    # up to 3 tries for the "Final estimate" line.
    peer_ppl=""
    for try in 1 2 3; do
      "$peer/llama-perplexity" -m "$model" -f "$root/tests/data/text/alice_ch1.txt" -c "$w" -b "$w" -t "$(nproc)" >"$tmp/ppl.log" 2>&1 || true
      peer_ppl="$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$tmp/ppl.log")"
      [ -z "$peer_ppl" ] || break
      echo "(llama-perplexity try $try ended without its final estimate)"
    done
    [ -n "$peer_ppl" ] || { status=1; continue; }
    ours_ppl="$("$bin/tessera" perplexity -q -m "$model" -d cpu -f "$root/tests/data/text/alice_ch1.txt" --window "$w" |
                sed -n 's/^perplexity \([0-9.]*\) .*/\1/p')"
    rel="$(python3 -c "print(f'{100 * ($ours_ppl / $peer_ppl - 1):+.4f}')")"
    echo "window $w: llama.cpp $peer_ppl, tessera $ours_ppl ($rel %)"
    python3 -c "import sys; sys.exit(0 if abs($ours_ppl / $peer_ppl - 1) <= 0.005 else 1)" || status=1
  done
  echo "== $dt: greedy tokens, $n per prompt"
  "$py" "$root/bench/peer/phi3_greedy_vs_llama_cpp.py" "$peer" "$bin" "$model" "$n" \
    "The capital of France is" "def fibonacci(n):" "Once upon a time, in a small village by the sea,"
done
exit $status
