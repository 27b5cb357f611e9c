"""Time the procedural dSprites renderer on the full 737,280-image grid.

Run: ``python benchmarks/render_dsprites.py [--chunk 4096] [--limit N]``. The grid is rendered
chunk by chunk in row-major order (posY fastest) and each chunk is dropped after a checksum, so
memory stays small. Prints images per second, total seconds and the machine's CPU count.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data_pipeline.dsprites import FACTOR_SIZES, render  # noqa: E402


def grid_classes(start: int, stop: int) -> np.ndarray:
    """Class tuples of grid images start..stop-1, in row-major order (last factor fastest)."""
    return np.stack(np.unravel_index(np.arange(start, stop), FACTOR_SIZES), axis=1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunk", type=int, default=4096, help="images per render call")
    parser.add_argument("--limit", type=int, default=None, help="render only the first N images")
    args = parser.parse_args(argv)

    total = int(np.prod(FACTOR_SIZES))
    n = total if args.limit is None else min(args.limit, total)
    on_pixels = 0
    t0 = time.perf_counter()
    for start in range(0, n, args.chunk):
        stop = min(start + args.chunk, n)
        on_pixels += int(render(grid_classes(start, stop), chunk=args.chunk).sum(dtype=np.int64))
    seconds = time.perf_counter() - t0

    print(f"images: {n}  chunk: {args.chunk}  on-pixels: {on_pixels}")
    print(f"total: {seconds:.2f} s  rate: {n / seconds:,.0f} images/s")
    print(f"nproc: {os.cpu_count()}")


if __name__ == "__main__":
    main()
