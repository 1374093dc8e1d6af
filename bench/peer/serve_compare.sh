#!/usr/bin/env bash
# tessera serve against llama-server on this machine (issue #15's serving table): the same GGUF,
# KV capacity and requests, `tessera-bench serve` driving both, alternating rounds, medians.
# Usage: bench/peer/serve_compare.sh [--rounds N] [--concurrency C ...] [--model F] [--ctx N]
#                                    [--prompt N] [--output N] [--requests N] [--variant NAME:VAR=VALUE]
#                                    PEER_DIR [BUILD_DIR]
# The work is in serve_compare.py beside this file (standard library only); docs/bench.md.
set -euo pipefail
exec "${TESSERA_PYTHON:-python3}" "$(dirname "$0")/serve_compare.py" "$@"
