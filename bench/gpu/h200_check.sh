#!/usr/bin/env bash
# The CUDA backend's checks on an H200 (issue 21), as one script for the device tool. Run
# bench/gpu/pack.sh here first; then two calls on one warm machine (each carries 64 MiB at most):
#   1. carry ["device-transfer/1"], command: true          (binaries, libraries, model part 0)
#   2. carry ["device-transfer/2"], command: bash bench/gpu/h200_check.sh $OUT
# (ignored paths a call does not name stay on a warm machine). $1 receives summary.txt and
# logs.tgz (every log; the tool brings back at most 8 files).
# Nothing here is a test of CI: CI never has a GPU.
set -uo pipefail
dest="${1:?usage: h200_check.sh OUTDIR}"
out=/tmp/h200-logs
rm -rf "$out" && mkdir -p "$out"
root="$(cd "$(dirname "$0")/../.." && pwd)"
pack=/tmp/tessera-pack
rm -rf "$pack" && mkdir -p "$pack" && tar xJf "$root/device-transfer/1/pack.txz" -C "$pack" || exit 1
bin="$pack/bin"
export LD_LIBRARY_PATH="$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
summary="$out/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
step() {  # step NAME TIMEOUT CMD...: runs CMD with its log in $out/NAME.log, records rc and seconds
  local name="$1" limit="$2"; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  say "$name: rc=$rc in $((SECONDS - t0)) s"
  return $rc
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >"$out/gpu.csv" 2>&1
step info 30 "$bin/tessera" info
# The model, reassembled from the two calls' parts.
model=/tmp/smollm2.gguf
cat "$root"/device-transfer/1/smollm2.part00 "$root"/device-transfer/2/smollm2.part01 >"$model" 2>/dev/null
if [ "$(sha256sum "$model" | cut -d' ' -f1)" != "$(cat "$root/device-transfer/1/smollm2.sha256" 2>/dev/null)" ]; then
  say "model: parts missing or corrupt; model steps skipped"; model=""
fi

# 1. Host-side unit tests, then the whole conformance suite on cuda:0 (every case).
TESSERA_CUDA_SIM=1 step unit_gpu 60 "$bin/unit_gpu" --gtest_brief=1
TESSERA_TEST_DEVICE=cuda:0 step conformance_cuda 240 "$bin/conformance" --gtest_brief=1 \
  --gtest_output="xml:$out/conformance_cuda.xml"
grep -E '^\[  (PASSED|FAILED)' "$out/conformance_cuda.log" | head -3 | tee -a "$summary"

# 2. SmolLM2 greedy on cuda:0 == the scalar reference device, 64 tokens, 3 prompts.
if [ -n "$model" ]; then
  i=0
  for p in "The capital of France is" "Write a haiku about the sea." "List three prime numbers."; do
    i=$((i + 1))
    "$bin/tessera" run -q -m "$model" -d cuda:0 --temp 0 -n 64 --ids -p "$p" >"$out/greedy_cuda_$i.txt" 2>"$out/greedy_cuda_$i.ids"
    "$bin/tessera" run -q -m "$model" -d reference --temp 0 -n 64 --ids -p "$p" >"$out/greedy_ref_$i.txt" 2>"$out/greedy_ref_$i.ids"
    if ! grep -q '^ids:' "$out/greedy_cuda_$i.ids"; then
      say "greedy prompt $i: cuda:0 FAILED ($(tail -1 "$out/greedy_cuda_$i.ids"))"
    elif cmp -s <(grep '^ids:' "$out/greedy_cuda_$i.ids") <(grep '^ids:' "$out/greedy_ref_$i.ids"); then
      say "greedy prompt $i: cuda:0 == reference"
    else
      say "greedy prompt $i: DIFFERENT (see greedy_*_$i.ids)"
    fi
  done
  # 3. Decode speed with CUDA graphs (executor: graphs built vs replayed).
  step decode_stats 120 "$bin/tessera" run -m "$model" -d cuda:0 --temp 0 -n 256 --ignore-eos --stats -p "Tell me a story."
  grep -iE 'tok/s|decode|prefill' "$out/decode_stats.log" | tail -4 | tee -a "$summary"
fi

# 4. Vulkan on the same GPU, where a Vulkan loader is there (the device README's .gl recipe):
# its conformance suite, for the Vulkan vs CUDA ratio in one run.
if ldconfig -p | grep -q libvulkan.so.1; then
  TESSERA_TEST_DEVICE=vulkan:0 step conformance_vulkan 240 "$bin/conformance" --gtest_brief=1
  grep -E '^\[  (PASSED|FAILED)' "$out/conformance_vulkan.log" | head -3 | tee -a "$summary"
else
  say "vulkan: no loader on this machine (carry .gl as the device README says); skipped"
fi

# 5. Bench figures: the device's ceilings and kernel sweep (roofline), as % of its own peaks.
step roofline 180 "$bin/tessera-bench" roofline --device cuda:0 --quick --out "$out/roofline"
say "done"
cp "$summary" "$dest/summary.txt"
tar czf "$dest/logs.tgz" -C "$out" .
