"""Prepare a dataset in the prepared layout as a Ray Data pipeline: read, ``map_batches``, write.

Run ``python -m data_pipeline.prepare DATASET --out DIR/DATASET [--n-images N] [--seed S]
[--reduced] [--rows-per-block R] [--num-cpus 2] [--address local]``, or with ``--from-file FILE``
to convert a downloaded real file (or a user's labelled ``.npz``/``.h5``, with the dataset
``labelled``; or a set of D21's robot-finger folder, with the dataset ``finger``,
``finger_heldout_colors`` or ``finger_real`` and ``--from-file DIR/robot_finger_datasets``: its
read tasks each read their shard of the PNG tar by offset, :mod:`data_pipeline.robot_finger`).
``DIR`` is a local folder or any URI pyarrow's file systems understand
(``s3://bucket/prefix``); a sweep then reads it with ``--data-source prepared --data-dir DIR``.

:func:`prepare` reads its source with Ray Data (a custom ``Datasource``): the generator's grid
indices, one read task per shard holding its slice of the seeded draw, or a real file's image rows
by position (npz members from their offset, hdf5 in whole chunks; a compressed npz member, which
cannot seek, is streamed by one read task). ``map_batches`` renders the grid points, or converts
the file's rows, to (n, C, H, W) uint8 0..255, and a ``Datasink`` writes each shard as one block
of the prepared layout (:mod:`data_pipeline.prepared`), whole or absent, with its checksum; the
manifest, which lists every shard's sha256 so that a node can fetch and check each on its own, is
written once at the end (``on_write_complete``). Read, render and write are fused into one task
per shard, so no image passes through the driver or waits in the object store. A real file is
read on the node that runs the command (its read tasks are pinned there). An interrupted build
keeps, on a rerun, every shard whose record (``progress-<first row>.json``, deleted at the end)
matches and whose checksum holds.

:func:`prepare_single_process` (``--single-process``) writes the same files in one process, and
:func:`~data_pipeline.conversion.convert` (``--from-file FILE --single-process``) the same
conversion: the baselines the benchmark compares against (benchmarks/prepare_dataset.py), and the
faster choice on a 2-core laptop. The bytes and the manifest are the same either way, but for who
built it and how long it took.

This is the only module of ``data_pipeline`` that imports Ray, and only when :func:`prepare` runs.
Do not run it inside trials that have reserved every CPU: Ray Data then waits forever for a free
one.
"""

from __future__ import annotations

import functools
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
    source = _procedural_source(dataset, index, n_images, reduced, seed)
    return prepared.write_manifest(out, dataset, space, _image_shape(dataset), blocks, classes, source, how,
                                   seconds)


def _procedural_source(dataset: str, index: np.ndarray, n_images, reduced: bool, seed: int) -> dict:
    """The ``source`` a generated dataset's manifest records."""
    whole = len(index) == factor_space(dataset).n_images
    return {"kind": "procedural", "generator_version": GENERATOR_VERSIONS[dataset],
            "n_images": None if whole else n_images, "seed": seed, "reduced": reduced}


def _rows(dataset: str, rows_per_block: int | None) -> int:
    if rows_per_block is not None and rows_per_block < 1:
        raise ValueError(f"rows_per_block must be at least 1; got {rows_per_block}")
    return rows_per_block or prepared.rows_per_block(_image_shape(dataset))


# The private Ray names this module uses (Ray Data's edge), each checked against the Ray version it
# was read from (tests/sweeps/test_ray_edge.py, with the sweep side's: sweeps.ray_edge.PRIVATE).
PRIVATE = {"ray._private.services.canonicalize_bootstrap_address": "where --address auto would connect"}


def missing_cluster(address: str | None) -> str | None:
    """Why ``ray.init(address)`` would find no cluster to join, as one line; None if it would.

    Only ``auto`` is looked up (as Ray looks it up: ``$RAY_ADDRESS``, a ``ray start`` on this
    machine, a running Ray instance here), so that a command asked to join a cluster where none
    runs says so, and what to do, before it starts, instead of a traceback from ``ray.init``."""
    if address != "auto":
        return None
    try:
        from ray._private.services import canonicalize_bootstrap_address

        canonicalize_bootstrap_address("auto")
    except ConnectionError:
        return ("--address auto: no Ray cluster runs on this machine; start one (`ray up cluster.yaml` "
                "from your laptop and run this on its head node, or `ray start --head` here), or drop "
                "--address to run on a private local Ray")
    except Exception:  # a private API: if it moves, leave the answer to ray.init
        return None
    return None


PROGRESS = "progress-"  # a finished shard's record during a build: progress-<first row>.json


def prepare(dataset: str, out: str, n_images: int | None = None, reduced: bool = False,
            rows_per_block: int | None = None, seed: int = 0, num_cpus: int | None = None,
            address: str | None = None, from_file=None) -> dict:
    """Build ``dataset`` into the prepared layout at ``out`` as a Ray Data pipeline; the manifest.

    The source is read with Ray Data: the generator's grid indices (one read task per shard, each
    holding its slice of the draw), or with ``from_file`` a real file's image rows (one read task
    per shard, reading its rows by position; a compressed npz member, which cannot seek, in one
    task that streams them). ``map_batches`` renders the grid points (or converts the file's rows)
    to (n, C, H, W) uint8, and a :class:`ray.data.Datasink` writes each shard as one block, whole
    or absent, with a record of its checksum; the manifest, listing every shard's sha256, is
    written once at the end, after ``classes.npy`` (which the driver writes before the pipeline
    runs, from the labels it already holds). The files are the same bytes as
    :func:`prepare_single_process` (or :func:`~data_pipeline.conversion.convert`) writes.

    A rerun after an interruption keeps the shards whose record matches this build and whose
    checksum still holds, and renders only the others; a finished conversion of the same file is
    not redone.

    Unless this process is already connected to Ray, it calls ``ray.init(address)``: None joins
    ``$RAY_ADDRESS`` where set, else starts a fresh local Ray with ``num_cpus`` (as ``"local"``
    does), even where another Ray runs on this machine (a test's, another user's: joining it would
    put the build on that cluster's resources); ``"auto"`` joins the machine's running cluster. That
    connection is closed (a Ray it started, stopped) when the build ends, whole or not. A
    generator's shards spread over the cluster; a real file is read, converted and written on the
    driver's node (its read tasks are pinned there, and Ray Data fuses the three steps into one task
    per shard).
    """
    if from_file is not None:
        from data_pipeline import conversion

        source = conversion.open_source(from_file, dataset)
        step = conversion.block_rows(source, rows_per_block)
        identity = conversion.file_identity(source, step)
        try:
            manifest = prepared.read_manifest(out)
            if manifest.get("source") == identity:
                return manifest
        except (FileNotFoundError, ValueError):
            pass
        from data_pipeline.loaders import verify_checksum

        if source.path.is_file():  # a warning if it differs from the published checksum, as convert
            verify_checksum(source.path)
        name, space, image_shape = source.name, source.factor_space, source.image_shape
        classes, n, recorded = source.classes, source.n, identity
    else:
        name = canonical_name(dataset)
        step = _rows(name, rows_per_block)
        index = grid_index(name, n_images, reduced, seed)
        space, image_shape, n = factor_space(name), _image_shape(name), len(index)
        classes = space.classes_of(index)
        recorded = _procedural_source(name, index, n_images, reduced, seed)
        identity = {**recorded, "rows_per_block": step}
    import ray

    started = not ray.is_initialized()
    if started:  # a Ray of its own: stopped when the build ends, as the process's other work goes on
        address = address or os.environ.get("RAY_ADDRESS") or "local"
        ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        start = time.perf_counter()
        kept = _finished_shards(out, identity)
        shards = [(first, min(step, n - first)) for first in range(0, n, step) if first not in kept]
        classes_entry = prepared.write_classes(out, classes)
        ShardSource, ShardSink = _ray_classes()
        sink = ShardSink(out, step, n, identity, list(kept.values()),
                         dict(dataset=name, space=space, image_shape=image_shape, classes=classes_entry,
                              source=recorded, built_by="ray.data"), start)
        if not shards:  # every shard was written by an earlier, interrupted run
            sink.finish([])
            return sink.manifest
        if from_file is not None:
            rows = source.rows()
            binary = source.binary
            # one read task per shard, or one for them all where the file cannot seek; as many blocks
            # as tasks, so that Ray Data splits no shard between tasks
            groups = [[shard] for shard in shards] if rows.seekable() else [shards]
            read = ray.data.read_datasource(ShardSource(groups, rows=rows), override_num_blocks=len(groups))
            if binary is None:  # M22's files hold 0/1 or 0/255 pixels: a first pass finds which
                tops = read.map_batches(lambda batch: {"top": [int(batch["raw"].max(initial=0))]},
                                        batch_size=None)
                binary = tops.max("top") <= 1
            where = f"{source.path}: {source.key}"
            pipeline = read.map_batches(functools.partial(_convert_batch, binary, where), batch_size=None)
        else:
            groups = [[shard] for shard in shards]
            read = ray.data.read_datasource(ShardSource(groups, index=index), override_num_blocks=len(groups))
            pipeline = read.map_batches(functools.partial(_render_batch, name), batch_size=None)
        pipeline.write_datasink(sink)
        return sink.manifest or prepared.read_manifest(out)
    finally:
        if started:
            ray.shutdown()


def _render_batch(dataset: str, batch: dict) -> dict:
    """``map_batches``: the grid points of a batch of rows, rendered as the prepared layout stores
    them."""
    classes = factor_space(dataset).classes_of(np.asarray(batch["index"], dtype=np.int64))
    return {"row": batch["row"], "image": render_stored(dataset, classes)}


def _convert_batch(binary: bool, where: str, batch: dict) -> dict:
    """``map_batches``: a batch of a real file's rows, as the prepared layout stores them."""
    from data_pipeline.conversion import stored_layout

    return {"row": batch["row"], "image": stored_layout(batch["raw"], binary, where)}


def _finished_shards(out, identity: dict) -> dict:
    """The shards an interrupted build of the same data wrote, by first row: those whose record
    names this build and whose file still holds the recorded checksum (a damaged one is written
    again)."""
    import hashlib
    import json

    import pyarrow.fs as pafs

    fs, base = prepared.filesystem(out)
    try:
        found = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    except OSError:
        return {}
    kept = {}
    for info in found:
        if not (info.base_name.startswith(PROGRESS) and info.base_name.endswith(".json")):
            continue
        try:
            record = json.loads(prepared.read_bytes(out, info.base_name))
            block = record["block"]
            if record.get("source") != identity:
                continue
            if hashlib.sha256(prepared.read_bytes(out, block["file"])).hexdigest() == block["sha256"]:
                kept[block["first"]] = block
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return kept


@functools.cache
def _ray_classes() -> tuple:
    """The Ray Data source and sink of :func:`prepare`, defined on first use so that importing
    this module (for :func:`prepare_single_process` or the command line's checks) never imports
    Ray."""
    import json

    import pyarrow as pa
    from ray.data import Datasink, Datasource, ReadTask
    from ray.data.block import BlockAccessor, BlockMetadata

    class ShardSource(Datasource):
        """One read task per group of shards (first row, row count), one block per shard: columns
        ``row`` and the grid ``index`` (from ``index``) or the file's ``raw`` images (from ``rows``,
        a :class:`~data_pipeline.conversion.FileRows`)."""

        def __init__(self, groups: list, index: np.ndarray | None = None, rows=None):
            super().__init__()
            self.groups, self.index, self.rows = groups, index, rows

        def estimate_inmemory_data_size(self):
            return None

        @property
        def supports_distributed_reads(self) -> bool:
            """A file is read where it is: Ray Data pins the read tasks to the driver's node."""
            return self.rows is None

        def get_read_tasks(self, parallelism: int, per_task_row_limit=None, data_context=None) -> list:
            tasks = []
            for group in self.groups:
                count = sum(c for _, c in group)
                metadata = BlockMetadata(num_rows=count, size_bytes=None, exec_stats=None, input_files=None)
                if self.rows is None:
                    (first, _), = group
                    read = functools.partial(_index_block, first, self.index[first:first + count])
                else:
                    read = functools.partial(_file_blocks, self.rows, group)
                tasks.append(ReadTask(read, metadata))
            return tasks

    def _index_block(first: int, index: np.ndarray) -> list:
        return [pa.table({"row": np.arange(first, first + len(index)), "index": index})]

    def _file_blocks(rows, group: list):
        for first, raw in rows.pieces(group):
            yield BlockAccessor.batch_to_block({"row": np.arange(first, first + len(raw)), "raw": raw})

    class ShardSink(Datasink):
        """Writes each shard (rows ``first…``, ``step`` of them, fewer at the end) as one block of
        the prepared layout, whole or absent, and a record of it (``progress-<first>.json``); at
        the end, on the driver, the manifest of every shard, then the records are deleted.

        A write task receives the blocks of the shards its read tasks read (read, render and
        write are fused into one task); a shard reaching a write task incomplete is an error."""

        def __init__(self, out, step: int, n: int, identity: dict, kept: list, manifest: dict,
                     started: float):
            self.out, self.step, self.n, self.identity = out, step, n, identity
            self.kept, self.manifest_fields, self.started = kept, manifest, started
            self.manifest = None

        def write(self, blocks, ctx) -> list:
            pending, written = {}, []
            for block in blocks:
                batch = BlockAccessor.for_block(block).to_batch_format("numpy")
                rows, images = np.asarray(batch["row"]), np.asarray(batch["image"])
                for first in np.unique(rows - rows % self.step).tolist():
                    mine = (rows >= first) & (rows < first + self.step)
                    piece = (rows, images) if mine.all() else (rows[mine], images[mine])  # no copy if whole
                    pending.setdefault(first, []).append(piece)
                    if sum(len(r) for r, _ in pending[first]) == min(self.step, self.n - first):
                        written.append(self._write_shard(first, pending.pop(first)))
            if pending:
                raise RuntimeError(f"{self.out}: shards starting at rows {sorted(pending)} reached a write "
                                   "task incomplete; nothing of them was written")
            return written

        def _write_shard(self, first: int, pieces: list) -> dict:
            rows = np.concatenate([r for r, _ in pieces])
            expected = np.arange(first, first + len(rows))
            if len(pieces) == 1 and np.array_equal(rows, expected):  # the usual case: one block, in order
                images = pieces[0][1]
            else:
                order = np.argsort(rows, kind="stable")
                if not np.array_equal(rows[order], expected):
                    raise RuntimeError(f"{self.out}: shard {first} holds rows other than "
                                       f"{first}…{first + len(rows) - 1}")
                images = np.concatenate([i for _, i in pieces])[order]
            block = prepared.write_block(self.out, first, images)
            record = {"source": self.identity, "block": block}
            prepared._put(self.out, f"{PROGRESS}{first:09d}.json", json.dumps(record).encode())
            return block

        def on_write_complete(self, write_result) -> None:
            self.finish([block for returned in write_result.write_returns for block in returned])

        def finish(self, written: list) -> None:
            """Write the manifest of the kept and the written shards (last: the folder is then
            finished), then delete every shard record in the folder."""
            import pyarrow.fs as pafs

            fields = self.manifest_fields
            self.manifest = prepared.write_manifest(
                self.out, fields["dataset"], fields["space"], fields["image_shape"], [*self.kept, *written],
                fields["classes"], fields["source"], fields["built_by"], time.perf_counter() - self.started)
            fs, base = prepared.filesystem(self.out)
            for info in fs.get_file_info(pafs.FileSelector(base)):
                if info.base_name.startswith(PROGRESS) and info.base_name.endswith(".json"):
                    try:
                        fs.delete_file(info.path)
                    except OSError:  # gone already; a leftover record is ignored by a finished folder
                        pass

    return ShardSource, ShardSink


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
    from data_pipeline.robot_finger import is_finger

    if args.dataset == "labelled":
        parser.fail("dataset", "labelled data has no generator; convert your file with --from-file FILE")
    if is_finger(args.dataset):
        parser.fail("dataset", f"{args.dataset} has no generator; convert D21's files with --from-file "
                               "DIR/robot_finger_datasets (docs/datasets.md)")
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
                        help="a dataset name (or 'labelled' with --from-file: a user's labelled file; or "
                             "finger, finger_heldout_colors, finger_real with --from-file: a set of "
                             "D21's robot_finger_datasets folder)")
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
                        help="Ray address: a cluster's, 'auto' for the cluster running on this machine, "
                             "or 'local' (default, unless $RAY_ADDRESS is set): a fresh local Ray")
    parser.add_argument("--single-process", action="store_true", help="no Ray: one process")
    parser.add_argument("--from-file", default=None, metavar="FILE",
                        help="convert this downloaded real file (or labelled .npz/.h5) into the prepared "
                             "layout at --out instead of rendering; streamed, resumable, checksummed "
                             "(data_pipeline/conversion.py)")
    return parser


def _dataset_or_labelled(text: str) -> str:
    from data_pipeline.robot_finger import is_finger

    if text.lower() == "labelled" or is_finger(text):
        return text.lower()
    return dataset_name(text)


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.single_process and (problem := missing_cluster(args.address)):
        parser.exit(2, f"{parser.prog}: error: {problem}\n")
    if args.from_file:
        from data_pipeline.conversion import convert

        if not args.out:
            parser.fail("--out", "expected a folder or URI; got an empty string")
        if args.single_process and (args.num_cpus is not None or args.address is not None):
            parser.fail("--single-process", "runs without Ray; drop --num-cpus and --address, or drop "
                                            "--single-process")
        try:  # the file is opened and checked before Ray starts
            if args.single_process:
                manifest = convert(args.from_file, args.out, dataset=args.dataset,
                                   rows_per_block=args.rows_per_block)
            else:
                manifest = prepare(args.dataset, args.out, rows_per_block=args.rows_per_block,
                                   num_cpus=args.num_cpus, address=args.address, from_file=args.from_file)
        except (ValueError, FileNotFoundError, OSError) as error:
            parser.error(reason(error))
        print(f"{manifest['n_images']:,} images of {args.from_file} in {len(manifest['blocks'])} blocks "
              f"under {args.out} (content id {manifest['content_id'][:16]}, {manifest['seconds']:.1f} s, "
              f"{manifest['built_by']})")
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
