"""Random batches of 64 images from a 3DShapes file in the real chunk layout, before and after
``prepare --from-file`` converts it.

Run: ``python benchmarks/random_access.py [--n-images 60000] [--batches-before 3]
[--batches-after 500] [--dir DIR] [--keep]``.

1. Writes ``3dshapes.h5`` with ``--n-images`` images from the 3DShapes-like generator, stored as
   the real file is: ``images`` gzip (level 4) in chunks of (15000, 4, 4, 1) and ``labels`` in
   chunks of (7500, 1), the layouts h5py chooses by itself for the real shapes.
2. Reads ``--batches-before`` random batches of 64 (sorted indices, as h5py needs) from it.
3. Converts it with :func:`data_pipeline.conversion.convert` into the prepared layout (timed).
4. Reads ``--batches-after`` random batches of 64 from the memory-mapped ``images.npy``, and the
   same from an hdf5 with one image per chunk (disent's re-saved layout), for comparison.

A random batch from the real layout decompresses every chunk row it touches (768 chunks of
15,000 images each per row). This file has n/15000 rows; the full 480,000-image file has 32, and
a batch of 64 touches about 28 of them, so the script also prints the before figure scaled by
the expected number of rows touched (an extrapolation, labelled as such). The after figures are
read from a warm page cache (the file was just written).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data_pipeline import conversion, factor_space, prepared, render  # noqa: E402

REAL_IMAGE_CHUNK, REAL_LABEL_CHUNK, BATCH = (15000, 4, 4, 1), (7500, 1), 64


def write_real_layout(path: Path, n: int) -> float:
    """The 3DShapes-like file in the real chunk layout; seconds taken."""
    import h5py

    space = factor_space("shapes3d")
    index = np.sort(np.random.default_rng(0).choice(space.n_images, n, replace=False))
    start = time.perf_counter()
    with h5py.File(path, "w") as f:
        images = f.create_dataset("images", shape=(n, 64, 64, 3), dtype=np.uint8,
                                  chunks=(min(n, REAL_IMAGE_CHUNK[0]), 4, 4, 1), compression="gzip")
        for first in range(0, n, REAL_IMAGE_CHUNK[0]):
            images[first:first + REAL_IMAGE_CHUNK[0]] = render(
                "shapes3d", space.classes_of(index[first:first + REAL_IMAGE_CHUNK[0]]))
        f.create_dataset("labels", data=space.raw_values(space.classes_of(index)),
                         chunks=(min(n, REAL_LABEL_CHUNK[0]), 1), compression="gzip")
    return time.perf_counter() - start


def time_batches(read, n: int, batches: int, seed: int) -> np.ndarray:
    """Seconds per random batch of 64 (sorted indices)."""
    rng = np.random.default_rng(seed)
    seconds = []
    for _ in range(batches):
        rows = np.sort(rng.choice(n, BATCH, replace=False))
        start = time.perf_counter()
        batch = read(rows)
        seconds.append(time.perf_counter() - start)
        assert len(batch) == BATCH
    return np.array(seconds)


def rows_touched(n_rows: int) -> float:
    """Expected number of chunk rows a random batch of 64 touches."""
    return n_rows * (1 - (1 - 1 / n_rows) ** BATCH)


def report(label: str, seconds: np.ndarray) -> None:
    print(f"{label}: {len(seconds)} batches, median {1e3 * np.median(seconds):,.2f} ms, "
          f"mean {1e3 * seconds.mean():,.2f} ms per batch of 64 "
          f"({BATCH / seconds.mean():,.0f} images/s)", flush=True)


def main(argv: list[str] | None = None) -> None:
    import h5py

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-images", type=int, default=60_000)
    parser.add_argument("--batches-before", type=int, default=3)
    parser.add_argument("--batches-after", type=int, default=500)
    parser.add_argument("--dir", default=None, help="work folder (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the files")
    args = parser.parse_args(argv)
    if args.n_images < BATCH:
        parser.error(f"--n-images must be at least {BATCH}")
    work = Path(args.dir or tempfile.mkdtemp(prefix="disgen-random-access-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"{platform.processor() or platform.machine()}, nproc {os.cpu_count()}, "
          f"load average {os.getloadavg()}, h5py {h5py.__version__}, numpy {np.__version__}")
    source = work / "3dshapes.h5"
    seconds = write_real_layout(source, args.n_images)
    print(f"wrote {source} ({args.n_images:,} images, chunks {REAL_IMAGE_CHUNK} gzip, "
          f"{source.stat().st_size / 2**20:,.1f} MiB) in {seconds:.1f} s", flush=True)

    with h5py.File(source, "r") as f:
        images = f["images"]
        before = time_batches(lambda rows: images[rows], args.n_images, args.batches_before, seed=1)
    report("before: real chunk layout, h5py", before)
    n_rows = -(-args.n_images // REAL_IMAGE_CHUNK[0])
    scale = rows_touched(32) / rows_touched(n_rows)
    print(f"  extrapolated to the full 480,000-image file: ~{np.median(before) * scale:,.1f} s per batch "
          f"(a batch touches ~{rows_touched(32):.1f} of 32 chunk rows here ~{rows_touched(n_rows):.1f} "
          f"of {n_rows})", flush=True)

    start = time.perf_counter()
    conversion.convert(source, work / "prepared", progress=False)
    convert_seconds = time.perf_counter() - start
    print(f"convert: {convert_seconds:.1f} s ({args.n_images / convert_seconds:,.0f} images/s; "
          f"the full file would take ~{convert_seconds * 480_000 / args.n_images:,.0f} s)", flush=True)

    data = prepared.open_dataset(work / "prepared")
    after = time_batches(lambda rows: np.asarray(data.images[rows]), args.n_images, args.batches_after,
                         seed=2)
    report("after: the prepared layout's memory-mapped blocks", after)

    per_image = work / "per_image_chunk.h5"
    with h5py.File(per_image, "w") as f:
        f.create_dataset("images", data=np.asarray(data.images), chunks=(1, 3, 64, 64), compression="gzip")
    with h5py.File(per_image, "r") as f:
        images = f["images"]
        one_chunk = time_batches(lambda rows: images[rows], args.n_images, args.batches_after, seed=2)
    report("for comparison: hdf5, one image per chunk, gzip", one_chunk)
    print(f"speed-up (median, this file): {np.median(before) / np.median(after):,.0f}x")
    if not args.keep:
        for path in sorted(work.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        work.rmdir()


if __name__ == "__main__":
    main()
