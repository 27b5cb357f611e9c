"""Time the Ray Data pipeline of ``prepare`` against one process writing the same blocks.

Run: ``python benchmarks/prepare_dataset.py [DATASET] [--n-images N] [--rows-per-block R]
[--num-cpus 2] [--from-file FILE] [--repeats K]``. Without ``--from-file`` it renders the dataset's
grid (``prepare`` against ``prepare_single_process``); with it, it converts the real file
(``prepare(from_file=…)`` against ``conversion.convert``). Both builds go to a temporary folder
and are checked to hold the same bytes (the content id). It prints seconds and images/s of each
(K repeats, interleaved, each into a fresh folder), the ``ray.init`` time apart, the load average
before and after, and the core count: the machine may be shared, so run it on a quiet one.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data_pipeline.conversion import convert  # noqa: E402
from data_pipeline.prepare import prepare, prepare_single_process  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", nargs="?", default="dsprites")
    parser.add_argument("--n-images", type=int, default=None, help="a seeded sample of the grid")
    parser.add_argument("--rows-per-block", type=int, default=None, help="default: about 64 MiB of images")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--from-file", default=None, metavar="FILE", help="convert this real file instead")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    print(f"load average before: {os.getloadavg()}  nproc: {os.cpu_count()}")
    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    print(f"ray.init: {time.perf_counter() - t0:.1f} s")
    if args.from_file:
        one = lambda out: convert(args.from_file, out, dataset=args.dataset,  # noqa: E731
                                  rows_per_block=args.rows_per_block, progress=False)
        pipeline = lambda out: prepare(args.dataset, out, rows_per_block=args.rows_per_block,  # noqa: E731
                                       from_file=args.from_file)
    else:
        options = dict(n_images=args.n_images, rows_per_block=args.rows_per_block)
        one = lambda out: prepare_single_process(args.dataset, out, **options)  # noqa: E731
        pipeline = lambda out: prepare(args.dataset, out, **options)  # noqa: E731
    ids = set()
    for repeat in range(args.repeats):
        for label, build in [("one process", one), (f"ray data ({args.num_cpus} CPUs)", pipeline)]:
            with tempfile.TemporaryDirectory() as tmp:
                manifest = build(f"{tmp}/out")
            ids.add(manifest["content_id"])
            print(f"[{repeat + 1}/{args.repeats}] {label}: {manifest['n_images']:,} images in "
                  f"{len(manifest['blocks'])} blocks, {manifest['seconds']:.1f} s, "
                  f"{manifest['n_images'] / manifest['seconds']:,.0f} images/s", flush=True)
    print(f"builds hold the same bytes: {len(ids) == 1}")  # the content id names the bytes
    print(f"load average after: {os.getloadavg()}")
    ray.shutdown()


if __name__ == "__main__":
    main()
