#!/usr/bin/env bash
# Every GPU figure the project claims, measured in parts on a lent GPU machine, one JSON file per part
# (benchmarks/gpu_figures.py says what each part measures; benchmarks/README.md, "Every GPU figure
# (`gpu.sh`)", how to run it with the device tool).
#
#   benchmarks/gpu.sh OUT_DIR --part N           part N (1, 2, 3 or 4) into OUT_DIR/gpu_figures_partN.json;
#                                                each part ends before 9 minutes (its deadline, counted
#                                                from this script's start, is 510 s)
#   benchmarks/gpu.sh OUT_DIR                    every part, one after another, each with its own deadline
#   benchmarks/gpu.sh --cpu-smoke OUT_DIR [--part N]
#                                                every measurement at tiny sizes on the CPU (CI runs each
#                                                part: .ci/gpu_smoke)
#   --deadline SECONDS                           another deadline, from the part's start
#
# Everything printed (stdout and stderr) is also appended to OUT_DIR/gpu.log. First it prints the
# GPU, its driver, and the torch, CUDA and cuDNN versions. Python is $PYTHON if set, else python3
# (the lent machine has no `python`). Parts 1-3 never import Ray or Optuna; part 4 runs the default
# study where `import ray` works, and records "skipped: Ray is not installed" elsewhere.
#
# Exits 2 without a CUDA device (unless --cpu-smoke) or on a usage error; 1 if a measurement failed
# (its error is in the JSON); 3 if the deadline cut a part short (what it skipped is marked "not run:
# deadline"); 0 when every figure was measured.
set -uo pipefail
started=$(date +%s.%N)
usage() { sed -n '2,/^set /p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

python_bin="${PYTHON:-python3}"
out="" part="all" smoke=0 extra=()
while (( $# )); do
    case "$1" in
        --cpu-smoke) smoke=1 ;;
        --part) part="${2:-}"; shift ;;
        --part=*) part="${1#*=}" ;;
        --deadline) extra+=(--deadline "${2:-}"); shift ;;
        --deadline=*) extra+=(--deadline "${1#*=}") ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "benchmarks/gpu.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
        *) if [[ -n "$out" ]]; then echo "benchmarks/gpu.sh: one output folder, not '$out' and '$1'" >&2; exit 2; fi
           out="$1" ;;
    esac
    shift
done
if [[ -z "$out" ]]; then
    echo "benchmarks/gpu.sh: give the output folder (on the lent machine: \"\$OUT\")" >&2; usage >&2; exit 2
fi
case "$part" in
    1|2|3|4) parts=("$part") ;;
    all) parts=(1 2 3 4) ;;
    *) echo "benchmarks/gpu.sh: --part takes 1, 2, 3 or 4; got '$part'" >&2; exit 2 ;;
esac
mkdir -p "$out" && out="$(cd "$out" && pwd)" || exit 2  # before the cd below: OUT_DIR is the caller's
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's code, in every subprocess too
export PYTHONUNBUFFERED=1 RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"

# a command with a time limit where `timeout` is there (a hung driver must not eat the part's time)
limited() { if command -v timeout >/dev/null 2>&1; then timeout -k 5 "$@"; else shift; "$@"; fi; }

main() {
    echo "== benchmarks/gpu.sh $(date -u '+%Y-%m-%d %H:%M:%S UTC'): parts ${parts[*]}$( ((smoke)) && echo ' (cpu smoke)'); $(git rev-parse --short HEAD 2>/dev/null || echo 'no git')"
    if command -v nvidia-smi >/dev/null 2>&1; then
        limited 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
            | sed 's/^/GPU (nvidia-smi): /' || echo "nvidia-smi failed"
    else
        echo "nvidia-smi: not found"
    fi
    local found=0
    limited 120 "$python_bin" - <<'PY' || found=$?
import platform
import sys

import torch

cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
print(f"{sys.executable}: Python {platform.python_version()}; torch {torch.__version__}; "
      f"CUDA {torch.version.cuda}; cuDNN {cudnn}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"GPU (torch): {p.name}, capability {p.major}.{p.minor}, {p.total_memory / 2**30:.1f} GiB, "
          f"{p.multi_processor_count} SMs; {torch.cuda.device_count()} device(s)")
else:
    print("GPU (torch): none (torch.cuda.is_available() is False)")
    sys.exit(3)
PY
    if (( found != 0 && found != 3 )); then
        echo "benchmarks/gpu.sh: $python_bin could not import torch or query the GPU (exit $found; 124: timed out)"
        return 2
    fi
    if (( found == 3 && ! smoke )); then
        echo "benchmarks/gpu.sh: no CUDA device (torch.cuda.is_available() is False): run it on a GPU" \
             "machine, or with --cpu-smoke to run every measurement at tiny sizes on the CPU"
        return 2
    fi
    local status=0 rc guard
    for p in "${parts[@]}"; do
        [[ "$p" == "${parts[0]}" ]] || started=$(date +%s.%N)  # each later part's clock starts at its launch
        echo "== part $p: $out/gpu_figures_part$p.json"
        # a guard behind the part's own deadline (510 s): SIGTERM at 530 s from the part's start, which
        # the part takes as its deadline (it writes what it has and exits 3), SIGKILL 5 s later: 535 s
        guard=()
        if (( ! smoke )) && command -v timeout >/dev/null 2>&1; then
            guard=(timeout -k 5 $(( 530 - ($(date +%s) - ${started%.*}) )))
        fi
        DISGEN_GPU_FIGURES_STARTED="$started" ${guard[@]+"${guard[@]}"} "$python_bin" -u benchmarks/gpu_figures.py \
            "$out" --part "$p" $( ((smoke)) && echo --cpu-smoke) ${extra[@]+"${extra[@]}"}
        rc=$?
        echo "== part $p: exit $rc after $(( $(date +%s) - ${started%.*} )) s"
        if (( rc == 1 || status == 0 )); then status=$rc; fi
    done
    return "$status"
}

main 2>&1 | tee -a "$out/gpu.log"
exit "${PIPESTATUS[0]}"
