"""Collect the raw output of benchmarks/gpu.sh's three steps into one JSON file.

    python benchmarks/gpu_figures.py LOG_DIR OUT.json

Each figure is read from the line its script prints (the formats of packed_throughput.py,
default_study.py and dci_speed.py); a line that is missing is an error naming the script, so a
changed format cannot silently leave a figure out.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

NUMBER = r"([0-9.]+)"


def need(pattern: str, text: str, script: str, flags=0) -> list[tuple[str, ...]]:
    found = re.findall(pattern, text, flags)
    if not found:
        raise SystemExit(f"gpu_figures: no line matching {pattern!r} in the output of {script}")
    return found


def packed(text: str) -> dict:
    script = "packed_throughput.py"
    figures = {"machine": need(r"^# (.*)$", text, script, re.M)[0], "k": {}}
    for k, rate in need(rf"^K=(\d+)\s+separate\(1 model\):\s+{NUMBER} img/s", text, script, re.M):
        figures["k"].setdefault(k, {})["one_model_images_per_second"] = float(rate)
    for k, rate, ratio, tflops, mfu_fp32, mfu_tc in need(
            rf"^K=(\d+)\s+packed-vmap\s*:\s+{NUMBER} img/s\s+ratio\s+{NUMBER}.*?{NUMBER} TFLOP/s, "
            rf"MFU {NUMBER}% of fp32 peak, {NUMBER}% of tensor-core peak", text, script, re.M):
        figures["k"].setdefault(k, {}).update(
            packed_images_per_second=float(rate), ratio_over_one_model=float(ratio), tflops=float(tflops),
            mfu_of_fp32_peak=float(mfu_fp32) / 100, mfu_of_tensor_core_peak=float(mfu_tc) / 100)
    missing = {"1", "8", "32", "128"} - {k for k, v in figures["k"].items() if "mfu_of_fp32_peak" in v}
    if missing:
        raise SystemExit(f"gpu_figures: packed_throughput.py gave no MFU for K = {sorted(missing, key=int)} "
                         "(is the GPU in its PEAK_FLOPS table?)")
    return figures


def default_study(text: str) -> dict:
    script = "default_study.py"
    seconds, trials = need(rf"wall time, Ray start-up included: {NUMBER} s for (\d+) trials", text, script)[0]
    return {"machine": need(r"^machine: (.*)$", text, script, re.M)[0], "wall_seconds": float(seconds),
            "trials": int(trials), "table": text.split("trials\n", 1)[-1].strip()}


def dci(text: str) -> dict:
    script = "dci_speed.py"
    serial = need(rf"^gbt\s+n_jobs=1\s+{NUMBER} s", text, script, re.M)[0]
    parallel = need(rf"^gbt\s+n_jobs=None\s+{NUMBER} s", text, script, re.M)[0]
    hist = need(rf"^hist_gbt n_jobs=\S+\s+{NUMBER} s", text, script, re.M)[0]
    return {"setup": need(r"^(DCI on .*)$", text, script, re.M)[0], "gbt_serial_seconds": float(serial),
            "gbt_parallel_seconds": float(parallel), "hist_gbt_seconds": float(hist)}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    logs, out = Path(argv[0]), Path(argv[1])
    figures = {"packed_throughput": packed((logs / "packed_throughput.txt").read_text()),
               "default_study": default_study((logs / "default_study.txt").read_text()),
               "dci": dci((logs / "dci_speed.txt").read_text())}
    out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
