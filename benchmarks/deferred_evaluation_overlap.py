"""Evaluation off the GPU, measured: how much of one trial's evaluation overlaps the next trial's
training on a Ray with one logical GPU (the overlap tests/end_to_end/test_deferred_evaluation.py
shows by events, timed here).

Starts a one-node `ray.cluster_utils.Cluster` with 2 CPUs and 1 logical GPU, runs
`python -m sweeps.paper_grid` on four one-model trials that each reserve the GPU (the test's grid,
tests/sweep_runs.py FOUR_ONE_MODEL_TRIALS: 200 steps, D-score and the NLL of 1,000 images a side),
and reads trials.parquet's timestamps: each trial's training and evaluation intervals from the
first training's start, each evaluation's overlap with the next trial's training (seconds), the
sweep's wall time, and the time a serial run (train, evaluate, train…) would have taken.

    python benchmarks/deferred_evaluation_overlap.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))


def main() -> int:
    from ray.cluster_utils import Cluster
    from sweep_runs import FOUR_ONE_MODEL_TRIALS

    folder = tempfile.mkdtemp(prefix="disgen-overlap-")
    grid = os.path.join(folder, "four.yaml")
    with open(grid, "w") as file:
        file.write(FOUR_ONE_MODEL_TRIALS)
    load_before = open("/proc/loadavg").read().split()[:3]
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 1,
                                                            "include_dashboard": False})
    try:
        command = [sys.executable, "-m", "sweeps.paper_grid", "--grid", grid, "--scale", "tiny",
                   "--storage-path", folder, "--name", "exp", "--gpus-per-trial", "1"]
        started = time.perf_counter()
        done = subprocess.run(command, env={**os.environ, "RAY_ADDRESS": cluster.address},
                              capture_output=True, text=True)
        wall = time.perf_counter() - started
    finally:
        cluster.shutdown()
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
        return 1
    trials = pd.read_parquet(os.path.join(folder, "exp", "trials.parquet")).sort_values("train_started_at")
    origin = trials["train_started_at"].min()
    seconds = lambda column: [(t - origin).total_seconds() for t in trials[column]]
    training = list(zip(seconds("train_started_at"), seconds("train_ended_at")))
    evaluation = list(zip(seconds("eval_started_at"), seconds("eval_ended_at")))
    print(f"load average before: {' '.join(load_before)}; machine: {os.cpu_count()} CPUs")
    print("model  training (s from the first start)  evaluation")
    for k, (train, evaluate) in enumerate(zip(training, evaluation)):
        print(f"{k + 1:>5}  {train[0]:7.1f} – {train[1]:7.1f}            "
              f"{evaluate[0]:7.1f} – {evaluate[1]:7.1f}")
    overlaps = [max(0.0, min(after[1], before[1]) - max(after[0], before[0]))
                for after, before in zip(training[1:], evaluation)]
    serial = sum(b - a for a, b in training + evaluation)
    print("evaluation k overlapping training k+1 (s):", ", ".join(f"{o:.1f}" for o in overlaps))
    print(f"first training's start to last evaluation's end: {max(e for _, e in evaluation):.1f} s; "
          f"trained and evaluated one after another: {serial:.1f} s; the command's wall time: {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
