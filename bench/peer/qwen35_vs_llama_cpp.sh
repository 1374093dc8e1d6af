#!/usr/bin/env bash
# Qwen3.5 at a real model's shapes, Tessera against llama.cpp (the peer) on the CPU: a random-
# weight Qwen3.5-2B-shaped model (tests/model/qwen35/make_qwen35.py --gguf-only: 24 layers, hidden
# 2048, 8 q / 2 kv heads of 256, FFN 6144, Gated DeltaNet heads 16/16 x 128, vocabulary 248320,
# tied; f16, ~3.8 GB) quantised by the peer's llama-quantize to Q4_K_M (~1.2 GB), then rounds that
# alternate which engine goes first: `tessera-bench model` (pp128 + tg64, and pp512) and
# `llama-bench -p 128,512 -n 64`, both on 2 threads. The models stay in CACHE_DIR (delete to remake).
# Usage: qwen35_vs_llama_cpp.sh PEER_DIR [TESSERA_BIN_DIR] [ROUNDS] [CACHE_DIR]
#   PEER_DIR: what /work/shared/peer/llama-cpp.sh prints (bins in build/bin), or a folder with bin/.
# A bench script, not a CI test: it prints the rows; the medians go to docs/results by hand.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
peer="$1/build/bin"
[ -d "$peer" ] || peer="$1/bin"
[ -d "$peer" ] || peer="$1"
export LD_LIBRARY_PATH="$peer${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
py="${TESSERA_PYTHON:-$root/.venv/bin/python}"
[ -x "$py" ] || py=python3
bin="${2:-$root/build/bin}"
rounds="${3:-2}"
cache="${4:-$HOME/.cache/tessera-compare/qwen35-2b}"
mkdir -p "$cache"
f16="$cache/tiny-qwen35-nomtp-f16.gguf"
model="$cache/qwen35-2b-q4_k_m.gguf"
if [ ! -f "$f16" ]; then
  echo "making $f16 (Qwen3.5-2B shape, random weights)"
  "$py" "$root/tests/model/qwen35/make_qwen35.py" --out "$cache" --gguf-only --outtype f16 --layers 24 --hidden 2048 \
    --intermediate 6144 --heads 8 --kv-heads 2 --head-dim 256 --mrope-section 11,11,10 --linear-key-heads 16 \
    --linear-value-heads 16 --linear-head-dim 128 --vocab 248320 --no-vision --no-mtp
fi
if [ ! -f "$model" ]; then
  echo "quantising $model (llama-quantize Q4_K_M)"
  "$peer/llama-quantize" "$f16" "$model.part" Q4_K_M 2 >/dev/null 2>&1
  mv "$model.part" "$model"
fi
"$bin/tessera" info 2>/dev/null | grep -A2 "^  cpu" || true
tessera_rows() {
  echo "tessera   threads conc  prefill t/s  decode t/s ... (pp128 + tg64, then pp512)"
  "$bin/tessera-bench" model "$model" --threads 2 --concurrency 1 --prompt 128 --decode 64 --repeats 2 | grep -A1 "prefill t/s" | tail -1
  "$bin/tessera-bench" model "$model" --threads 2 --concurrency 1 --prompt 512 --decode 1 --repeats 2 | grep -A1 "prefill t/s" | tail -1
}
llama_rows() {
  echo "llama.cpp"
  "$peer/llama-bench" -m "$model" -t 2 -p 128,512 -n 64 -r 2 -o md 2>/dev/null | grep -E "pp|tg"
}
for r in $(seq 1 "$rounds"); do
  echo "== round $r ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg))"
  if [ $((r % 2)) = 1 ]; then tessera_rows; llama_rows; else llama_rows; tessera_rows; fi
done
