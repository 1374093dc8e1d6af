#!/usr/bin/env bash
# Paired decode speed of two tessera binaries (say, before and after a change), alternating runs
# on each device, so a drifting machine affects both alike. Prints each run and the per-round
# ratio new / old with its median.
#
#   bench/before_after.sh OLD_BIN NEW_BIN [MODEL] [ROUNDS] [DEVICES...]
#   bench/before_after.sh /tmp/old/bin/tessera build/bin/tessera models-cache/SmolLM2-135M-Instruct.Q4_1.gguf 5 cpu vulkan
set -euo pipefail
old="$1" new="$2"
model="${3:-models-cache/SmolLM2-135M-Instruct.Q4_1.gguf}"
rounds="${4:-5}"
shift $(( $# < 4 ? $# : 4 ))
devices=("${@:-cpu}")
prompt="Write a long story about a dragon who learns to paint."
decode_tps() {  # binary device tokens -> decode tok/s from --stats
  "$1" run -m "$model" -d "$2" -p "$prompt" -n "$3" --temp 0 --stats -q 2>&1 >/dev/null |
    sed -nE 's/.*\(([0-9.]+) tok\/s decode\).*/\1/p'
}
for dev in "${devices[@]}"; do
  n=128; [ "$dev" = vulkan ] && n=48  # lavapipe is slow
  ratios=()
  for r in $(seq 1 "$rounds"); do
    a=$(decode_tps "$old" "$dev" "$n"); b=$(decode_tps "$new" "$dev" "$n")
    ratios+=("$(python3 -c "print(f'{$b / $a:.3f}')")")
    echo "$dev round $r: old $a tok/s, new $b tok/s, new/old ${ratios[-1]}"
  done
  python3 -c "import statistics,sys; print(f'$dev: new/old median {statistics.median(map(float, sys.argv[1:])):.2f}x over $rounds alternating rounds')" "${ratios[@]}"
done
