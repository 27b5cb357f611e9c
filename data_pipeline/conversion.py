"""Real files into the prepared layout: read their labels without their images, then convert them
piece by piece.

A :class:`RealFile` opens a dataset's real file (dSprites npz or hdf5, ``3dshapes.h5``, MPI3D npz,
M22's Circles/Simple/TwoShapes npz, or a user's labelled ``.npz``/``.h5``) and reads what a driver
checks before anything expensive runs: the keys, the images' shape and dtype from the array header
(never the pixels), and the labels, turned into factor classes. A wrong key, shape, dtype or
length raises ``ValueError`` saying what was expected, as :mod:`data_pipeline.loaders` does.

:func:`convert` then streams the images, a piece at a time (npz members are read from their
offset, hdf5 in pieces aligned to its chunks, which matters: the real ``3dshapes.h5`` is stored
gzip-compressed in chunks of (15000, 4, 4, 1), so one image touches 768 chunks), into the prepared
layout (:mod:`data_pipeline.prepared`): ``.npy`` blocks, ``classes.npy`` and a manifest, in a local
folder or at a URI. Each finished block is recorded in ``progress.json``; an interrupted
conversion continues after the last block whose checksum still holds. Run it as
``python -m data_pipeline.prepare DATASET --from-file FILE --out DIR/DATASET``; a sweep's nodes
run it into their cache (:mod:`data_pipeline.node_cache`) for ``--data-source real``.
"""

from __future__ import annotations

import json
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from tqdm import tqdm

from data_pipeline import prepared
from data_pipeline.spaces import canonical_name, dsprites_space, mpi3d_space, shapes3d_space, sprite_space

PROGRESS = "progress.json"
PICKLED = "which disgen never loads (unpickling can run code)"


class _Header:
    """An array's shape and dtype, read from its header (npy in a zip, or an hdf5 dataset)."""

    def __init__(self, shape, dtype, chunks=None):
        self.shape, self.dtype, self.chunks = tuple(shape), np.dtype(dtype), chunks

    @property
    def ndim(self) -> int:
        return len(self.shape)


def _npy_header(stream) -> tuple[tuple[int, ...], np.dtype]:
    version = np.lib.format.read_magic(stream)
    reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = reader(stream)
    if fortran:
        raise ValueError("the array is stored in Fortran order; expected C order")
    return shape, dtype


class RealFile:
    """A real dataset file, its labels read and its images not: ``n``, ``image_shape`` (C, H, W),
    ``classes``, ``factor_space``, ``name``, ``identity`` (file name, bytes, modification time),
    ``chunk`` (an hdf5 file's chunk depth, else 1), and :meth:`pieces` to stream the images as the
    prepared layout stores them."""

    def __init__(self, path, dataset: str, bins=None):
        from data_pipeline import loaders

        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: no such file")
        self.name = "labelled" if str(dataset).lower() == "labelled" else canonical_name(dataset)
        self.suffix = self.path.suffix.lower()
        self._loaders, self.binary, self.chunk = loaders, False, 1
        stat = self.path.stat()
        self.identity = {"file": self.path.name, "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        if self.name == "labelled":
            self._labelled(bins)
        elif self.name == "shapes3d":
            self._shapes3d()
        elif self.name == "dsprites":
            self._dsprites()
        elif self.name == "mpi3d":
            self._mpi3d()
        else:
            self._sprites()
        if len(self.classes) != self.n:
            raise ValueError(f"{self.path}: expected one label row per image ({self.n:,}); "
                             f"got {len(self.classes):,}")

    # -- reading headers and small arrays -------------------------------------------------------

    def _is_hdf5(self) -> bool:
        return self.suffix in (".h5", ".hdf5")

    def _keys(self) -> list[str]:
        if self._is_hdf5():
            import h5py

            with h5py.File(self.path, "r") as data:
                return list(data.keys())
        try:
            with zipfile.ZipFile(self.path) as archive:
                return [n.removesuffix(".npy") for n in archive.namelist()]
        except zipfile.BadZipFile:
            raise ValueError(f"{self.path}: not an .npz archive (numpy.savez) or a pickle, {PICKLED}; "
                             "save the arrays with numpy.savez") from None

    def _require(self, *keys: str) -> None:
        held = self._keys()
        for key in keys:
            if key not in held:
                raise ValueError(f"{self.path}: expected key {key!r}; the file holds {', '.join(held)}")

    def _header(self, key: str) -> _Header:
        self._require(key)
        if self._is_hdf5():
            import h5py

            with h5py.File(self.path, "r") as data:
                item = data[key]
                return _Header(item.shape, item.dtype, item.chunks)
        with zipfile.ZipFile(self.path) as archive, archive.open(key + ".npy") as member:
            shape, dtype = _npy_header(member)
        if dtype.hasobject:
            raise ValueError(f"{self.path}: {key}: holds a pickled (object) array, {PICKLED}; store it as "
                             "a plain numeric array")
        return _Header(shape, dtype)

    def _array(self, key: str) -> np.ndarray:
        self._require(key)
        if self._is_hdf5():
            import h5py

            with h5py.File(self.path, "r") as data:
                return data[key][()]
        return self._loaders._npz_arrays(self.path, (key,))[key]

    def _images(self, key: str, shape, dtype) -> None:
        header = self._header(key)
        self._loaders._expect(f"{self.path}: {key}", header, shape=shape, dtype=dtype)
        self.key, self.n, self.header = key, header.shape[0], header
        if header.chunks:
            self.chunk = max(1, header.chunks[0])

    def _dsprites(self) -> None:
        space = dsprites_space()
        self._images("imgs", (None, 64, 64), np.integer)
        labels = self._header("latents_classes")
        self._loaders._expect(f"{self.path}: latents_classes", labels, shape=(None, 1 + space.n_factors),
                              dtype=np.integer, length=self.n)
        if self.n > space.n_images:
            raise ValueError(f"{self.path}: imgs: expected at most {space.n_images:,} images (the factor "
                             f"grid {' x '.join(map(str, space.sizes))}); got {self.n:,}")
        latents = self._array("latents_classes")
        if latents.size and latents[:, 0].any():
            raise ValueError(f"{self.path}: latents_classes: expected column 0 (colour, one class) to be 0; "
                             f"got values up to {latents[:, 0].max()}")
        try:
            self.classes = space.check_classes(latents[:, 1:])
        except ValueError as error:
            raise ValueError(f"{self.path}: latents_classes: {error} (factor sizes "
                             f"{dict(zip(space.names, space.sizes))})") from None
        self.factor_space, self.image_shape, self.binary = space, (1, 64, 64), True

    def _shapes3d(self) -> None:
        space = shapes3d_space()
        self._images("images", (None, 64, 64, 3), np.uint8)
        labels = self._header("labels")
        self._loaders._expect(f"{self.path}: labels", labels, shape=(None, 6), dtype=np.floating,
                              length=self.n)
        self.classes = self._loaders._classes_from_values(self._array("labels"), space, self.path)
        self.factor_space, self.image_shape = space, (3, 64, 64)

    def _mpi3d(self) -> None:
        self._images("images", (None, 64, 64, 3), np.uint8)
        sizes = self._loaders.MPI3D_SIZES_BY_LENGTH
        if self.n not in sizes:
            raise ValueError(f"{self.path}: images: expected length {' or '.join(f'{k:,}' for k in sizes)}; "
                             f"got {self.n:,}")
        self.factor_space = mpi3d_space(*sizes[self.n])
        self.classes, self.image_shape = self.factor_space.all_classes(), (3, 64, 64)

    def _sprites(self) -> None:
        from data_pipeline.spaces import CIRCLES_NAMES, SIMPLE_NAMES, TWOSHAPES_NAMES

        names = {"circles": CIRCLES_NAMES, "simple": SIMPLE_NAMES, "twoshapes": TWOSHAPES_NAMES}[self.name]
        self._require("images", "factor_sizes", "factor_values")
        header = self._header("images")
        if header.ndim not in (3, 4) or header.dtype != np.uint8:
            raise ValueError(f"{self.path}: images: expected uint8 (N, H, W) or (N, H, W, C); "
                             f"got {header.dtype} {header.shape}")
        self.key, self.n, self.header = "images", header.shape[0], header
        sizes = np.asarray(self._array("factor_sizes"))
        self._loaders._expect(f"{self.path}: factor_sizes", sizes, shape=(len(names),), dtype=np.integer)
        values = self._array("factor_values")
        self._loaders._expect(f"{self.path}: factor_values", values, shape=(None, len(names)), length=self.n)
        space = sprite_space(names, tuple(int(s) for s in sizes))
        self.classes = self._loaders._classes_from_values(np.asarray(values, dtype=float), space, self.path)
        self.factor_space = space
        self.image_shape = (1 if header.ndim == 3 else header.shape[3], *header.shape[1:3])
        self.binary = None  # 0/1 or 0/255: decided by the pixels, when they are read

    def _labelled(self, bins) -> None:
        from data_pipeline import labelled

        header = self._header("images")
        labelled._check_images(header, self.path)
        self.key, self.n, self.header = "images", header.shape[0], header
        self.classes, self.factor_space = labelled.file_labels(self.path, self.n, bins)
        channels = 1 if header.ndim == 3 else header.shape[3]
        self.image_shape = (channels, *header.shape[1:3])

    # -- streaming the images ---------------------------------------------------------------------

    def rows(self) -> FileRows:
        """A small picklable reader of this file's image rows (no labels): what a Ray Data read
        task carries."""
        return FileRows(str(self.path), self.key, self.header.shape, self.header.dtype.str, self._is_hdf5())

    def shards(self, start: int, step: int) -> list[tuple[int, int]]:
        """(first row, row count) of the pieces of ``step`` rows from ``start`` to the end."""
        return [(first, min(step, self.n - first)) for first in range(start, self.n, step)]

    def _raw(self, start: int, step: int) -> Iterator[tuple[int, np.ndarray]]:
        return self.rows().pieces(self.shards(start, step))

    def _stored(self, images: np.ndarray) -> np.ndarray:
        return stored_layout(images, self.binary, f"{self.path}: {self.key}")

    def pieces(self, start: int = 0, step: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, images (n, C, H, W) uint8 0..255) from ``start`` to the end, ``step`` rows at
        a time. M22's files hold 0/1 or 0/255 pixels; a first pass finds which."""
        step = step or max(self.chunk, prepared.rows_per_block(self.image_shape))
        if self.binary is None:
            self.binary = all(piece.max(initial=0) <= 1 for _, piece in self._raw(0, step))
        for first, piece in self._raw(start, step):
            yield first, self._stored(piece)


class FileRows:
    """Rows of one image array of a real file, read by position: an npz member from its offset
    (one pass for a compressed member, which cannot seek), an hdf5 dataset by slices. Picklable,
    so that each Ray Data read task of :mod:`data_pipeline.prepare` reads its own rows."""

    def __init__(self, path: str, key: str, shape, dtype: str, hdf5: bool):
        self.path, self.key, self.shape, self.dtype, self.hdf5 = path, key, tuple(shape), dtype, hdf5

    def seekable(self) -> bool:
        """Whether a piece can be read without reading the rows before it (hdf5, or an npz member
        stored uncompressed, as ``numpy.savez`` writes it)."""
        if self.hdf5:
            return True
        with zipfile.ZipFile(self.path) as archive:
            return archive.getinfo(self.key + ".npy").compress_type == zipfile.ZIP_STORED

    def pieces(self, shards) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, raw images as stored in the file) for each (first, count) of ``shards``, in
        increasing order, the file opened once."""
        if self.hdf5:
            import h5py

            with h5py.File(self.path, "r") as data:
                images = data[self.key]
                for first, count in shards:
                    yield first, images[first:first + count]
            return
        with zipfile.ZipFile(self.path) as archive, archive.open(self.key + ".npy") as member:
            _npy_header(member)
            start, dtype = member.tell(), np.dtype(self.dtype)
            row_bytes = int(np.prod(self.shape[1:])) * dtype.itemsize
            for first, count in shards:
                member.seek(start + first * row_bytes)
                raw = np.frombuffer(member.read(count * row_bytes), dtype=dtype)
                yield first, raw.reshape(count, *self.shape[1:])


def stored_layout(images: np.ndarray, binary: bool | None, where: str) -> np.ndarray:
    """A piece as the prepared layout stores it: (n, C, H, W) uint8 0..255. ``binary``: the file
    holds 0/1 pixels (checked)."""
    if binary:
        if images.size and images.max() > 1:
            raise ValueError(f"{where}: expected 0/1 pixels; got values up to {images.max()}")
        images = images.astype(np.uint8) * np.uint8(255)
    elif images.dtype == bool:
        images = images.astype(np.uint8) * np.uint8(255)
    if images.ndim == 3:
        return np.ascontiguousarray(images[:, None])
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2))


def open_source(path, dataset: str, bins=None):
    """The source a conversion reads: a set of D21's robot-finger layout
    (:class:`~data_pipeline.robot_finger.FingerSet`, ``path`` its folder or the
    ``robot_finger_datasets`` folder above it) for the datasets ``finger``,
    ``finger_heldout_colors`` and ``finger_real``; else a :class:`RealFile`."""
    from data_pipeline import robot_finger

    if robot_finger.is_finger(dataset):
        return robot_finger.FingerSet(path, str(dataset).lower())
    return RealFile(path, dataset, bins=bins)


def block_rows(source: RealFile, rows_per_block: int | None) -> int:
    """Rows per block of a conversion: ``rows_per_block`` or about 64 MiB of images, rounded down
    to whole hdf5 chunks (each chunk is then decompressed once)."""
    if rows_per_block is not None and rows_per_block < 1:
        raise ValueError(f"rows_per_block must be at least 1; got {rows_per_block}")
    step = rows_per_block or prepared.rows_per_block(source.image_shape)
    if source.chunk > 1:
        step = max(source.chunk, step // source.chunk * source.chunk)
    return step


def file_identity(source: RealFile, step: int) -> dict:
    """The ``source`` a conversion's manifest records: the file's name, size and modification
    time, and the rows per block (a finished conversion with the same identity is not redone)."""
    return {"kind": "file", **source.identity, "rows_per_block": step}


def mpi3d_variant(name: str) -> str:
    """Which MPI3D set a dataset name means: ``mpi3d_real`` → real, ``mpi3d_realistic`` →
    realistic, ``mpi3d`` and ``mpi3d_toy`` → toy (the sets share one factor grid)."""
    from data_pipeline.loaders import MPI3D_NPZ

    variant = str(name).lower().removeprefix("mpi3d").removeprefix("_") or "toy"
    if variant not in MPI3D_NPZ:
        raise KeyError(f"unknown MPI3D set {name!r}; choose mpi3d (toy), "
                       + ", ".join(f"mpi3d_{v}" for v in MPI3D_NPZ))
    return variant


def real_file_path(dataset: str, data_dir=None) -> Path:
    """Where a dataset's real file is: its published name in ``data_dir``, else in
    ``$DISGEN_DATA`` (dSprites: the npz, else the hdf5; ``labelled``: labelled.npz, else .h5; MPI3D:
    the variant the name gives, ``mpi3d_real`` → mpi3d_real.npz, plain ``mpi3d`` the toy set)."""
    from data_pipeline.loaders import DSPRITES_HDF5, DSPRITES_NPZ, MPI3D_NPZ, SHAPES3D_H5, data_path

    if str(dataset).lower() == "labelled":
        try:
            return data_path("labelled.npz", data_dir)
        except FileNotFoundError:
            return data_path("labelled.h5", data_dir)
    named = str(dataset).lower()
    dataset = canonical_name(dataset)
    if dataset == "dsprites":
        try:
            return data_path(DSPRITES_NPZ, data_dir)
        except FileNotFoundError:
            try:
                return data_path(DSPRITES_HDF5, data_dir)
            except FileNotFoundError as error:
                either = f"{DSPRITES_NPZ} (or {DSPRITES_HDF5})"
                raise FileNotFoundError(str(error).replace(DSPRITES_HDF5, either, 1)) from None
    if dataset == "shapes3d":
        return data_path(SHAPES3D_H5, data_dir)
    if dataset == "mpi3d":
        return data_path(MPI3D_NPZ[mpi3d_variant(named)], data_dir)
    return data_path(f"{dataset}.npz", data_dir)


def _write_json(uri, name: str, payload: dict) -> None:
    prepared._put(uri, name, json.dumps(payload, indent=1).encode())


def _finished_blocks(out, identity: dict) -> list[dict]:
    """The blocks an interrupted conversion of the same file wrote and that still hold their
    checksum, in order (a damaged one, and all after it, are written again)."""
    import hashlib

    try:
        record = json.loads(prepared.read_bytes(out, PROGRESS))
    except (OSError, ValueError):
        return []
    if record.get("source") != identity:
        return []
    kept = []
    for block in record.get("blocks", []):
        try:
            payload = prepared.read_bytes(out, block["file"])
        except OSError:
            break
        if hashlib.sha256(payload).hexdigest() != block["sha256"]:
            break
        kept.append(block)
    return kept


def convert(path, out, dataset: str | None = None, rows_per_block: int | None = None, bins=None,
            progress: bool = True) -> dict:
    """Convert the real file ``path`` into the prepared layout at ``out`` (a local folder or a
    URI); the manifest. ``dataset`` defaults to the one the file's published name belongs to;
    ``rows_per_block`` to about 64 MiB of images; either is rounded down to whole hdf5 chunks. A finished
    conversion of the same file (name, size, modification time) is not redone."""
    from data_pipeline.robot_finger import is_finger
    from data_pipeline.sources import by_filename

    path = Path(path)
    if not (path.is_file() or (is_finger(dataset) and path.is_dir())):
        raise FileNotFoundError(f"{path}: no such file; download it first (python -m data_pipeline.download)")
    if dataset is None:
        row = by_filename(path.name)
        if row is None:
            raise ValueError(f"{path}: unknown file name; pass the dataset (dsprites, shapes3d, mpi3d, "
                             "circles, simple, twoshapes or labelled)")
        dataset = row.dataset
    source = open_source(path, dataset, bins=bins)
    step = block_rows(source, rows_per_block)
    identity = file_identity(source, step)
    try:
        manifest = prepared.read_manifest(out)
        if manifest.get("source") == identity:
            if progress:
                print(f"{out}: {path.name} is already converted", flush=True)
            return manifest
    except (FileNotFoundError, ValueError):
        pass
    from data_pipeline.loaders import verify_checksum

    if path.is_file():
        verify_checksum(path)  # a warning if it differs from the published checksum, never a refusal
    started = time.perf_counter()
    blocks = _finished_blocks(out, identity)
    start = blocks[-1]["first"] + blocks[-1]["count"] if blocks else 0
    if progress and start:
        print(f"{path.name}: resuming after {start:,} of {source.n:,} images (checked)", flush=True)
    # a live bar on a terminal; in a log (no TTY) only the lines before and after
    bar = tqdm(total=source.n, initial=start, unit="img", unit_scale=True, desc=path.name,
               disable=None if progress else True)
    for first, images in source.pieces(start, step):
        blocks.append(prepared.write_block(out, first, images))
        _write_json(out, PROGRESS, {"source": identity, "blocks": blocks})
        bar.update(len(images))
    bar.close()
    classes = prepared.write_classes(out, source.classes)
    manifest = prepared.write_manifest(out, source.name, source.factor_space, source.image_shape, blocks,
                                       classes, identity, "conversion", time.perf_counter() - started)
    if progress:
        seconds = time.perf_counter() - started
        print(f"{path.name}: {source.n:,} images converted in {seconds:.1f} s", flush=True)
    fs, base = prepared.filesystem(out)
    fs.delete_file(f"{base}/{PROGRESS}")
    return manifest

