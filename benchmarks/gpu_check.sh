#!/usr/bin/env bash
# The trainer's GPU check (benchmarks/gpu_check.py, docs/gpu.md).
#   bash benchmarks/gpu_check.sh prepare   # here, with network and llmgym[train] installed: fills .gpu_wheels/
#   bash benchmarks/gpu_check.sh run       # on the GPU machine, with .gpu_wheels carried; results in $OUT
# PYTHON picks the interpreter (default: python3, the GPU machine's own, with its CUDA torch).
set -euo pipefail
cd "$(dirname "$0")/.."
command="${1:-run}"
shift || true
if [ "$command" = run ]; then
  # the whole call must end within the device tool's limit, the log and JSON written on the way
  exec timeout --signal=INT --kill-after=20 480 "${PYTHON:-python3}" benchmarks/gpu_check.py run "$@"
fi
exec "${PYTHON:-python3}" benchmarks/gpu_check.py "$command" "$@"
