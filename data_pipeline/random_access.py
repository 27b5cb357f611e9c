"""Convert a downloaded real file, once, into a layout that reads random batches quickly.

The real ``3dshapes.h5`` stores its images gzip-compressed in chunks of (15000, 4, 4, 1): the
layout h5py picks by itself for a (480000, 64, 64, 3) uint8 dataset, as it picked (23040, 2, 4)
for the dSprites hdf5, which disent records. One image touches 768 chunks of 15,000 images
each, so a random batch decompresses gigabytes (disent measured about 3 images/s and re-saves
the file). Here the file becomes ``images.npy``: (N, C, H, W) uint8, the layout of
:class:`~data_pipeline.datasets.GroundTruthDataset`, which ``np.load(mmap_mode="r")`` maps, so a
random batch of 64 reads 64 contiguous 12 KiB rows. ``classes.npy`` holds the factor classes.

Run ``python -m data_pipeline.prepare DATASET --from-file FILE --out DIR`` (or call
:func:`convert`). It reads the source in pieces aligned to its chunks (npz members are streamed,
never loaded whole), writes ``images.npy.part`` and records each finished piece's sha256 in
``progress.json``; an interrupted run continues after the last verified piece. When all pieces
are in, the file is renamed to ``images.npy`` and ``manifest.json`` lists the pieces and their
sha256, like the shards of :mod:`data_pipeline.prepare`. :func:`load` reads it back, checked.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from data_pipeline.datasets import GroundTruthDataset
from data_pipeline.factors import FactorSpace
from data_pipeline.spaces import canonical_name, dsprites_space, mpi3d_space, shapes3d_space

IMAGES, CLASSES, MANIFEST, PROGRESS = "images.npy", "classes.npy", "manifest.json", "progress.json"
LAYOUT = "random access: images.npy (N, C, H, W) uint8, memory-mappable; classes.npy (N, F) int64"
DEFAULT_PIECE = 10_000


class _Source:
    """A real file read piece by piece: ``n``, ``image_shape`` (C, H, W), ``classes``, ``space``,
    ``step`` (the piece length that matches its storage) and ``pieces(start)``."""

    def __init__(self, path: Path, dataset: str):
        from data_pipeline import loaders

        self.path, self.dataset = path, dataset
        suffix = path.suffix.lower()
        if dataset == "shapes3d":
            self._h5("images", "labels", shapes3d_space(), loaders)
        elif dataset == "dsprites" and suffix in (".hdf5", ".h5"):
            self._h5("imgs", "latents_classes", dsprites_space(), loaders)
        elif dataset == "dsprites":
            self._npz("imgs", dsprites_space(), loaders)
        elif dataset == "mpi3d":
            self._npz("images", None, loaders)
        else:
            raise ValueError(f"{path}: no random-access conversion for {dataset!r}; "
                             "expected dsprites, shapes3d or mpi3d")

    def _h5(self, image_key: str, label_key: str, space: FactorSpace, loaders) -> None:
        import h5py

        with h5py.File(self.path, "r") as data:
            images = loaders._key(data, image_key, self.path)
            labels = loaders._key(data, label_key, self.path)
            self.n, self.step = images.shape[0], (images.chunks or (DEFAULT_PIECE,))[0]
            if self.dataset == "shapes3d":
                loaders._expect(f"{self.path}: images", images, shape=(None, 64, 64, 3), dtype=np.uint8)
                loaders._expect(f"{self.path}: labels", labels, shape=(None, 6), length=self.n)
                self.classes = loaders._classes_from_values(labels[()], space, self.path)
            else:
                loaders._expect(f"{self.path}: imgs", images, shape=(None, 64, 64), dtype=np.integer)
                loaders._expect(f"{self.path}: latents_classes", labels, shape=(None, 6), length=self.n)
                self.classes = space.check_classes(labels[()][:, 1:])
        self.space, self.key = space, image_key
        self.image_shape = (3, 64, 64) if self.dataset == "shapes3d" else (1, 64, 64)

    def _npz(self, image_key: str, space: FactorSpace | None, loaders) -> None:
        with zipfile.ZipFile(self.path) as archive, archive.open(self._member(archive, image_key)) as member:
            shape, dtype = _npy_header(member)
        self.n, self.key, self.step = shape[0], image_key, DEFAULT_PIECE
        if self.dataset == "dsprites":
            if shape[1:] != (64, 64) or not np.issubdtype(dtype, np.integer):
                raise ValueError(f"{self.path}: imgs: expected (N, 64, 64) integers; got {dtype} {shape}")
            with np.load(self.path, allow_pickle=False) as data:
                self.classes = space.check_classes(loaders._key(data, "latents_classes", self.path)[:, 1:])
            self.image_shape = (1, 64, 64)
        else:
            if shape[1:] != (64, 64, 3) or dtype != np.uint8:
                raise ValueError(f"{self.path}: images: expected (N, 64, 64, 3) uint8; got {dtype} {shape}")
            if self.n not in loaders.MPI3D_SIZES_BY_LENGTH:
                lengths = " or ".join(f"{k:,}" for k in loaders.MPI3D_SIZES_BY_LENGTH)
                raise ValueError(f"{self.path}: images: expected length {lengths}; got {self.n:,}")
            space = mpi3d_space(*loaders.MPI3D_SIZES_BY_LENGTH[self.n])
            self.classes = space.all_classes()
            self.image_shape = (3, 64, 64)
        if len(self.classes) != self.n:
            raise ValueError(f"{self.path}: expected one class row per image ({self.n:,}); "
                             f"got {len(self.classes):,}")
        self.space, self.dtype, self.row_shape = space, dtype, shape[1:]

    def _member(self, archive: zipfile.ZipFile, key: str) -> str:
        names = archive.namelist()
        if key + ".npy" not in names:
            raise ValueError(f"{self.path}: expected key {key!r}; the file holds "
                             f"{', '.join(n.removesuffix('.npy') for n in names)}")
        return key + ".npy"

    def pieces(self, start: int, step: int) -> Iterator[tuple[int, np.ndarray]]:
        """(first index, images (n, C, H, W) uint8) from ``start`` to the end, ``step`` at a time."""
        binary = self.dataset == "dsprites"
        if self.path.suffix.lower() == ".npz":
            with zipfile.ZipFile(self.path) as archive, \
                    archive.open(self._member(archive, self.key)) as member:
                _npy_header(member)
                row_bytes = int(np.prod(self.row_shape)) * self.dtype.itemsize
                member.seek(member.tell() + start * row_bytes)
                for first in range(start, self.n, step):
                    count = min(step, self.n - first)
                    raw = np.frombuffer(member.read(count * row_bytes), dtype=self.dtype)
                    yield first, _stored(raw.reshape(count, *self.row_shape), binary)
            return
        import h5py

        with h5py.File(self.path, "r") as data:
            images = data[self.key]
            for first in range(start, self.n, step):
                yield first, _stored(images[first:first + step], binary)


def _npy_header(stream) -> tuple[tuple[int, ...], np.dtype]:
    version = np.lib.format.read_magic(stream)
    reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = reader(stream)
    if fortran:
        raise ValueError("the array is stored in Fortran order; expected C order")
    return shape, dtype


def _stored(images: np.ndarray, binary: bool) -> np.ndarray:
    """(n, C, H, W) uint8 0..255 of a piece as the file stores it."""
    if binary:
        if images.size and images.max() > 1:
            raise ValueError(f"imgs: expected 0/1 pixels; got values up to {images.max()}")
        return (images.astype(np.uint8) * np.uint8(255))[:, None]
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2))


def _sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).data).hexdigest()


def _write_json(path: Path, payload: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1))
    os.replace(tmp, path)


def _resume(out: Path, identity: dict, progress_file: Path, part: Path, n: int, row_shape) -> list[dict]:
    """The pieces of an earlier interrupted run that are still intact (their sha256 re-checked)."""
    if not (progress_file.exists() and part.exists()):
        return []
    record = json.loads(progress_file.read_text())
    if record.get("source") != identity:
        return []
    images = np.load(part, mmap_mode="r")
    if images.shape != (n, *row_shape):
        return []
    kept = []
    for piece in record["pieces"]:
        if _sha256(images[piece["first"]:piece["first"] + piece["count"]]) != piece["sha256"]:
            break
        kept.append(piece)
    return kept


def convert(path, out, dataset: str | None = None, step: int | None = None, progress: bool = True) -> dict:
    """Convert the real file ``path`` into ``out`` (see the module docstring); the manifest.

    ``dataset`` defaults to the one the file's published name belongs to. ``step`` (images per
    piece) defaults to the source's chunk depth (hdf5) or 10,000 (npz).
    """
    from data_pipeline.sources import by_filename

    path, out = Path(path), Path(out)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; download it first (python -m data_pipeline.download)")
    if dataset is None:
        row = by_filename(path.name)
        if row is None:
            raise ValueError(f"{path}: unknown file name; pass the dataset (dsprites, shapes3d or mpi3d)")
        dataset = row.dataset
    dataset = canonical_name(dataset)
    source = _Source(path, dataset)
    step = step or source.step
    if step < 1:
        raise ValueError(f"step must be at least 1; got {step}")
    out.mkdir(parents=True, exist_ok=True)
    stat = path.stat()
    identity = {"file": path.name, "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns, "step": step}
    part, progress_file = out / (IMAGES + ".part"), out / PROGRESS
    if (out / MANIFEST).is_file() and (out / IMAGES).is_file():
        manifest = json.loads((out / MANIFEST).read_text())
        if manifest.get("source") == identity:
            if progress:
                print(f"{out}: {path.name} is already converted (random_access.load checks it)", flush=True)
            return manifest
    started = time.perf_counter()
    pieces = _resume(out, identity, progress_file, part, source.n, source.image_shape)
    if pieces:
        images = np.lib.format.open_memmap(part, mode="r+")
    else:
        images = np.lib.format.open_memmap(part, mode="w+", dtype=np.uint8,
                                           shape=(source.n, *source.image_shape))
    start = pieces[-1]["first"] + pieces[-1]["count"] if pieces else 0
    if progress and start:
        print(f"{path.name}: resuming after {start:,} of {source.n:,} images (checked)", flush=True)
    for first, block in source.pieces(start, step):
        images[first:first + len(block)] = block
        images.flush()
        pieces.append({"first": first, "count": len(block), "sha256": _sha256(block)})
        _write_json(progress_file, {"source": identity, "pieces": pieces})
        if progress:
            print(f"\r{path.name}: {first + len(block):,} of {source.n:,} images", end="", flush=True)
    if progress:
        print(flush=True)
    del images
    classes_tmp = out / (CLASSES + ".part.npy")
    np.save(classes_tmp, source.classes)
    os.replace(classes_tmp, out / CLASSES)
    os.replace(part, out / IMAGES)
    manifest = {
        "dataset": dataset, "layout": LAYOUT, "source": identity,
        "factor_names": list(source.space.names), "factor_sizes": list(source.space.sizes),
        "n_images": int(source.n), "image_shape": list(source.image_shape),
        "classes_sha256": _sha256(source.classes), "pieces": pieces,
        "seconds": round(time.perf_counter() - started, 3), "built_by": "random_access.convert",
    }
    _write_json(out / MANIFEST, manifest)
    progress_file.unlink()
    return manifest


def load(out, verify: bool = True) -> GroundTruthDataset:
    """The converted dataset, its images memory-mapped (read-only); ``verify`` re-checks every
    piece's sha256 (one pass over the file) and the classes'."""
    out = Path(out)
    if not (out / MANIFEST).is_file():
        interrupted = (out / PROGRESS).exists()
        hint = " (the conversion was interrupted: run it again to resume)" if interrupted else ""
        raise FileNotFoundError(f"{out}: no {MANIFEST}; not a finished random-access conversion{hint}")
    manifest = json.loads((out / MANIFEST).read_text())
    images = np.load(out / IMAGES, mmap_mode="r")
    classes = np.load(out / CLASSES)
    if images.shape != (manifest["n_images"], *manifest["image_shape"]):
        raise ValueError(f"{out / IMAGES}: shape {images.shape} differs from the manifest's "
                         f"{(manifest['n_images'], *manifest['image_shape'])}; the file is damaged")
    if verify:
        if _sha256(classes) != manifest["classes_sha256"]:
            raise ValueError(f"{out / CLASSES}: sha256 differs from the manifest; the file is damaged")
        for piece in manifest["pieces"]:
            if _sha256(images[piece["first"]:piece["first"] + piece["count"]]) != piece["sha256"]:
                last = piece["first"] + piece["count"] - 1
                raise ValueError(f"{out / IMAGES}: images {piece['first']:,}..{last:,} differ from the "
                                 "manifest's sha256; the file is damaged (convert again)")
    name = manifest["dataset"]
    if name == "mpi3d":
        space = mpi3d_space(manifest["factor_sizes"][0], manifest["factor_sizes"][1])
    else:
        from data_pipeline.spaces import factor_space

        space = factor_space(name)
    return GroundTruthDataset(name, images, classes, space)
