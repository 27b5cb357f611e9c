"""The driver's peak memory for a two-trial sweep on the full dSprites grid (737,280 images).

Runs ``python -m sweeps.paper_grid --grid benchmarks/grids/full_dsprites.yaml --scale tiny`` in a
fresh process and samples that process's resident set size (RSS, psutil) every 50 ms until it
exits. Only the driver process is counted: Ray's own processes (raylet, object store, workers) are
not. Extra arguments go to the sweep, e.g. ``--data-source prepared --data-dir DIR``.

    python benchmarks/driver_memory.py [--label procedural] [-- sweep arguments...]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
GRID = os.path.join(HERE, "grids", "full_dsprites.yaml")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="procedural", help="a name for this measurement's line")
    parser.add_argument("sweep_args", nargs="*", help="more arguments for the sweep (after --)")
    args = parser.parse_args()
    storage = tempfile.mkdtemp(prefix="disgen-driver-memory-")
    command = [sys.executable, "-m", "sweeps.paper_grid", "--grid", GRID, "--scale", "tiny",
               "--storage-path", storage, "--name", "bench", *args.sweep_args]
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled"),
           "PYTHONPATH": os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.perf_counter()
    log = open(os.path.join(storage, "sweep.log"), "w")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    watched = psutil.Process(process.pid)
    peak = 0
    while process.poll() is None:
        try:
            peak = max(peak, watched.memory_info().rss)
        except psutil.Error:
            break
        time.sleep(0.05)
    process.wait()
    wall = time.perf_counter() - started
    log.close()
    if process.returncode != 0:
        print(open(os.path.join(storage, "sweep.log")).read()[-4000:])
        print(f"sweep failed with exit code {process.returncode}")
        return process.returncode
    memory = psutil.virtual_memory().total / 2**30
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {memory:.0f} GiB, "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"label={args.label} driver_peak_rss_gib={peak / 2**30:.2f} wall_s={wall:.0f} "
          f"command={' '.join(command[1:])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
