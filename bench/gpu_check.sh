#!/usr/bin/env bash
# The GPU check (issue 15; docs/benchmarks.md, "GPU check"): the whole CUDA path in one call.
#
#   bash bench/gpu_check.sh          on the lent GPU machine, with var/gpu-kit carried (make gpu-kit)
#   bash bench/gpu_check.sh --cpu    the same steps on this machine's CPU: a dry run that keeps the
#                                    kit and the script from rotting while no GPU comes
#
# Writes $OUT/gpu_check.json (every step's figures, kept as they come in) and $OUT/gpu_check.log
# (everything printed). Without $OUT (the dry run here) they go to var/gpu-check-out. The work is
# done by bench/gpu_check/driver.py; this script picks the interpreter and keeps the log.
set -uo pipefail
cd "$(dirname "$0")/.."

mode=gpu
python=python3  # on the GPU machine: the image's interpreter, which has torch
if [ "${1:-}" = "--cpu" ]; then
  mode=cpu
  python=.venv/bin/python
elif [ $# -gt 0 ]; then
  echo "usage: bash bench/gpu_check.sh [--cpu]" >&2
  exit 2
fi
out="${OUT:-var/gpu-check-out}"
mkdir -p "$out"

PYTHONUNBUFFERED=1 "$python" -m bench.gpu_check.driver --mode "$mode" --out "$out" 2>&1 | tee "$out/gpu_check.log"
