#!/usr/bin/env bash
# Every GPU figure the project claims, in one run on a lent GPU machine, into one JSON file
# (benchmarks/gpu_figures.py says what each step measures): the plain path's images/s (K = 1),
# packs of K = 8, 32, 64 and 128 against it, fp32 / TF32 / bf16, MFU against the device's peak,
# peak memory against the sizing estimate, Dittadi et al.'s network and its pack size, evaluation
# seconds per model at n_metric 10,000 on the CPU cores, `pytest -m gpu`, and the default study end
# to end. Under 10 minutes on an H100.
#
#   benchmarks/gpu.sh [OUT.json]               (default: benchmarks/gpu_figures.json; run from anywhere)
#   benchmarks/gpu.sh --cpu-smoke OUT.json     every step at tiny sizes on the CPU, in under 2 minutes
#                                              (CI runs it, so the script cannot rot)
#
# Exits 2 without a CUDA device (unless --cpu-smoke), 1 if any step failed (its error is in the JSON).
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=()
if [[ "${1:-}" == "--cpu-smoke" ]]; then
    smoke=(--cpu-smoke)
    shift
fi
out="${1:-benchmarks/gpu_figures.json}"
if [[ ${#smoke[@]} -eq 0 ]] && ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "benchmarks/gpu.sh: no CUDA device (torch.cuda.is_available() is False): run it on a GPU machine, or" \
         "with --cpu-smoke OUT.json to run every step at tiny sizes on the CPU" >&2
    exit 2
fi
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's code, in every subprocess too
exec python benchmarks/gpu_figures.py "${smoke[@]}" "$out"
