#!/usr/bin/env bash
# Every GPU figure the project claims, in one run on a lent GPU machine, into one JSON file:
#   1. packed training throughput at K = 1, 8, 32 and 128 burgess β-VAEs (vmap), against one
#      model alone, with the model FLOP utilisation (benchmarks/packed_throughput.py);
#   2. the default study (python -m sweeps.paper_grid, smoke scale) end to end on the GPU, Ray
#      start-up included (benchmarks/default_study.py);
#   3. DCI at disentanglement_lib's size, serial and parallel GBT and hist_gbt, on this machine's
#      cores (benchmarks/dci_speed.py; DCI runs on the CPU, timed here on the GPU machine's cores).
# The raw output of each step is kept beside the JSON. Fails at once, exit 2, without a CUDA device.
#
#   benchmarks/gpu.sh [OUT.json]        (default: benchmarks/gpu_figures.json; run from anywhere)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-benchmarks/gpu_figures.json}"
logs="${out%.json}_logs"

if ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "benchmarks/gpu.sh: no CUDA device (torch.cuda.is_available() is False): run it on a GPU machine" >&2
    exit 2
fi
mkdir -p "$logs"
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"

echo "1/3 packed throughput, K = 1 8 32 128" >&2
python benchmarks/packed_throughput.py --device cuda --k 1 8 32 128 | tee "$logs/packed_throughput.txt" >&2
echo "2/3 the default study on the GPU" >&2
python benchmarks/default_study.py --scale smoke | tee "$logs/default_study.txt" >&2
echo "3/3 DCI" >&2
python -m benchmarks.dci_speed | tee "$logs/dci_speed.txt" >&2

python benchmarks/gpu_figures.py "$logs" "$out"
echo "wrote $out (raw output in $logs/)" >&2
