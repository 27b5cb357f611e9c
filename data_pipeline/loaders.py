"""Real-file loaders: the files users bring, checked before anything expensive runs.

Every loader returns a :class:`GroundTruthDataset` (images (N, C, H, W) uint8 0..255 and factor
classes). A file is looked up by its real name in ``data_dir``, else in ``$DISGEN_DATA``. A wrong
key, shape, dtype or length raises ``ValueError`` saying what was expected. A file whose checksum
differs from the published one gets a :class:`ChecksumWarning`, never a refusal (the checksums come
from third parties).

No code runs from a data file: ``.npz`` files are read with ``allow_pickle=False``, so a pickled
(object) entry is never unpickled. The pickled entries the real files carry (dSprites' ``metadata``,
the M22 files' ``unique_values``) are never read; the factor sizes come from the dataset's
:class:`FactorSpace`, and the file's arrays are checked against it.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path

import numpy as np

from data_pipeline.datasets import GroundTruthDataset, as_channels_first
from data_pipeline.factors import FactorSpace, nearest_classes
from data_pipeline.sources import SOURCES
from data_pipeline.spaces import dsprites_space, mpi3d_space, shapes3d_space, sprite_space

DSPRITES_NPZ = "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz"
DSPRITES_HDF5 = "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.hdf5"
SHAPES3D_H5 = "3dshapes.h5"
MPI3D_NPZ = {"toy": "mpi3d_toy.npz", "realistic": "mpi3d_realistic.npz", "real": "mpi3d_real.npz"}

# (algorithm, hex digest) per file name, from the one table of sources and checksums
# (data_pipeline/sources.py): the third-party figures first, then those a download enforces.
PUBLISHED_CHECKSUMS = {
    row.filename: [(a, h) for a, h in (*row.reported, *row.checksums) if a in hashlib.algorithms_guaranteed]
    for row in SOURCES.values()
}

# MPI3D: factor sizes follow from the number of images.
MPI3D_SIZES_BY_LENGTH = {1_036_800: (6, 6), 460_800: (4, 4)}


class ChecksumWarning(UserWarning):
    """A data file's checksum differs from the published one."""


def data_path(filename: str, data_dir=None) -> Path:
    """The path of ``filename`` in ``data_dir``, else in ``$DISGEN_DATA``; a clear error if absent."""
    folders = [Path(data_dir)] if data_dir is not None else []
    if os.environ.get("DISGEN_DATA"):
        folders.append(Path(os.environ["DISGEN_DATA"]))
    if not folders:
        raise FileNotFoundError(
            f"{filename}: no data directory; pass data_dir or set DISGEN_DATA to the folder holding it"
        )
    for folder in folders:
        if (folder / filename).is_file():
            return folder / filename
    raise FileNotFoundError(f"{filename} not found in {', '.join(str(f) for f in folders)}")


def file_digest(path, algorithm: str) -> str:
    """Hex digest of a file, read in 4 MiB blocks."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(4 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_checksum(path) -> bool | None:
    """Compare a file with its published checksum: True if it matches, None if there is none
    for its name; warns (:class:`ChecksumWarning`) and returns False on a mismatch."""
    path = Path(path)
    published = PUBLISHED_CHECKSUMS.get(path.name)
    if not published:
        return None
    algorithm, expected = published[0]
    actual = file_digest(path, algorithm)
    if actual == expected:
        return True
    warnings.warn(
        f"{path}: {algorithm} {actual} differs from the published {expected}; "
        "the file may be a different release or corrupted (loading it anyway)",
        ChecksumWarning, stacklevel=3,
    )
    return False


def _expect(what: str, array, shape=None, dtype=None, length=None) -> None:
    """Raise ValueError naming ``what`` unless ``array`` has the expected shape/dtype/length."""
    if shape is not None:
        ok = array.ndim == len(shape) and all(e is None or e == a for e, a in zip(shape, array.shape))
        if not ok:
            pretty = "(" + ", ".join("N" if e is None else str(e) for e in shape) + ")"
            raise ValueError(f"{what}: expected shape {pretty}; got {tuple(array.shape)}")
    if dtype is not None and not np.issubdtype(array.dtype, dtype):
        raise ValueError(f"{what}: expected dtype {getattr(dtype, '__name__', dtype)}; got {array.dtype}")
    if length is not None and array.shape[0] != length:
        raise ValueError(f"{what}: expected {length} rows (one per image); got {array.shape[0]}")


def _key(container, key: str, source) -> np.ndarray:
    keys = list(container.keys())
    if key not in keys:
        raise ValueError(f"{source}: expected key {key!r}; the file holds {', '.join(map(str, keys))}")
    return container[key]


def _npz_arrays(path, keys) -> dict:
    """The arrays ``keys`` of an ``.npz``, read without pickle: a missing key, or a file or array
    that is pickled (and so could run code when loaded), raises ValueError naming it. Other entries
    are never read."""
    refusal = "which disgen never loads (unpickling can run code)"
    try:
        data = np.load(path, allow_pickle=False)
    except ValueError as error:
        if "allow_pickle" not in str(error):
            raise
        raise ValueError(f"{path}: is a pickle, not an .npz archive, {refusal}; save the arrays with "
                         "numpy.savez") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ValueError(f"{path}: expected an .npz archive (numpy.savez) holding {', '.join(keys)}; "
                         "got a single .npy array")
    with data:
        arrays = {}
        for key in keys:
            if key not in data.files:
                raise ValueError(f"{path}: expected key {key!r}; the file holds {', '.join(data.files)}")
            try:
                arrays[key] = data[key]
            except ValueError as error:
                if "allow_pickle" not in str(error):
                    raise
                raise ValueError(f"{path}: {key}: holds a pickled (object) array, {refusal}; store it "
                                 "as a plain numeric array") from None
        return arrays


def _classes_from_values(values: np.ndarray, space: FactorSpace, source) -> np.ndarray:
    """Factor classes of raw label values, matching each to the nearest grid value."""
    classes, col, worst = nearest_classes(values, space)
    if col is not None:
        raise ValueError(f"{source}: labels of factor {space.names[col]!r} are off the grid "
                         f"{np.round(space.values[col], 4).tolist()} (worst distance {worst:.4g})")
    return classes


def _dsprites_arrays(imgs, latents_classes, source):
    """Check the file's arrays against :func:`dsprites_space`: ``latents_classes`` holds a constant
    colour column (class 0) and then one column per factor, each within the factor's size."""
    space = dsprites_space()
    _expect(f"{source}: imgs", imgs, shape=(None, 64, 64), dtype=np.integer)
    _expect(f"{source}: latents_classes", latents_classes, shape=(None, 1 + space.n_factors),
            dtype=np.integer, length=imgs.shape[0])
    imgs, latents_classes = np.asarray(imgs), np.asarray(latents_classes)
    if imgs.size and imgs.max() > 1:
        raise ValueError(f"{source}: imgs: expected 0/1 pixels; got values up to {imgs.max()}")
    if len(imgs) > space.n_images:
        raise ValueError(f"{source}: imgs: expected at most {space.n_images:,} images (the factor grid "
                         f"{' x '.join(map(str, space.sizes))}); got {len(imgs):,}")
    if latents_classes.size and latents_classes[:, 0].any():
        raise ValueError(f"{source}: latents_classes: expected column 0 (colour, one class) to be 0; "
                         f"got values up to {latents_classes[:, 0].max()}")
    try:
        classes = space.check_classes(latents_classes[:, 1:])  # drop the constant colour
    except ValueError as error:
        raise ValueError(f"{source}: latents_classes: {error} (factor sizes "
                         f"{dict(zip(space.names, space.sizes))})") from None
    images = (imgs.astype(np.uint8, copy=False) * np.uint8(255))[:, None]
    return GroundTruthDataset("dsprites", images, classes, space)


def load_dsprites_npz(path=None, data_dir=None, verify: bool = True) -> GroundTruthDataset:
    """dSprites from its npz: ``imgs`` (N, 64, 64) 0/1, ``latents_classes`` (N, 6). The file's
    pickled ``metadata`` is never read (the factor sizes come from :func:`dsprites_space`)."""
    path = Path(path) if path is not None else data_path(DSPRITES_NPZ, data_dir)
    if verify:
        verify_checksum(path)
    arrays = _npz_arrays(path, ("imgs", "latents_classes"))
    return _dsprites_arrays(arrays["imgs"], arrays["latents_classes"], path)


def load_dsprites_hdf5(path=None, data_dir=None, verify: bool = True) -> GroundTruthDataset:
    """dSprites from its hdf5: the same arrays as the npz."""
    import h5py

    path = Path(path) if path is not None else data_path(DSPRITES_HDF5, data_dir)
    if verify:
        verify_checksum(path)
    with h5py.File(path, "r") as data:
        return _dsprites_arrays(_key(data, "imgs", path)[()], _key(data, "latents_classes", path)[()], path)


def iter_shapes3d(path, chunk: int = 10_000):
    """Yield (start, images (n, 3, 64, 64) uint8, classes (n, 6)) chunks of ``3dshapes.h5``,
    reading at most ``chunk`` images at a time."""
    import h5py

    space = shapes3d_space()
    with h5py.File(path, "r") as data:
        images, labels = _key(data, "images", path), _key(data, "labels", path)
        _expect(f"{path}: images", images, shape=(None, 64, 64, 3), dtype=np.uint8)
        _expect(f"{path}: labels", labels, shape=(None, 6), dtype=np.floating, length=images.shape[0])
        for start in range(0, images.shape[0], chunk):
            stop = min(start + chunk, images.shape[0])
            classes = _classes_from_values(labels[start:stop], space, path)
            yield start, as_channels_first(images[start:stop]), classes


def load_shapes3d(path=None, data_dir=None, chunked: bool = False, chunk: int = 10_000,
                  verify: bool = True) -> GroundTruthDataset:
    """3DShapes from ``3dshapes.h5``: ``images`` (N, 64, 64, 3) uint8, ``labels`` (N, 6) values.

    ``chunked=True`` reads ``chunk`` images at a time into one preallocated (N, 3, 64, 64) array,
    so the peak memory is the result plus one chunk instead of twice the result.
    """
    import h5py

    path = Path(path) if path is not None else data_path(SHAPES3D_H5, data_dir)
    if verify:
        verify_checksum(path)
    space = shapes3d_space()
    if not chunked:
        with h5py.File(path, "r") as data:
            images, labels = _key(data, "images", path)[()], _key(data, "labels", path)[()]
        _expect(f"{path}: images", images, shape=(None, 64, 64, 3), dtype=np.uint8)
        _expect(f"{path}: labels", labels, shape=(None, 6), dtype=np.floating, length=images.shape[0])
        classes = _classes_from_values(labels, space, path)
        return GroundTruthDataset("shapes3d", as_channels_first(images), classes, space)
    with h5py.File(path, "r") as data:
        n = _key(data, "images", path).shape[0]
    images = np.empty((n, 3, 64, 64), dtype=np.uint8)
    classes = np.empty((n, 6), dtype=np.int64)
    for start, part, part_classes in iter_shapes3d(path, chunk):
        images[start:start + len(part)] = part
        classes[start:start + len(part)] = part_classes
    return GroundTruthDataset("shapes3d", images, classes, space)


def load_mpi3d(path=None, data_dir=None, variant: str = "toy") -> GroundTruthDataset:
    """MPI3D from ``mpi3d_<variant>.npz``: ``images`` (N, 64, 64, 3) uint8 in grid order, no
    labels. N fixes the factor sizes: 1,036,800 (6 colours, 6 shapes) or 460,800 (4 and 4)."""
    if path is None:
        if variant not in MPI3D_NPZ:
            raise ValueError(f"variant: expected one of {', '.join(MPI3D_NPZ)}; got {variant!r}")
        path = data_path(MPI3D_NPZ[variant], data_dir)
    path = Path(path)
    images = _npz_arrays(path, ("images",))["images"]
    _expect(f"{path}: images", images, shape=(None, 64, 64, 3), dtype=np.uint8)
    n = images.shape[0]
    if n not in MPI3D_SIZES_BY_LENGTH:
        raise ValueError(f"{path}: images: expected length "
                         f"{' or '.join(f'{k:,}' for k in MPI3D_SIZES_BY_LENGTH)}; got {n:,}")
    images = as_channels_first(images)
    space = mpi3d_space(*MPI3D_SIZES_BY_LENGTH[n])
    return GroundTruthDataset("mpi3d", images, space.all_classes(), space)


def load_circles(path, dataset: str = "circles") -> GroundTruthDataset:
    """Circles (or Simple, TwoShapes) from an M22-style npz: ``images``, ``factor_values``
    (N, F), ``factor_sizes`` (F,). Their ``unique_values`` (a pickled dict) is never read."""
    from data_pipeline.spaces import CIRCLES_NAMES, SIMPLE_NAMES, TWOSHAPES_NAMES

    names = {"circles": CIRCLES_NAMES, "simple": SIMPLE_NAMES, "twoshapes": TWOSHAPES_NAMES}[dataset]
    path = Path(path)
    arrays = _npz_arrays(path, ("images", "factor_sizes", "factor_values"))
    images, sizes, values = arrays["images"], arrays["factor_sizes"], arrays["factor_values"]
    _expect(f"{path}: factor_sizes", np.asarray(sizes), shape=(len(names),), dtype=np.integer)
    _expect(f"{path}: factor_values", values, shape=(None, len(names)), length=images.shape[0])
    if images.ndim not in (3, 4) or images.dtype != np.uint8:
        raise ValueError(f"{path}: images: expected uint8 (N, H, W) or (N, H, W, C); "
                         f"got {images.dtype} {images.shape}")
    if images.size and images.max() <= 1:
        images = images * np.uint8(255)
    space = sprite_space(names, tuple(int(s) for s in sizes))
    classes = _classes_from_values(np.asarray(values, dtype=float), space, path)
    return GroundTruthDataset(dataset, as_channels_first(images), classes, space)


def load_real(dataset: str, data_dir=None, **options) -> GroundTruthDataset:
    """Load a dataset's real file by name from ``data_dir`` or ``$DISGEN_DATA``.

    ``"labelled"`` loads a generic labelled dataset (:func:`data_pipeline.labelled.load_labelled`)
    from ``path=`` (or ``labelled.npz``/``labelled.h5`` in the data folder); ``bins=`` passes on.
    """
    from data_pipeline.spaces import canonical_name

    if str(dataset).lower() == "labelled":
        from data_pipeline.labelled import load_labelled

        path = options.pop("path", None)
        if path is None:
            try:
                path = data_path("labelled.npz", data_dir)
            except FileNotFoundError:
                path = data_path("labelled.h5", data_dir)
        return load_labelled(path, **options)
    dataset = canonical_name(dataset)
    if dataset == "dsprites":
        try:
            return load_dsprites_npz(data_dir=data_dir, **options)
        except FileNotFoundError:
            try:
                return load_dsprites_hdf5(data_dir=data_dir, **options)
            except FileNotFoundError as error:
                either = f"{DSPRITES_NPZ} (or {DSPRITES_HDF5})"
                raise FileNotFoundError(str(error).replace(DSPRITES_HDF5, either, 1)) from None
    if dataset == "shapes3d":
        return load_shapes3d(data_dir=data_dir, **options)
    if dataset == "mpi3d":
        return load_mpi3d(data_dir=data_dir, **options)
    return load_circles(data_path(f"{dataset}.npz", data_dir), dataset=dataset)
