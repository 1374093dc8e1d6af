#!/usr/bin/env bash
# Tessera against llama.cpp on this machine (issue #15's table): pp128, pp512 and tg64 with 2
# threads for a 1B-shaped Llama in Q4_0, Q8_0 and Q4_K_M and for SmolLM2-135M Q4_1, both engines
# reading the same GGUF files, alternating engines over 3 rounds, medians and ratios.
# Usage: bench/peer/compare.sh [--quick] [--rounds N] [--reps N] [--cache DIR] [--smollm FILE]
#                              [--only TEXT] [--rows] [--variant NAME:VAR=VALUE]
#                              [--isa avx2|avx3|avx3_dl|scalar]
#                              PEER_DIR [BUILD_DIR]
#   PEER_DIR: what `bash /work/shared/peer/llama-cpp.sh` prints; BUILD_DIR: default build/.
# The work is in compare.py beside this file (standard library only); docs/bench.md.
set -euo pipefail
exec "${TESSERA_PYTHON:-python3}" "$(dirname "$0")/compare.py" "$@"
