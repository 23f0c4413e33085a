#!/usr/bin/env bash
# Workload W1 (issue #5) end to end: synthesizes the calibrated qwen3-30b-a3b if missing
# (into $EPM_MODELS, default ~/.cache/epm/models; about 18 GiB), runs the A/B sets and
# writes the P1-P6 ratios with the machine and the commands (default validate/perf-w1.json).
# Takes about 80 minutes with --runs 3 on a 2-core machine; keep the machine otherwise idle.
#
#   bench/w1.sh [--out PATH] [--runs K] [--budgets-mb 4096,8192] [--skip-ra128] [--reuse]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
exec python3 bench/w1.py "$@"
