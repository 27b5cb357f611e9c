"""A node's cache of datasets: what a trial is handed (a :class:`DatasetReference`) made into
memory-mapped images, once per node.

A trial never receives images. It receives a reference: which dataset, where its bytes are (a
prepared folder or URI, a real file, or disgen's generator) and the **content id** that names
them. :func:`open_reference` materialises the reference into this node's cache folder, once,
then memory-maps it, so every trial process on the node reads one copy of the images (the page
cache's), and none travels through Ray's object store:

- **prepared** (``DIR/<dataset>/`` as ``python -m data_pipeline.prepare`` wrote it, locally or at
  ``s3://…``): its files are copied, each checked against the manifest's sha256 on the way;
- **file** (a real file from ``--data-dir``): converted into the prepared layout
  (:func:`data_pipeline.conversion.convert`);
- **procedural**: rendered by the generator, a block at a time, into the same layout.

The cache folder is ``$DISGEN_CACHE``, else ``$XDG_CACHE_HOME/disgen``, else ``~/.cache/disgen``
(on a cluster whose home folders are shared, point ``DISGEN_CACHE`` at a local disk). An entry
``<dataset>-<content id>/`` is a prepared folder. It is built under an exclusive file lock
(``fcntl``) in a temporary folder, verified against its manifest, and renamed into place, so a
reader sees a whole entry or none, and processes that start together wait for the one that
builds it. Each build appends one line to ``materialisations.jsonl`` in the cache folder (and
prints one), so a test or an operator can count them. Nothing is ever evicted: delete an entry
(or the folder) to reclaim its space. Plain Python and numpy; no Ray.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import os
import shutil
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from data_pipeline import prepared
from data_pipeline.datasets import (
    GENERATOR_VERSIONS,
    GroundTruthDataset,
    factor_space,
    grid_draw,
    render_stored,
)
from data_pipeline.spaces import canonical_name

LOG = "materialisations.jsonl"
KINDS = ("procedural", "prepared", "file")


@dataclass(frozen=True)
class DatasetReference:
    """Where a dataset's bytes are and the content id that names them: what a trial is handed.

    ``kind`` is ``prepared`` (``uri``: the prepared folder; ``content_id``: its manifest's, the
    sha256 of its bytes), ``file`` (``uri``: the real file's path; ``content_id``: a hash of the
    file's name, size and modification time, since hashing a multi-GB file would read it whole)
    or ``procedural`` (``uri``: ``generator:<dataset>``; ``content_id``: a hash of the generator's
    version and the grid points drawn, ``n_images`` and ``seed``, which fix the bytes)."""

    kind: str
    dataset: str
    uri: str
    content_id: str
    n_images: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}; got {self.kind!r}")

    @property
    def entry(self) -> str:
        """This reference's folder name in a node cache."""
        return f"{self.dataset}-{self.content_id[:24]}"

    def to_dict(self) -> dict:
        return asdict(self)


def _hash(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def procedural_reference(dataset: str, n_images: int | None, seed: int) -> DatasetReference:
    """The grid points a generator renders for (``n_images``, ``seed``); computed, not rendered."""
    dataset = canonical_name(dataset)
    index = grid_draw(factor_space(dataset), n_images, seed)
    if len(index) == factor_space(dataset).n_images:  # the whole grid, whatever was asked
        n_images, seed = None, 0
    content = {"generator": dataset, "version": GENERATOR_VERSIONS[dataset],
               "grid_index": hashlib.sha256(index.tobytes()).hexdigest()}
    return DatasetReference("procedural", dataset, f"generator:{dataset}", _hash(content), n_images, seed)


def prepared_reference(uri: str, manifest: dict | None = None) -> DatasetReference:
    """A prepared folder (local or a URI), named by its manifest's content id."""
    uri = prepared.normalise(uri)
    manifest = manifest or prepared.read_manifest(uri)
    return DatasetReference("prepared", manifest["dataset"], uri, manifest["content_id"])


def file_reference(dataset: str, path, identity: dict) -> DatasetReference:
    """A real file (``identity``: its name, bytes and modification time, from
    :class:`~data_pipeline.conversion.RealFile`)."""
    content = {"dataset": dataset, **identity}
    return DatasetReference("file", dataset, os.path.abspath(path), _hash(content))


def cache_root(cache_dir=None) -> Path:
    """The node's cache folder: ``cache_dir``, else ``$DISGEN_CACHE``, else
    ``$XDG_CACHE_HOME/disgen``, else ``~/.cache/disgen``."""
    if cache_dir is not None:
        return Path(cache_dir)
    if os.environ.get("DISGEN_CACHE"):
        return Path(os.environ["DISGEN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "disgen"


def materialisations(cache_dir=None) -> list[dict]:
    """The log of this cache's builds, one dict per materialisation, oldest first."""
    path = cache_root(cache_dir) / LOG
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _render(reference: DatasetReference, out: Path) -> dict:
    """Render a procedural reference into ``out``, a block at a time; its manifest."""
    started = time.perf_counter()
    name, space = reference.dataset, factor_space(reference.dataset)
    index = grid_draw(space, reference.n_images, reference.seed)
    image_shape = render_stored(name, space.classes_of(index[:1])).shape[1:]
    step = prepared.rows_per_block(image_shape)
    render = lambda rows: render_stored(name, space.classes_of(rows))  # noqa: E731
    blocks = [prepared.write_block(out, first, render(index[first:first + step]))
              for first in range(0, len(index), step)]
    classes = prepared.write_classes(out, space.classes_of(index))
    source = {"kind": "procedural", "generator_version": GENERATOR_VERSIONS[name],
              "n_images": reference.n_images, "seed": reference.seed}
    return prepared.write_manifest(out, name, space, image_shape, blocks, classes, source, "node cache",
                                   time.perf_counter() - started)


def _copy(reference: DatasetReference, out: Path) -> dict:
    """Copy a prepared folder into ``out``, every file checked against its manifest."""
    manifest = prepared.read_manifest(reference.uri)
    if manifest["content_id"] != reference.content_id:
        raise ValueError(f"{reference.uri}: its content id is {manifest['content_id'][:16]}…, not the "
                         f"{reference.content_id[:16]}… the sweep was planned with: the prepared data "
                         "changed since; start a new experiment (--name) for the new data")
    out.mkdir(parents=True, exist_ok=True)
    for entry in [manifest["classes"], *manifest["blocks"]]:
        prepared.copy_verified(reference.uri, entry["file"], entry["sha256"], out / entry["file"])
    (out / prepared.MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def _convert(reference: DatasetReference, out: Path) -> dict:
    from data_pipeline.conversion import RealFile, convert

    source = RealFile(reference.uri, reference.dataset)
    if file_reference(reference.dataset, reference.uri, source.identity).content_id != reference.content_id:
        raise ValueError(f"{reference.uri}: the file changed (size or modification time) since the sweep "
                         "was planned; start a new experiment (--name) for the new file")
    return convert(reference.uri, out, dataset=reference.dataset, progress=False)


BUILDERS = {"procedural": _render, "prepared": _copy, "file": _convert}


def materialise(reference: DatasetReference, cache_dir=None) -> Path:
    """This node's prepared folder for ``reference``: built once (see the module docstring), then
    found. Safe for any number of processes at once."""
    root = cache_root(cache_dir)
    final = root / reference.entry
    if (final / prepared.MANIFEST).is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{reference.entry}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if (final / prepared.MANIFEST).is_file():  # built by another process while this one waited
            return final
        for stale in root.glob(f".{reference.entry}.tmp-*"):  # a build that died: nobody else holds it
            shutil.rmtree(stale, ignore_errors=True)
        building = root / f".{reference.entry}.tmp-{os.getpid()}"
        building.mkdir()
        started = time.perf_counter()
        try:
            manifest = BUILDERS[reference.kind](reference, building)
            if reference.kind != "prepared":  # a copy was checked byte by byte on the way in
                prepared.verify(building)
            os.rename(building, final)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        seconds = time.perf_counter() - started
        size = sum(entry["bytes"] for entry in manifest["blocks"])
        record = {"at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                  "host": socket.gethostname(), "pid": os.getpid(), "kind": reference.kind,
                  "dataset": reference.dataset, "uri": reference.uri, "content_id": reference.content_id,
                  "n_images": manifest["n_images"], "bytes": size, "seconds": round(seconds, 3)}
        with open(root / LOG, "a") as log:
            log.write(json.dumps(record) + "\n")
        print(f"disgen: materialised {reference.kind} {reference.dataset} ({manifest['n_images']:,} images, "
              f"{size / 2**20:,.0f} MiB) into {final} in {seconds:.1f} s", flush=True)
    return final


def open_reference(reference: DatasetReference, n_images: int | None = None, seed: int = 0,
                   cache_dir=None) -> GroundTruthDataset:
    """The dataset a trial trains on: ``reference`` materialised in this node's cache (once) and
    memory-mapped, then ``n_images`` rows chosen with ``seed`` as an index set
    (:func:`data_pipeline.subsets.subset_rows`). A procedural reference already holds just the
    grid points drawn for its own ``n_images`` and ``seed``. A subset keeps the stored data's
    ``observe`` wherever it has one (a generator renders any grid point, and a whole-grid file
    indexes any grid point from the same memory map), so its evaluation can draw held-out images
    and score pools from the whole grid."""
    from data_pipeline.subsets import subset_rows

    folder = materialise(reference, cache_dir)
    manifest = prepared.read_manifest(folder)
    data = prepared.open_dataset(folder, manifest)
    if reference.kind == "procedural":
        return data
    rows = subset_rows(data.name, data.classes, data.factor_space, n_images, seed)
    if rows is None:
        return data
    return data.subset(rows, observe=True)

