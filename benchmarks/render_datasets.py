"""Time the procedural generators of 3DShapes (480,000 images) and MPI3D (1,036,800) on their full grids.

Run: ``python benchmarks/render_datasets.py [shapes3d mpi3d] [--chunk 8192] [--limit N]``. One
process. Each grid is rendered chunk by chunk in row-major order (last factor fastest) through the
public ``data_pipeline.render`` and every chunk is dropped after its pixel sum is taken, so memory
stays at one chunk (full MPI3D would be 12.7 GB). Prints seconds, images per second, the pixel sum
(a cheap fingerprint: the generators are deterministic), the process's CPU time (less sensitive
to other jobs on a shared machine than the wall time), the CPU count and the load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data_pipeline import factor_space, render  # noqa: E402


def time_grid(dataset: str, chunk: int, limit: int | None) -> tuple[int, float, float, int]:
    """(images rendered, wall seconds, this process's CPU seconds, pixel sum) for the first
    ``limit`` images of the grid (all of it by default)."""
    space = factor_space(dataset)
    n = space.n_images if limit is None else min(limit, space.n_images)
    pixel_sum = 0
    start_time, start_cpu = time.perf_counter(), time.process_time()
    for start in range(0, n, chunk):
        classes = space.classes_of(np.arange(start, min(start + chunk, n)))
        pixel_sum += int(render(dataset, classes).sum(dtype=np.int64))
    return n, time.perf_counter() - start_time, time.process_time() - start_cpu, pixel_sum


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="*", default=["shapes3d", "mpi3d"])
    parser.add_argument("--chunk", type=int, default=8192, help="images per render call")
    parser.add_argument("--limit", type=int, default=None, help="render only the first N images")
    args = parser.parse_args(argv)
    print(f"nproc: {os.cpu_count()}  load average before: {os.getloadavg()}")
    for dataset in args.datasets:
        n, seconds, cpu, pixel_sum = time_grid(dataset, args.chunk, args.limit)
        print(f"{dataset}: {n:,} images in {seconds:.1f} s wall ({n / seconds:,.0f} images/s), "
              f"{cpu:.1f} s CPU ({n / cpu:,.0f} images per CPU-second); pixel sum {pixel_sum}; "
              f"load average: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
