"""Prepare a dataset as sharded files with a manifest, rendering in parallel Ray Data blocks.

Run ``python -m data_pipeline.prepare DATASET --out DIR [--n-images N] [--reduced]
[--rows-per-shard 4096] [--num-cpus 2] [--address local]``. ``DIR`` is a local path or any URI pyarrow's file
systems understand (``s3://bucket/prefix``). Ray Data shows its progress bar while blocks render.

``--from-file FILE`` converts a downloaded real file instead, once, into a memory-mappable
``images.npy`` that reads random batches quickly (:mod:`data_pipeline.random_access`).

Each shard ``shard-<first index>.npz`` holds ``images`` (n, C, H, W) uint8 0..255 and ``index``
(n,) flat grid indices. ``manifest.json`` lists the shards with their counts and sha256, plus the
dataset, generator version and factor space. :func:`read_shards` reads them back, verified, into
one :class:`GroundTruthDataset`. :func:`prepare_single_process` writes the same files in one
process (the baseline the benchmark compares against).

This is the only module of ``data_pipeline`` that imports Ray. Do not run it inside trials that
have reserved every CPU: Ray Data then waits forever for a free one.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time

import numpy as np

from data_pipeline.cli import Parser, dataset_name, reason, whole_number
from data_pipeline.datasets import GENERATOR_VERSIONS, GroundTruthDataset, _render_stored, factor_space
from data_pipeline.spaces import canonical_name

MANIFEST = "manifest.json"


def _filesystem(out: str):
    """(pyarrow filesystem, base path) for a local path or URI."""
    import pyarrow.fs as pafs

    if "://" in str(out):
        return pafs.FileSystem.from_uri(str(out))
    from pathlib import Path

    path = Path(out).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return pafs.LocalFileSystem(), str(path)


def write_shard(dataset: str, index: np.ndarray, out: str) -> dict:
    """Render grid points ``index`` of ``dataset`` and write them as one shard; its manifest row."""
    dataset = canonical_name(dataset)
    index = np.asarray(index, dtype=np.int64)
    space = factor_space(dataset)
    images = _render_stored(dataset, space.classes_of(index))
    buffer = io.BytesIO()
    np.savez(buffer, images=images, index=index)
    payload = buffer.getvalue()
    name = f"shard-{int(index[0]):09d}.npz"
    fs, base = _filesystem(out)
    with fs.open_output_stream(f"{base}/{name}") as stream:
        stream.write(payload)
    return {"file": name, "first": int(index[0]), "count": int(len(index)),
            "sha256": hashlib.sha256(payload).hexdigest()}


def _grid_index(dataset: str, n_images: int | None, reduced: bool, seed: int) -> np.ndarray:
    space = factor_space(dataset)
    if n_images is not None and n_images < 1:
        raise ValueError(f"n_images must be at least 1, or None for the whole grid; got {n_images}")
    if reduced:
        if dataset != "mpi3d":
            raise ValueError("--reduced: only mpi3d has a reduced grid")
        from data_pipeline.mpi3d import reduced_classes

        return space.index_of(reduced_classes())
    if n_images is None or n_images >= space.n_images:
        return np.arange(space.n_images)
    return np.sort(np.random.default_rng(seed).choice(space.n_images, n_images, replace=False))


def _write_manifest(dataset: str, out: str, shards: list[dict], seconds: float, how: str) -> dict:
    space = factor_space(dataset)
    shards = sorted(shards, key=lambda s: s["first"])
    manifest = {
        "dataset": dataset, "generator_version": GENERATOR_VERSIONS[dataset],
        "factor_names": list(space.names), "factor_sizes": list(space.sizes),
        "n_images": int(sum(s["count"] for s in shards)), "layout": "images (n, C, H, W) uint8 0..255",
        "shards": shards, "seconds": round(seconds, 3), "built_by": how,
    }
    fs, base = _filesystem(out)
    with fs.open_output_stream(f"{base}/{MANIFEST}") as stream:
        stream.write(json.dumps(manifest, indent=1).encode())
    return manifest


def prepare(dataset: str, out: str, n_images: int | None = None, reduced: bool = False,
            rows_per_shard: int = 4096, seed: int = 0, num_cpus: int | None = None,
            address: str | None = None) -> dict:
    """Render ``dataset`` in parallel Ray Data blocks into shards under ``out``; the manifest.

    Unless this process is already connected to Ray, it calls ``ray.init(address)``: None joins
    the machine's running cluster if there is one, else starts one with ``num_cpus``; ``"local"``
    always starts a fresh one.
    """
    import ray

    dataset = canonical_name(dataset)
    if rows_per_shard < 1:
        raise ValueError(f"rows_per_shard must be at least 1; got {rows_per_shard}")
    index = _grid_index(dataset, n_images, reduced, seed)
    if not ray.is_initialized():
        ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    start = time.perf_counter()
    # One block per shard holding only its start row; the grid indices go to the object store
    # once and each task reads its slice zero-copy. (Moving the index array through Ray Data and
    # repartitioning it cost an all-to-all step and block conversions.)
    index_ref = ray.put(index)
    firsts = list(range(0, len(index), rows_per_shard))
    shards_to_write = ray.data.from_items([{"start": f} for f in firsts], override_num_blocks=len(firsts))

    def render_shard(row: dict) -> dict:
        first = int(row["start"])
        return write_shard(dataset, ray.get(index_ref)[first:first + rows_per_shard], out)

    shards = shards_to_write.map(render_shard).take_all()
    return _write_manifest(dataset, out, shards, time.perf_counter() - start, "ray.data")


def prepare_single_process(dataset: str, out: str, n_images: int | None = None, reduced: bool = False,
                           rows_per_shard: int = 4096, seed: int = 0) -> dict:
    """The same shards and manifest as :func:`prepare`, written by one process."""
    dataset = canonical_name(dataset)
    index = _grid_index(dataset, n_images, reduced, seed)
    start = time.perf_counter()
    shards = [write_shard(dataset, index[i:i + rows_per_shard], out)
              for i in range(0, len(index), rows_per_shard)]
    return _write_manifest(dataset, out, shards, time.perf_counter() - start, "single process")


def read_shards(out: str, verify: bool = True) -> GroundTruthDataset:
    """Read prepared shards back into one dataset, in grid order; checksums verified."""
    fs, base = _filesystem(out)
    with fs.open_input_stream(f"{base}/{MANIFEST}") as stream:
        manifest = json.loads(stream.read())
    images, index = [], []
    for shard in manifest["shards"]:
        with fs.open_input_stream(f"{base}/{shard['file']}") as stream:
            payload = stream.read()
        if verify and hashlib.sha256(payload).hexdigest() != shard["sha256"]:
            raise ValueError(f"{shard['file']}: sha256 differs from the manifest; the shard is corrupt")
        with np.load(io.BytesIO(payload)) as data:
            images.append(data["images"])
            index.append(data["index"])
    index = np.concatenate(index)
    order = np.argsort(index, kind="stable")
    space = factor_space(manifest["dataset"])
    if list(space.sizes) != manifest["factor_sizes"]:
        raise ValueError(f"{out}: manifest factor sizes {manifest['factor_sizes']} differ from "
                         f"{manifest['dataset']}'s {list(space.sizes)}")
    return GroundTruthDataset(manifest["dataset"], np.concatenate(images)[order],
                              space.classes_of(index[order]), space)


def _check_arguments(parser, args) -> None:
    """Refuse, before Ray starts, what the types alone cannot: combinations and the output."""
    grid = factor_space(args.dataset).n_images
    if args.reduced and args.dataset != "mpi3d":
        parser.fail("--reduced", f"only mpi3d has a reduced grid; drop --reduced for {args.dataset}")
    if args.reduced and args.n_images is not None:
        parser.fail("--n-images", "--reduced already fixes the images; give one of --reduced, --n-images")
    if args.n_images is not None and args.n_images > grid:
        parser.fail("--n-images", f"{args.dataset}'s grid has {grid:,} images; give at most that, "
                                  "or leave --n-images out for the whole grid")
    if args.single_process and (args.num_cpus is not None or args.address is not None):
        parser.fail("--single-process", "runs without Ray; drop --num-cpus and --address, or drop "
                                        "--single-process")
    if not args.out:
        parser.fail("--out", "expected a folder or URI; got an empty string")
    if "://" not in args.out and os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.fail("--out", f"{args.out} is a file; give a folder (it is created if missing)")
    try:
        _filesystem(args.out)
    except (OSError, ValueError) as error:
        parser.fail("--out", f"cannot write to {args.out} ({reason(error)}); give a writable local "
                             "folder or a URI such as s3://bucket/prefix")


def build_parser() -> Parser:
    parser = Parser(prog="python -m data_pipeline.prepare", description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=dataset_name)
    parser.add_argument("--out", required=True, help="output folder or URI (s3://bucket/prefix)")
    parser.add_argument("--n-images", type=whole_number(1), default=None,
                        help="a seeded sample of the grid (default: the whole grid)")
    parser.add_argument("--reduced", action="store_true", help="mpi3d only: the small sub-grid")
    parser.add_argument("--rows-per-shard", type=whole_number(1), default=4096)
    parser.add_argument("--seed", type=whole_number(0), default=0)
    parser.add_argument("--num-cpus", type=whole_number(1), default=None)
    parser.add_argument("--address", default=None,
                        help="Ray address: a cluster's, or 'local' for a fresh local Ray "
                             "(default: the running cluster if any, else a new local one)")
    parser.add_argument("--single-process", action="store_true", help="no Ray: one process")
    parser.add_argument("--from-file", default=None, metavar="FILE",
                        help="convert this downloaded real file into a random-access layout under --out (a "
                             "local folder: images.npy memory map, classes.npy, manifest.json) instead of "
                             "rendering; resumable, checksummed (data_pipeline/random_access.py)")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.from_file:
        from data_pipeline.random_access import convert

        try:
            manifest = convert(args.from_file, args.out, dataset=args.dataset)
        except (ValueError, FileNotFoundError) as error:
            parser.error(str(error))
        print(f"{manifest['n_images']:,} images of {args.from_file} in {args.out}/images.npy, "
              f"random access ({manifest['seconds']:.1f} s)")
        return
    _check_arguments(parser, args)
    options = dict(n_images=args.n_images, reduced=args.reduced, rows_per_shard=args.rows_per_shard,
                   seed=args.seed)
    if args.single_process:
        manifest = prepare_single_process(args.dataset, args.out, **options)
    else:
        manifest = prepare(args.dataset, args.out, num_cpus=args.num_cpus, address=args.address, **options)
    print(f"{manifest['n_images']:,} images in {len(manifest['shards'])} shards under {args.out} "
          f"({manifest['seconds']:.1f} s, {manifest['built_by']})")


if __name__ == "__main__":
    main()
