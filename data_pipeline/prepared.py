"""The prepared layout: one dataset as a manifest plus memory-mappable ``.npy`` blocks with checksums.

Every dataset a sweep trains on is stored this way, wherever it came from (disgen's generators, a
real file, a user's labelled file), in a local folder or at any URI pyarrow's file systems
understand (``s3://bucket/prefix``, ``gs://…``)::

    DIR/<dataset>/manifest.json          what is here: see below
    DIR/<dataset>/classes.npy            (N, F) factor classes, the smallest unsigned dtype that fits
    DIR/<dataset>/images-000000000.npy   (n, C, H, W) uint8 0..255: rows 0..n-1
    DIR/<dataset>/images-000016384.npy   the next block, named by its first row, …

``manifest.json`` holds the format and its version, the dataset's name and factor space (names,
sizes, values), the image count and shape, each block's file, first row, row count, byte count
and sha256 (of the whole ``.npy`` file), the same for ``classes.npy``, where the data came from
(``source``), and the **content id**: the sha256 of the image shape, the blocks' row counts and
checksums and the classes' checksum, so it names the bytes; two folders with the same content id
hold the same data. Blocks are written independently (in parallel Ray Data tasks by
:mod:`data_pipeline.prepare`), the manifest last: a folder without one is unfinished.

:func:`open_dataset` memory-maps a local copy (one :class:`~data_pipeline.datasets.ImageRows`
over its blocks), so every process on a machine reads the same pages. Plain numpy and pyarrow.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from data_pipeline.factors import FactorSpace

FORMAT, VERSION = "disgen-prepared", 1
MANIFEST, CLASSES = "manifest.json", "classes.npy"
BLOCK_BYTES = 64 << 20  # about 64 MiB of images per block unless asked otherwise


def filesystem(uri) -> tuple:
    """(pyarrow file system, path inside it) of a local path or a URI."""
    import pyarrow.fs as pafs

    uri = str(uri)
    if "://" in uri:
        return pafs.FileSystem.from_uri(uri)
    return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(uri))


def join(uri, name: str) -> str:
    uri = str(uri)
    return f"{uri.rstrip('/')}/{name}" if "://" in uri else os.path.join(uri, name)


def normalise(uri) -> str:
    """A local path made absolute; a URI without its trailing slash."""
    uri = str(uri)
    return uri.rstrip("/") if "://" in uri else os.path.abspath(os.path.expanduser(uri))


def rows_per_block(image_shape, block_bytes: int = BLOCK_BYTES) -> int:
    """Rows of images of ``image_shape`` (C, H, W) uint8 in a block of about ``block_bytes``."""
    return max(1, block_bytes // int(np.prod(image_shape)))


def block_name(first: int) -> str:
    return f"images-{int(first):09d}.npy"


def npy_bytes(array: np.ndarray) -> bytes:
    """``array`` as the bytes of an ``.npy`` file (what ``np.save`` writes)."""
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


TEMPORARY = ".tmp"  # the suffix of a file being written (``.<name>.<random>.tmp``); no reader reads one


_S3_CLIENTS: dict = {}
S3_ATTEMPTS = 4  # each S3 request, tried this many times by the SDK before the error is raised


def s3_client():
    """A boto3 S3 client for this process's ``AWS_*`` environment (``AWS_ENDPOINT_URL`` included),
    made once per environment; None without boto3. A request S3 fails (a 503 burst, a lost answer) is
    sent up to 4 times, with backoff (about 7 s in all, as pyarrow's own S3 client absorbs),
    unless ``AWS_MAX_ATTEMPTS`` says otherwise."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        return None
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    if key not in _S3_CLIENTS:
        retries = None if "AWS_MAX_ATTEMPTS" in os.environ else Config(
            retries={"max_attempts": S3_ATTEMPTS, "mode": "standard"})
        _S3_CLIENTS[key] = boto3.session.Session().client(
            "s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None, config=retries)
    return _S3_CLIENTS[key]


def write_whole(fs, path: str, payload: bytes) -> None:
    """Write ``payload`` as the file ``path`` of the pyarrow file system ``fs``, whole or not at
    all: a reader sees the old file (or none) or the new one, never a part, whatever is raised
    meanwhile (a second Ctrl-C, a network error).

    On S3 (with boto3) one ``PutObject`` of the payload: S3 shows the new object whole or not at
    all, and a worker's credentials need no delete (``cluster/iam/worker-policy.json`` denies it
    under ``results-parts/``). Elsewhere, pyarrow's output streams have no abort: closing one, as
    a ``with`` does even when an exception is raised inside it, publishes what was written. So the
    payload is written beside ``path`` under a temporary name (``.<name>.<random>.tmp``) that is
    then renamed over it: ``os.replace`` on a local disk; on another object store, pyarrow's
    ``move``, a server-side copy and the temporary's delete. On any failure the temporary is
    deleted; one left by a killed process holds nothing a reader sees (``analysis.storage.compact``
    clears them)."""
    import pyarrow.fs as pafs

    folder, name = path.rsplit("/", 1) if "/" in path else ("", path)
    if fs.type_name == "s3" and (client := s3_client()) is not None:
        bucket, key = path.split("/", 1)
        from botocore.exceptions import BotoCoreError, ClientError
        try:
            client.put_object(Bucket=bucket, Key=key, Body=payload)
        except (BotoCoreError, ClientError) as error:  # as pyarrow's errors are: the writers retry OSError
            raise OSError(f"s3://{path}: {error}") from error
        return
    if isinstance(fs, pafs.LocalFileSystem):
        import tempfile

        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=f".{name}.", suffix=TEMPORARY)
        try:
            with os.fdopen(fd, "wb") as stream:
                stream.write(payload)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return
    tmp = f"{folder}/" * bool(folder) + f".{name}.{os.urandom(8).hex()}{TEMPORARY}"
    try:
        with fs.open_output_stream(tmp) as stream:
            stream.write(payload)
        try:
            fs.move(tmp, path)  # S3: CopyObject, then the temporary's delete; HDFS: a rename
        except NotImplementedError:  # a file system without a move: its own copy, then the delete
            fs.copy_file(tmp, path)
            fs.delete_file(tmp)
    except BaseException:
        try:
            fs.delete_file(tmp)
        except Exception:  # never written, or the store is unreachable: nothing reads a temporary
            pass
        raise


def _put(uri, name: str, payload: bytes) -> dict:
    fs, base = filesystem(uri)
    if "://" not in str(uri):
        os.makedirs(base, exist_ok=True)
    write_whole(fs, f"{base}/{name}", payload)
    return {"file": name, "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}


def write_block(uri, first: int, images: np.ndarray) -> dict:
    """Write rows ``first…`` of a dataset, (n, C, H, W) uint8, as one block; its manifest row."""
    images = np.asarray(images)
    if images.dtype != np.uint8 or images.ndim != 4 or not len(images):
        raise ValueError(f"a block holds images (n ≥ 1, C, H, W) uint8; got {images.dtype} {images.shape}")
    return {**_put(uri, block_name(first), npy_bytes(images)), "first": int(first), "count": len(images)}


def compact_classes(classes: np.ndarray) -> np.ndarray:
    """Factor classes in the smallest unsigned dtype that holds them (uint8 for every registered
    dataset): the few MB a driver reads to plan splits."""
    classes = np.asarray(classes)
    top = int(classes.max()) if classes.size else 0
    for dtype in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(dtype).max:
            return classes.astype(dtype)
    return classes.astype(np.int64)


def write_classes(uri, classes: np.ndarray) -> dict:
    """Write the factor classes (N, F); their manifest entry."""
    classes = compact_classes(classes)
    return {**_put(uri, CLASSES, npy_bytes(classes)), "dtype": str(classes.dtype)}


def content_id(image_shape, blocks: Iterable[dict], classes: dict) -> str:
    """The sha256 that names a prepared dataset's bytes (see the module docstring)."""
    named = {"image_shape": list(image_shape), "classes": classes["sha256"],
             "blocks": [[int(b["count"]), b["sha256"]] for b in sorted(blocks, key=lambda b: b["first"])]}
    return hashlib.sha256(json.dumps(named, sort_keys=True).encode()).hexdigest()


def write_manifest(uri, dataset: str, space: FactorSpace, image_shape, blocks: list[dict], classes: dict,
                   source: dict, built_by: str, seconds: float) -> dict:
    """Check that the blocks cover rows 0..N-1 once each, then write ``manifest.json`` (last, so
    that a folder with a manifest is finished); the manifest."""
    blocks = sorted(blocks, key=lambda b: b["first"])
    expected = 0
    for block in blocks:
        if block["first"] != expected:
            raise ValueError(f"{uri}: blocks do not cover the rows once each (row {expected} expected, "
                             f"block {block['file']} starts at {block['first']})")
        expected += block["count"]
    manifest = {
        "format": FORMAT, "version": VERSION, "dataset": dataset,
        "factor_names": list(space.names), "factor_sizes": [int(s) for s in space.sizes],
        "factor_values": [np.asarray(v, dtype=float).tolist() for v in space.values],
        "factor_kinds": list(space.kinds),
        "factor_symmetry": [[name, by, [int(k) for k in orders]] for name, by, orders in space.symmetry],
        "n_images": expected, "image_shape": [int(s) for s in image_shape], "dtype": "uint8",
        "blocks": blocks, "classes": classes, "content_id": content_id(image_shape, blocks, classes),
        "source": source, "built_by": built_by, "seconds": round(float(seconds), 3),
    }
    _put(uri, MANIFEST, json.dumps(manifest, indent=1).encode())
    return manifest


def read_manifest(uri) -> dict:
    """A prepared dataset's manifest, checked for its format; FileNotFoundError if there is none,
    ValueError if it is not one disgen wrote."""
    import pyarrow.fs as pafs

    fs, base = filesystem(uri)
    path = f"{base}/{MANIFEST}"
    if fs.get_file_info(path).type != pafs.FileType.File:
        raise FileNotFoundError(f"{join(uri, MANIFEST)}: no such file (not a prepared dataset, or an "
                                "unfinished one)")
    with fs.open_input_stream(path) as stream:
        try:
            manifest = json.loads(stream.read())
        except ValueError:
            raise ValueError(f"{join(uri, MANIFEST)}: not JSON; the folder is damaged") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{join(uri, MANIFEST)}: not a disgen prepared dataset (no format {FORMAT!r}); "
                         "prepare it with python -m data_pipeline.prepare")
    if manifest.get("version") != VERSION:
        raise ValueError(f"{join(uri, MANIFEST)}: prepared layout version {manifest.get('version')}; this "
                         f"disgen reads version {VERSION} (prepare the dataset again)")
    return manifest


def space_of(manifest: dict) -> FactorSpace:
    """The factor space a manifest records: the registered dataset's own where it matches."""
    from data_pipeline.spaces import DATASETS
    from data_pipeline.spaces import factor_space as registered

    names, sizes = tuple(manifest["factor_names"]), tuple(int(s) for s in manifest["factor_sizes"])
    if manifest["dataset"] in DATASETS:
        space = registered(manifest["dataset"])
        if space.names == names and space.sizes == sizes:
            return space
    # manifests written before factor kinds existed: every factor ordinal (FactorSpace's default)
    return FactorSpace(names=names, sizes=sizes,
                       values=tuple(np.asarray(v, dtype=float) for v in manifest["factor_values"]),
                       kinds=tuple(manifest.get("factor_kinds", ())),
                       symmetry=tuple((name, by, tuple(orders))
                                      for name, by, orders in manifest.get("factor_symmetry", ())))


def read_bytes(uri, name: str) -> bytes:
    fs, base = filesystem(uri)
    with fs.open_input_stream(f"{base}/{name}") as stream:
        return stream.read()


def read_classes(uri, manifest: dict | None = None) -> np.ndarray:
    """The factor classes (N, F) int64 of a prepared dataset, checked against its manifest: what a
    driver reads to plan splits and check fits, never the images."""
    manifest = manifest or read_manifest(uri)
    payload = read_bytes(uri, manifest["classes"]["file"])
    if hashlib.sha256(payload).hexdigest() != manifest["classes"]["sha256"]:
        raise ValueError(f"{join(uri, manifest['classes']['file'])}: sha256 differs from the manifest; "
                         "the file is damaged (prepare the dataset again)")
    classes = np.load(io.BytesIO(payload), allow_pickle=False)
    return space_of(manifest).check_classes(classes)


def copy_verified(uri, name: str, sha256: str, destination: Path, chunk: int = 8 << 20) -> None:
    """Copy file ``name`` of a prepared folder to ``destination``, checking its sha256 on the way."""
    fs, base = filesystem(uri)
    digest = hashlib.sha256()
    with fs.open_input_stream(f"{base}/{name}") as source, open(destination, "wb") as out:
        while True:
            piece = source.read(chunk)
            if not piece:
                break
            digest.update(piece)
            out.write(piece)
    if digest.hexdigest() != sha256:
        raise ValueError(f"{join(uri, name)}: sha256 differs from the manifest; the file is damaged "
                         "(prepare the dataset again)")


def file_sha256(path, chunk: int = 8 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for piece in iter(lambda: handle.read(chunk), b""):
            digest.update(piece)
    return digest.hexdigest()


def verify(folder) -> None:
    """Re-check every file of a local prepared folder against its manifest (one pass over the
    bytes); ValueError naming the first damaged file."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    for entry in [manifest["classes"], *manifest["blocks"]]:
        if file_sha256(folder / entry["file"]) != entry["sha256"]:
            raise ValueError(f"{folder / entry['file']}: sha256 differs from the manifest; the file is "
                             "damaged")


def open_dataset(folder, manifest: dict | None = None):
    """The prepared dataset in local ``folder``, its blocks memory-mapped read-only (one
    :class:`~data_pipeline.datasets.ImageRows`). File sizes and shapes are checked against the
    manifest (cheap); :func:`verify` re-reads the checksums.

    ``observe`` (the grid points the BetaVAE and FactorVAE scores sample) indexes the data where
    it holds the whole factor grid, renders where it came from disgen's generator, and is None
    otherwise."""
    import functools

    from data_pipeline.datasets import GroundTruthDataset, ImageRows, render_stored
    from data_pipeline.subsets import grid_rows, observe_grid

    folder = Path(folder)
    manifest = manifest or read_manifest(folder)
    shape = tuple(manifest["image_shape"])
    blocks = []
    for entry in manifest["blocks"]:
        path = folder / entry["file"]
        if not path.is_file() or path.stat().st_size != entry["bytes"]:
            raise ValueError(f"{path}: missing or of the wrong size ({entry['bytes']:,} bytes expected); "
                             "the prepared folder is damaged")
        block = np.load(path, mmap_mode="r", allow_pickle=False)
        if block.shape != (entry["count"], *shape) or block.dtype != np.uint8:
            raise ValueError(f"{path}: holds {block.dtype} {block.shape}; the manifest says uint8 "
                             f"{(entry['count'], *shape)}")
        blocks.append(block)
    space = space_of(manifest)
    classes = space.check_classes(np.load(folder / manifest["classes"]["file"], allow_pickle=False))
    images = blocks[0] if len(blocks) == 1 else ImageRows(blocks)
    data = GroundTruthDataset(manifest["dataset"], images, classes, space)
    row_of_index = grid_rows(data) if manifest["dataset"] != "labelled" else None
    if row_of_index is not None:
        data.observe = functools.partial(observe_grid, images, row_of_index, space)
    elif manifest["source"].get("kind") == "procedural":
        data.observe = functools.partial(render_stored, manifest["dataset"])
    return data
