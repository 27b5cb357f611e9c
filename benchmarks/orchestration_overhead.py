"""Orchestration overhead per trial: many trivial trials through disgen's whole wiring.

Runs `python -m sweeps.paper_grid --grid benchmarks/grids/trivial.yaml --scale tiny --seeds N` on a
local Ray with 2 CPUs (1 step of training, no disentanglement metrics), then reports

    overhead per trial = (wall time × concurrent slots − Σ trial compute) / trials

where trial compute is each trial's train + eval seconds from trials.parquet, and wall time is the
Tune run (from the first trial's start to the end, read from the driver's own clock), excluding
the one-off Ray start-up, which is reported separately. Also reports the driver's peak memory and
the bytes on disk per trial folder.

    python benchmarks/orchestration_overhead.py [--trials 64]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--cpus", type=int, default=2)
    args = parser.parse_args()
    storage = tempfile.mkdtemp(prefix="disgen-overhead-")
    grid = os.path.join(HERE, "grids", "trivial.yaml")
    command = [sys.executable, "-m", "sweeps.paper_grid", "--grid", grid, "--scale", "tiny",
               "--seeds", str(args.trials), "--storage-path", storage, "--name", "overhead",
               "--num-cpus", str(args.cpus), "--cpus-per-trial", "1"]
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall_total = time.perf_counter() - started
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
        return 1
    tune_seconds = float(re.search(r"trials finished in (\d+) s", done.stdout).group(1))
    experiment = os.path.join(storage, "overhead")
    trials = pd.read_parquet(os.path.join(experiment, "trials.parquet"))
    compute = float((trials["train_seconds"] + trials["eval_seconds"]).sum())
    slots = args.cpus
    overhead = (tune_seconds * slots - compute) / len(trials)
    trial_dirs = [os.path.join(experiment, d) for d in os.listdir(experiment)
                  if os.path.isdir(os.path.join(experiment, d))]
    per_trial = sum(folder_bytes(d) for d in trial_dirs) / max(len(trial_dirs), 1)
    child_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"machine: {os.cpu_count()} cores; trials: {len(trials)} on {slots} CPU slots")
    print(f"whole command: {wall_total:.1f} s (Ray start-up and data rendering included)")
    print(f"sweep (driver clock, from data loaded to last trial): {tune_seconds:.0f} s; "
          f"summed trial compute: {compute:.1f} s")
    print(f"overhead per trial: {overhead:.2f} s  (target ≤ 0.3 s)")
    print(f"driver peak RSS: {child_peak:.0f} MB; on disk per trial folder: {per_trial / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
