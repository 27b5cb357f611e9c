"""The dry run of Dittadi et al.'s full grid, timed as a user runs it: a whole process, imports
included (issue 33: it must take seconds, not minutes).

    python benchmarks/dry_run_time.py [--repeats 5] [--repo PATH]

Runs ``python -m sweeps.paper_grid --preset dittadi2021 --scale full --gpus-per-trial 1 --dry-run``
``--repeats`` times in fresh processes (``--repo``: the checkout to run, default this one, so an
older checkout can be timed beside it) and prints each run's wall seconds and CPU seconds (the
child's user + system time), then the median of each. CPU seconds are what to compare on a shared
machine; wall seconds need a quiet one.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMAND = ["-m", "sweeps.paper_grid", "--preset", "dittadi2021", "--scale", "full", "--gpus-per-trial", "1",
           "--dry-run"]


def one_run(repo: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one dry run in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *COMMAND], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(repo)})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or "1080 trials in" not in done.stdout:
        raise SystemExit(f"the dry run failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    print(f"python {' '.join(COMMAND)}  (in {args.repo}; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs)")
    runs = [one_run(args.repo) for _ in range(args.repeats)]
    for index, (wall, cpu) in enumerate(runs, 1):
        print(f"  run {index}: {wall:.2f} s wall, {cpu:.2f} CPU-s")
    print(f"median: {statistics.median(w for w, _ in runs):.2f} s wall, "
          f"{statistics.median(c for _, c in runs):.2f} CPU-s (load average now {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
