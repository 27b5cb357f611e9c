"""A generic labelled dataset: a user's images with per-image factor values.

D21's robot dataset is not a full factorial grid: its factors are correlated, some combinations
are infeasible and only a sample of states is imaged. Data of that kind loads through here, from
an ``.npz`` or an HDF5 file (``.h5``/``.hdf5``) holding

=================  ==========================================================================
key                content
=================  ==========================================================================
``images``         (N, H, W) or (N, H, W, C) with C = 1 or 3; uint8 0..255 (or bool 0/1)
``factors``        (N, F) numbers: each image's factor values, in the user's own units
``factor_names``   optional (F,) strings (default ``factor_0`` … ``factor_{F-1}``)
``factor_bins``    optional (F,) integers: 0 keeps a factor's distinct values as its classes;
                   k ≥ 1 cuts its range into k equal-width bins
``factor_kinds``   optional (F,) strings: ``categorical`` (unordered classes, such as an object
                   id), ``ordinal`` (ordered values: the default) or ``circular`` (an angle in
                   radians); how the readout per factor scores it (docs/analysis.md)
=================  ==========================================================================

Every split and metric of disgen works on factor *classes*, so each factor is discretised:

- a factor with ``factor_bins`` 0 (or, with no ``factor_bins``, at most
  :data:`MAX_DISTINCT_CLASSES` distinct values) has one class per distinct value, in increasing
  order; the class's value is that value;
- otherwise its range [min, max] is cut into k equal-width bins (k from ``factor_bins``, else
  :data:`DEFAULT_BINS`); the maximum falls in the last bin; a class's value is its bin's centre.
  Bins may be empty.

The result is a :class:`GroundTruthDataset` whose ``observe`` is None: the data is not a grid, so
the BetaVAE and FactorVAE scores cannot sample full-grid points (``analysis.evaluation`` reports
them as NaN with the reason unless the rows form a full grid). Splits for any factor space are in
:mod:`data_pipeline.splits.generic`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from data_pipeline.datasets import GroundTruthDataset, as_channels_first
from data_pipeline.factors import FactorSpace

NAME = "labelled"
REQUIRED_KEYS = ("images", "factors")
OPTIONAL_KEYS = ("factor_names", "factor_bins", "factor_kinds")
MAX_DISTINCT_CLASSES = 64  # with no factor_bins, a factor with more distinct values is binned
DEFAULT_BINS = 20  # equal-width bins for such a factor (disentanglement_lib's histogram default)
NPZ_SUFFIXES = (".npz",)
HDF5_SUFFIXES = (".h5", ".hdf5")


def discretise(values: np.ndarray, bins: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(classes (N,) int64, class values (K,)) of one factor's values.

    ``bins`` 0 keeps the distinct values as classes; k ≥ 1 cuts [min, max] into k equal-width bins
    whose values are their centres; None chooses: distinct values if there are at most
    :data:`MAX_DISTINCT_CLASSES`, else :data:`DEFAULT_BINS` bins. A constant factor has one class.
    """
    values = np.asarray(values, dtype=np.float64)
    distinct, inverse = np.unique(values, return_inverse=True)
    if bins is None:
        bins = 0 if len(distinct) <= MAX_DISTINCT_CLASSES else DEFAULT_BINS
    if bins < 0:
        raise ValueError(f"bins must be 0 (distinct values) or a positive number of bins; got {bins}")
    if bins == 0 or len(distinct) == 1:
        return inverse.reshape(-1).astype(np.int64), distinct
    low, high = distinct[0], distinct[-1]
    width = (high - low) / bins
    classes = np.clip(np.floor((values - low) / width), 0, bins - 1).astype(np.int64)
    return classes, low + (np.arange(bins) + 0.5) * width


def _bins_per_factor(bins, names: Sequence[str], stored: np.ndarray | None) -> list[int | None]:
    """One bin count (or None: choose) per factor, from the ``bins`` argument or the file."""
    if bins is None:
        return [None] * len(names) if stored is None else [int(b) for b in stored]
    if isinstance(bins, (int, np.integer)):
        return [int(bins)] * len(names)
    if isinstance(bins, Mapping):
        unknown = sorted(set(bins) - set(names))
        if unknown:
            raise ValueError(f"bins: no factor {', '.join(map(repr, unknown))}; the factors are "
                             f"{', '.join(names)}")
        default = [None] * len(names) if stored is None else [int(b) for b in stored]
        return [int(bins[n]) if n in bins else d for n, d in zip(names, default)]
    bins = list(bins)
    if len(bins) != len(names):
        raise ValueError(f"bins: expected one entry per factor ({len(names)}); got {len(bins)}")
    return [None if b is None else int(b) for b in bins]


def labelled_dataset(images: np.ndarray, factors: np.ndarray, factor_names: Sequence[str] | None = None,
                     bins=None, name: str = NAME, source: str = "labelled data",
                     kinds: Sequence[str] | None = None) -> GroundTruthDataset:
    """A :class:`GroundTruthDataset` from arrays in the file layout (see the module docstring).

    ``bins`` overrides the file's ``factor_bins``: one int for every factor, a sequence (one per
    factor, None to choose) or a dict ``{factor name: bins}``. ``kinds``: the factors' kinds
    (default: every factor ordinal).
    """
    images = np.asarray(images)
    _check_images(images, source)
    classes, space = factor_classes(factors, len(images), factor_names, bins, source, kinds)
    return GroundTruthDataset(name, stored_images(images), classes, space)


def stored_images(images: np.ndarray) -> np.ndarray:
    """Images in the file layout → (N, C, H, W) uint8 0..255 (bool 0/1 becomes 0/255)."""
    if images.dtype == bool:
        images = images.astype(np.uint8) * np.uint8(255)
    if images.ndim == 4 and images.shape[3] == 1:
        images = images[..., 0]
    return as_channels_first(images)


def factor_classes(factors: np.ndarray, n_images: int, factor_names: Sequence[str] | None = None, bins=None,
                   source: str = "labelled data",
                   kinds: Sequence[str] | None = None) -> tuple[np.ndarray, FactorSpace]:
    """(classes (N, F), factor space) of a labelled file's factor values, checked (one row per
    image, finite numbers) and discretised (see the module docstring); the images are not needed."""
    factors = np.asarray(factors)
    if factors.ndim != 2 or factors.shape[1] < 1:
        raise ValueError(f"{source}: factors: expected shape (N, F) with F ≥ 1 factor columns; "
                         f"got {factors.shape}")
    if not (np.issubdtype(factors.dtype, np.integer) or np.issubdtype(factors.dtype, np.floating)
            or factors.dtype == bool):
        raise ValueError(f"{source}: factors: expected numbers (int or float); got dtype {factors.dtype}")
    if len(factors) != n_images:
        raise ValueError(f"{source}: factors: expected one row per image ({n_images}); "
                         f"got {len(factors)}")
    factors = factors.astype(np.float64)
    if not np.isfinite(factors).all():
        row, col = np.argwhere(~np.isfinite(factors))[0]
        raise ValueError(f"{source}: factors: expected finite values; row {row}, column {col} "
                         f"is {factors[row, col]}")
    n_factors = factors.shape[1]
    names = _factor_names(factor_names, n_factors, source)
    classes, values = [], []
    for col, (factor, k) in enumerate(zip(names, _bins_per_factor(bins, names, None))):
        try:
            c, v = discretise(factors[:, col], k)
        except ValueError as error:
            raise ValueError(f"{source}: factor {factor!r}: {error}") from None
        classes.append(c)
        values.append(v)
    kinds = () if kinds is None else tuple(k.decode() if isinstance(k, bytes) else str(k)
                                           for k in np.asarray(kinds).reshape(-1))
    try:
        space = FactorSpace(names=names, sizes=tuple(len(v) for v in values), values=tuple(values),
                            kinds=kinds)
    except ValueError as error:
        raise ValueError(f"{source}: factor_kinds: {error}") from None
    return np.stack(classes, axis=1), space


def _check_images(images, source) -> None:
    """``images`` (an array, or anything with its shape and dtype: an .npy header) in the layout."""
    if images.dtype not in (np.uint8, np.bool_):
        raise ValueError(f"{source}: images: expected dtype uint8 (0..255) or bool; got {images.dtype}")
    if not (len(images.shape) == 3 or (len(images.shape) == 4 and images.shape[3] in (1, 3))):
        raise ValueError(f"{source}: images: expected shape (N, H, W) or (N, H, W, C) with C = 1 or 3 "
                         f"(channels last, as the real files store them); got {tuple(images.shape)}")
    if images.shape[0] == 0:
        raise ValueError(f"{source}: images: expected at least one image; got none")


def _factor_names(factor_names, n_factors: int, source) -> tuple[str, ...]:
    if factor_names is None:
        return tuple(f"factor_{i}" for i in range(n_factors))
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in np.asarray(factor_names).reshape(-1)]
    if len(names) != n_factors:
        raise ValueError(f"{source}: factor_names: expected {n_factors} names (one per factors column); "
                         f"got {len(names)}")
    if len(set(names)) != len(names) or not all(names):
        raise ValueError(f"{source}: factor_names: expected distinct, non-empty names; got {names}")
    return tuple(names)


def _read(path: Path, keys=(*REQUIRED_KEYS, *OPTIONAL_KEYS)) -> dict:
    """The file's arrays ``keys`` by key (those present), and ``_keys``: every key it holds."""
    suffix = path.suffix.lower()
    if suffix in NPZ_SUFFIXES:
        try:
            with np.load(path, allow_pickle=False) as data:
                held = list(data.files)
                return {k: data[k] for k in keys if k in held} | {"_keys": held}
        except ValueError as error:
            if "allow_pickle" not in str(error):
                raise
            if "Object arrays" not in str(error):  # the whole file is a pickle
                raise ValueError(f"{path}: is a pickle, not an .npz archive, which disgen never loads "
                                 "(unpickling can run code); save the arrays with numpy.savez") from None
            raise ValueError(f"{path}: holds a pickled (object) array, which disgen never loads; store "
                             "factor_names as a string array, e.g. np.array(names, dtype=str)") from None
    if suffix in HDF5_SUFFIXES:
        import h5py

        with h5py.File(path, "r") as data:
            held = list(data.keys())
            return {k: data[k][()] for k in keys if k in held} | {"_keys": held}
    raise ValueError(f"{path}: expected a .npz, .h5 or .hdf5 file; got suffix {path.suffix!r}")


def check_path(path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (a labelled dataset: .npz or .h5 with keys "
                                f"{', '.join(REQUIRED_KEYS)})")
    return path


def file_labels(path, n_images: int, bins=None) -> tuple[np.ndarray, FactorSpace]:
    """(classes, factor space) of a labelled file, read from its small arrays (``factors``,
    ``factor_names``, ``factor_bins``) alone: what a driver checks without reading the images.
    ``n_images`` is the length of its ``images``."""
    path = check_path(path)
    arrays = _read(path, ("factors", *OPTIONAL_KEYS))
    return _labels(arrays, n_images, path, bins)


def _labels(arrays: dict, n_images: int, path: Path, bins) -> tuple[np.ndarray, FactorSpace]:
    missing = [k for k in REQUIRED_KEYS if k not in arrays["_keys"]]
    if missing:
        raise ValueError(f"{path}: expected keys {', '.join(REQUIRED_KEYS)} (optional: "
                         f"{', '.join(OPTIONAL_KEYS)}); missing {', '.join(missing)}; the file holds "
                         f"{', '.join(arrays['_keys']) or 'nothing'}")
    names = _factor_names(arrays.get("factor_names"), np.asarray(arrays["factors"]).shape[-1], path) \
        if np.asarray(arrays["factors"]).ndim == 2 else None
    stored = arrays.get("factor_bins")
    if stored is not None:
        stored = np.asarray(stored)
        if stored.ndim != 1 or not np.issubdtype(stored.dtype, np.integer):
            raise ValueError(f"{path}: factor_bins: expected an integer array (F,); got {stored.dtype} "
                             f"{stored.shape}")
        if names is not None and len(stored) != len(names):
            raise ValueError(f"{path}: factor_bins: expected {len(names)} entries (one per factor); "
                             f"got {len(stored)}")
    per_factor = None if names is None else _bins_per_factor(bins, names, stored)
    return factor_classes(arrays["factors"], n_images, names, bins=per_factor, source=str(path),
                          kinds=arrays.get("factor_kinds"))


def load_labelled(path, bins=None, name: str = NAME) -> GroundTruthDataset:
    """Load a labelled dataset file (.npz, .h5 or .hdf5; keys in the module docstring).

    ``bins`` overrides the file's ``factor_bins`` (an int, a sequence or a dict by factor name).
    """
    path = check_path(path)
    arrays = _read(path)
    if "images" in arrays:
        _check_images(np.asarray(arrays["images"]), path)
    classes, space = _labels(arrays, len(arrays.get("images", ())), path, bins)
    return GroundTruthDataset(name, stored_images(np.asarray(arrays["images"])), classes, space)


def write_labelled(path, images: np.ndarray, factors: np.ndarray,
                   factor_names: Sequence[str] | None = None,
                   factor_bins: Sequence[int] | None = None,
                   factor_kinds: Sequence[str] | None = None) -> Path:
    """Write arrays in the labelled-dataset format (.npz, or .h5/.hdf5 with h5py); the path.

    The arrays are checked first with the same rules as :func:`load_labelled`.
    """
    path = Path(path)
    labelled_dataset(images, factors, factor_names, bins=None if factor_bins is None else list(factor_bins),
                     source=str(path), kinds=factor_kinds)
    arrays = {"images": np.asarray(images), "factors": np.asarray(factors)}
    if factor_names is not None:
        arrays["factor_names"] = np.asarray([str(n) for n in factor_names], dtype=str)
    if factor_bins is not None:
        arrays["factor_bins"] = np.asarray(factor_bins, dtype=np.int64)
    if factor_kinds is not None:
        arrays["factor_kinds"] = np.asarray([str(k) for k in factor_kinds], dtype=str)
    if path.suffix.lower() in NPZ_SUFFIXES:
        np.savez(path, **arrays)
    elif path.suffix.lower() in HDF5_SUFFIXES:
        import h5py

        with h5py.File(path, "w") as out:
            for key, value in arrays.items():
                out.create_dataset(key, data=value.astype("S") if value.dtype.kind == "U" else value)
    else:
        raise ValueError(f"{path}: expected a .npz, .h5 or .hdf5 file name; got suffix {path.suffix!r}")
    return path
