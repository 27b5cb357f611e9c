"""Time Ray Data preparation against a single-process build of the same blocks.

Run: ``python benchmarks/prepare_dataset.py [DATASET] [--n-images N] [--rows-per-block R]
[--num-cpus 2]``. Writes both builds to a temporary folder, checks they read back equal, and
prints seconds, images/s and the load average (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data_pipeline.prepare import prepare, prepare_single_process  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", nargs="?", default="dsprites")
    parser.add_argument("--n-images", type=int, default=None)
    parser.add_argument("--rows-per-block", type=int, default=None, help="default: about 64 MiB of images")
    parser.add_argument("--num-cpus", type=int, default=2)
    args = parser.parse_args(argv)
    options = dict(n_images=args.n_images, rows_per_block=args.rows_per_block)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"load average before: {os.getloadavg()}")
        single = prepare_single_process(args.dataset, f"{tmp}/single", **options)
        print(f"single process: {single['n_images']:,} images, {single['seconds']:.1f} s, "
              f"{single['n_images'] / single['seconds']:,.0f} images/s")
        import ray

        t0 = time.perf_counter()
        ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
        started = time.perf_counter() - t0
        parallel = prepare(args.dataset, f"{tmp}/ray", **options)
        print(f"ray data ({args.num_cpus} CPUs): {parallel['seconds']:.1f} s "
              f"(+{started:.1f} s ray.init), {parallel['n_images'] / parallel['seconds']:,.0f} images/s")
        same = single["content_id"] == parallel["content_id"]  # the content id names the bytes
        print(f"builds hold the same bytes: {same}")
        print(f"load average after: {os.getloadavg()}  nproc: {os.cpu_count()}")
        ray.shutdown()


if __name__ == "__main__":
    main()
