"""Orchestration overhead per trial: many trivial trials through disgen's whole wiring.

Runs `python -m sweeps.paper_grid --grid benchmarks/grids/trivial.yaml --scale tiny --seeds N` on a
fresh local Ray with 2 CPUs (1 step of training, no disentanglement metrics), then reports

    issue 6's definition:  (wall − Σ trial compute) / trials
    per slot:              (wall × concurrent slots − Σ trial compute) / trials

where trial compute is each trial's train + eval seconds from trials.parquet, and wall time is the
sweep on the driver's own clock (from Ray being up to the last trial; it includes the trial
workers' one-off start-up: importing torch, Ray Tune, scikit-learn… in each). Ray's own start-up
is reported separately. The steady state, start-up excluded, comes from the slope of the trials'
finish times against their order (a least-squares line through `finished_at`). Also reports the
driver's peak memory, the bytes on disk per trial folder and the load average before and after.

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
               "--num-cpus", str(args.cpus), "--cpus-per-trial", "1", "--address", "local"]
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    load_before = open("/proc/loadavg").read().split()[:3]
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
    n = len(trials)
    overhead_issue = (tune_seconds - compute) / n
    overhead_slot = (tune_seconds * slots - compute) / n
    finished = (trials["finished_at"] - trials["finished_at"].min()).dt.total_seconds().to_numpy().copy()
    finished.sort()
    # Seconds between consecutive finishes in the steady state: the slope of finish time vs order.
    ranks = range(n)
    mean_rank, mean_time = (n - 1) / 2, finished.mean()
    slope = sum((r - mean_rank) * (t - mean_time) for r, t in zip(ranks, finished)) / \
        sum((r - mean_rank) ** 2 for r in ranks)
    steady_slot = slope * slots - compute / n
    trial_dirs = [os.path.join(experiment, d) for d in os.listdir(experiment)
                  if os.path.isdir(os.path.join(experiment, d))]
    per_trial = sum(folder_bytes(d) for d in trial_dirs) / max(len(trial_dirs), 1)
    child_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"machine: {os.cpu_count()} cores; trials: {len(trials)} on {slots} CPU slots")
    print(f"whole command: {wall_total:.1f} s (Ray start-up and data rendering included)")
    print(f"sweep (driver clock, from data loaded to last trial): {tune_seconds:.0f} s; "
          f"summed trial compute: {compute:.1f} s")
    print(f"overhead per trial, issue 6's definition (wall − compute) / trials: {overhead_issue:.2f} s "
          "(target ≤ 0.3 s)")
    print(f"overhead per trial and slot, (wall × {slots} − compute) / trials: {overhead_slot:.2f} s")
    print(f"steady state (start-up excluded): a trial finishes every {slope:.3f} s; overhead per trial "
          f"and slot {steady_slot:.2f} s; one-off start-up ≈ wall − trials × that = "
          f"{tune_seconds - n * slope:.0f} s")
    print(f"load average before: {' '.join(load_before)}; after: "
          f"{' '.join(open('/proc/loadavg').read().split()[:3])}")
    print(f"driver peak RSS: {child_peak:.0f} MB; on disk per trial folder: {per_trial / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
