"""Time the default study end to end, as a user runs it: `python -m sweeps.paper_grid`.

Runs the command line in a fresh process (Ray start-up included) into a temporary folder, then
prints the wall time and, from trials.parquet and history.parquet, each trial's training and
evaluation seconds and training throughput.

    python benchmarks/default_study.py [--scale smoke] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

import pandas as pd


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="smoke")
    parser.add_argument("--keep", help="write the experiment here instead of a temporary folder")
    args = parser.parse_args()
    storage = args.keep or tempfile.mkdtemp(prefix="disgen-bench-")
    command = [sys.executable, "-m", "sweeps.paper_grid", "--scale", args.scale,
               "--storage-path", storage, "--name", "bench"]
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
        return done.returncode
    experiment = os.path.join(storage, "bench")
    trials = pd.read_parquet(os.path.join(experiment, "trials.parquet"))
    history = pd.read_parquet(os.path.join(experiment, "history.parquet"))
    speed = history.groupby("trial_key")["images_per_second"].median().rename("images_per_second")
    table = trials.set_index("trial_key")[["split", "beta", "train_seconds", "eval_seconds",
                                           "train_nll", "test_nll"]].join(speed)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}, "
          f"torch {__import__('torch').__version__}, ray {__import__('ray').__version__}")
    print(f"command: {' '.join(command[1:])}")
    print(f"wall time, Ray start-up included: {wall:.1f} s for {len(trials)} trials")
    print(table.to_string(float_format="{:.1f}".format))
    return 0


if __name__ == "__main__":
    sys.exit(main())
