"""Prepare a dataset in the prepared layout, rendering it in parallel Ray Data blocks.

Run ``python -m data_pipeline.prepare DATASET --out DIR/DATASET [--n-images N] [--seed S]
[--reduced] [--rows-per-block R] [--num-cpus 2] [--address local]``. ``DIR`` is a local folder or
any URI pyarrow's file systems understand (``s3://bucket/prefix``); a sweep then reads it with
``--data-source prepared --data-dir DIR``. Ray Data shows its progress bar while blocks render.

The output is the prepared layout (:mod:`data_pipeline.prepared`): one ``.npy`` block of images
(n, C, H, W) uint8 0..255 per Ray Data task, ``classes.npy``, and ``manifest.json`` with every
file's sha256 and the content id that names the bytes. :func:`prepare_single_process` writes the
same files in one process (``--single-process``: the baseline the benchmark compares against, and
the faster choice on a 2-core laptop).

``--from-file FILE`` converts a downloaded real file (or a user's labelled ``.npz``/``.h5``, with
the dataset ``labelled``) into the same layout instead, streamed a piece at a time and resumable
(:mod:`data_pipeline.conversion`).

This is the only module of ``data_pipeline`` that imports Ray. Do not run it inside trials that
have reserved every CPU: Ray Data then waits forever for a free one.
"""

from __future__ import annotations

import os
import time

import numpy as np

from data_pipeline import prepared
from data_pipeline.cli import Parser, dataset_name, reason, whole_number
from data_pipeline.datasets import GENERATOR_VERSIONS, factor_space, grid_draw, render_stored
from data_pipeline.spaces import canonical_name


def write_rendered_block(dataset: str, index: np.ndarray, first: int, out: str) -> dict:
    """Render grid points ``index`` of ``dataset`` and write them as the block of rows ``first…``;
    its manifest row."""
    dataset = canonical_name(dataset)
    classes = factor_space(dataset).classes_of(np.asarray(index, dtype=np.int64))
    return prepared.write_block(out, first, render_stored(dataset, classes))


def grid_index(dataset: str, n_images: int | None, reduced: bool, seed: int) -> np.ndarray:
    """The flat grid indices to prepare: the generator's seeded draw, or MPI3D's reduced grid."""
    space = factor_space(dataset)
    if n_images is not None and n_images < 1:
        raise ValueError(f"n_images must be at least 1, or None for the whole grid; got {n_images}")
    if reduced:
        if dataset != "mpi3d":
            raise ValueError("--reduced: only mpi3d has a reduced grid")
        from data_pipeline.mpi3d import reduced_classes

        return np.sort(space.index_of(reduced_classes()))
    return grid_draw(space, n_images, seed)


def _image_shape(dataset: str) -> tuple:
    return render_stored(dataset, factor_space(dataset).classes_of([0])).shape[1:]


def _finish(dataset: str, out: str, index: np.ndarray, blocks: list[dict], n_images, reduced: bool,
            seed: int, seconds: float, how: str) -> dict:
    space = factor_space(dataset)
    classes = prepared.write_classes(out, space.classes_of(index))
    source = {"kind": "procedural", "generator_version": GENERATOR_VERSIONS[dataset],
              "n_images": None if len(index) == space.n_images else n_images, "seed": seed,
              "reduced": reduced}
    return prepared.write_manifest(out, dataset, space, _image_shape(dataset), blocks, classes, source, how,
                                   seconds)


def _rows(dataset: str, rows_per_block: int | None) -> int:
    if rows_per_block is not None and rows_per_block < 1:
        raise ValueError(f"rows_per_block must be at least 1; got {rows_per_block}")
    return rows_per_block or prepared.rows_per_block(_image_shape(dataset))


def prepare(dataset: str, out: str, n_images: int | None = None, reduced: bool = False,
            rows_per_block: int | None = None, seed: int = 0, num_cpus: int | None = None,
            address: str | None = None) -> dict:
    """Render ``dataset`` in parallel Ray Data blocks into the prepared layout at ``out``; the
    manifest. Each task renders and writes one block; the driver writes the classes and the
    manifest (never an image).

    Unless this process is already connected to Ray, it calls ``ray.init(address)``: None joins
    the machine's running cluster if there is one, else starts one with ``num_cpus``; ``"local"``
    always starts a fresh one.
    """
    import ray

    dataset = canonical_name(dataset)
    step = _rows(dataset, rows_per_block)
    index = grid_index(dataset, n_images, reduced, seed)
    if not ray.is_initialized():
        ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    start = time.perf_counter()
    # One block per task holding only its first row; the grid indices go to the object store once
    # and each task reads its slice zero-copy.
    index_ref = ray.put(index)
    firsts = list(range(0, len(index), step))
    tasks = ray.data.from_items([{"first": f} for f in firsts], override_num_blocks=len(firsts))

    def render_block(row: dict) -> dict:
        first = int(row["first"])
        return write_rendered_block(dataset, ray.get(index_ref)[first:first + step], first, out)

    blocks = tasks.map(render_block).take_all()
    seconds = time.perf_counter() - start
    return _finish(dataset, out, index, blocks, n_images, reduced, seed, seconds, "ray.data")


def prepare_single_process(dataset: str, out: str, n_images: int | None = None, reduced: bool = False,
                           rows_per_block: int | None = None, seed: int = 0) -> dict:
    """The same blocks and manifest as :func:`prepare`, written by one process."""
    dataset = canonical_name(dataset)
    step = _rows(dataset, rows_per_block)
    index = grid_index(dataset, n_images, reduced, seed)
    start = time.perf_counter()
    blocks = [write_rendered_block(dataset, index[i:i + step], i, out) for i in range(0, len(index), step)]
    return _finish(dataset, out, index, blocks, n_images, reduced, seed, time.perf_counter() - start,
                   "single process")


def _check_arguments(parser, args) -> None:
    """Refuse, before Ray starts, what the types alone cannot: combinations and the output."""
    if args.dataset == "labelled":
        parser.fail("dataset", "labelled data has no generator; convert your file with --from-file FILE")
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
        prepared.filesystem(args.out)
    except (OSError, ValueError) as error:
        parser.fail("--out", f"cannot write to {args.out} ({reason(error)}); give a writable local "
                             "folder or a URI such as s3://bucket/prefix")


def build_parser() -> Parser:
    parser = Parser(prog="python -m data_pipeline.prepare", description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=_dataset_or_labelled,
                        help="a dataset name (or 'labelled' with --from-file: a user's labelled file)")
    parser.add_argument("--out", required=True,
                        help="output folder or URI, by convention DIR/DATASET (s3://bucket/prefix/dsprites)")
    parser.add_argument("--n-images", type=whole_number(1), default=None,
                        help="a seeded sample of the grid (default: the whole grid)")
    parser.add_argument("--reduced", action="store_true", help="mpi3d only: the small sub-grid")
    parser.add_argument("--rows-per-block", type=whole_number(1), default=None,
                        help="images per block (default: about 64 MiB of images)")
    parser.add_argument("--seed", type=whole_number(0), default=0)
    parser.add_argument("--num-cpus", type=whole_number(1), default=None)
    parser.add_argument("--address", default=None,
                        help="Ray address: a cluster's, or 'local' for a fresh local Ray "
                             "(default: the running cluster if any, else a new local one)")
    parser.add_argument("--single-process", action="store_true", help="no Ray: one process")
    parser.add_argument("--from-file", default=None, metavar="FILE",
                        help="convert this downloaded real file (or labelled .npz/.h5) into the prepared "
                             "layout at --out instead of rendering; streamed, resumable, checksummed "
                             "(data_pipeline/conversion.py)")
    return parser


def _dataset_or_labelled(text: str) -> str:
    return "labelled" if text.lower() == "labelled" else dataset_name(text)


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.from_file:
        from data_pipeline.conversion import convert

        if not args.out:
            parser.fail("--out", "expected a folder or URI; got an empty string")
        try:
            manifest = convert(args.from_file, args.out, dataset=args.dataset,
                               rows_per_block=args.rows_per_block)
        except (ValueError, FileNotFoundError, OSError) as error:
            parser.error(reason(error))
        print(f"{manifest['n_images']:,} images of {args.from_file} in {len(manifest['blocks'])} blocks "
              f"under {args.out} (content id {manifest['content_id'][:16]}, {manifest['seconds']:.1f} s)")
        return
    _check_arguments(parser, args)
    options = dict(n_images=args.n_images, reduced=args.reduced, rows_per_block=args.rows_per_block,
                   seed=args.seed)
    if args.single_process:
        manifest = prepare_single_process(args.dataset, args.out, **options)
    else:
        manifest = prepare(args.dataset, args.out, num_cpus=args.num_cpus, address=args.address, **options)
    print(f"{manifest['n_images']:,} images in {len(manifest['blocks'])} blocks under {args.out} "
          f"(content id {manifest['content_id'][:16]}, {manifest['seconds']:.1f} s, {manifest['built_by']})")


if __name__ == "__main__":
    main()
