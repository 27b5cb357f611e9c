"""Ground-truth datasets: images with the factor classes that generated them.

A dataset is one shared uint8 array (in memory, or memory-mapped from the prepared layout's
blocks: :class:`ImageRows`) plus its class labels. Subsets and splits select rows by index, never
by copying, and images become floats only per batch, on the training device.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from data_pipeline import dsprites, mpi3d, shapes3d, sprites
from data_pipeline.factors import FactorSpace
from data_pipeline.spaces import canonical_name, has_generator
from data_pipeline.spaces import factor_space as _default_space

# Datasets whose real files hold 0/1 pixels; they are stored here as 0/255.
BINARY_DATASETS = ("dsprites",)

# Generator version of each dataset: part of a procedural dataset's content id.
GENERATOR_VERSIONS = {
    "dsprites": 1,
    "shapes3d": shapes3d.GENERATOR_VERSION,
    "mpi3d": mpi3d.GENERATOR_VERSION,
    "circles": sprites.GENERATOR_VERSION,
    "simple": sprites.GENERATOR_VERSION,
    "twoshapes": sprites.GENERATOR_VERSION,
}


class ImageRows:
    """Images stored in one or more blocks (memory-mapped ``.npy`` files of the prepared layout),
    read in place, optionally restricted to an index set ``rows``: row ``i`` is the stored image
    ``rows[i]``. Indexing as numpy does (``images[rows]``, ``images[i]``, slices) gathers just the
    rows asked for, so a subset of a memory-mapped dataset costs its index array, not a copy.
    ``np.asarray`` gathers every row (a copy; only for callers that want the whole array)."""

    def __init__(self, blocks, rows: np.ndarray | None = None):
        self.blocks = list(blocks)
        if not self.blocks:
            raise ValueError("ImageRows: expected at least one block of images")
        first = self.blocks[0]
        if any(b.shape[1:] != first.shape[1:] or b.dtype != first.dtype for b in self.blocks):
            raise ValueError("ImageRows: every block must hold images of one shape and dtype")
        self.starts = np.cumsum([0, *(len(b) for b in self.blocks)]).astype(np.int64)
        self.rows = None if rows is None else np.asarray(rows, dtype=np.int64).reshape(-1)
        stored = int(self.starts[-1])
        if self.rows is not None and len(self.rows) and (self.rows.min() < 0 or self.rows.max() >= stored):
            raise IndexError(f"ImageRows: rows must lie in 0..{stored - 1}")
        self.shape = (stored if self.rows is None else len(self.rows), *first.shape[1:])
        self.dtype, self.ndim = first.dtype, first.ndim

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def _stored_rows(self, key) -> np.ndarray:
        """The stored rows that ``key`` (an int array, a boolean mask or a slice) names."""
        if isinstance(key, slice):
            positions = np.arange(len(self))[key]
        else:
            positions = np.asarray(key)
            if positions.dtype == bool:
                positions = np.flatnonzero(positions)
            positions = positions.astype(np.int64, copy=False)
            if positions.ndim != 1:
                raise IndexError(f"ImageRows: expected a 1-D index; got shape {positions.shape}")
            if len(positions) and (positions.min() < -len(self) or positions.max() >= len(self)):
                raise IndexError(f"ImageRows: index out of range for {len(self)} images")
            positions = np.where(positions < 0, positions + len(self), positions)
        return positions if self.rows is None else self.rows[positions]

    def _gather(self, stored: np.ndarray) -> np.ndarray:
        if len(self.blocks) == 1:
            return self.blocks[0][stored]
        block = np.searchsorted(self.starts, stored, side="right") - 1
        out = np.empty((len(stored), *self.shape[1:]), dtype=self.dtype)
        for b in np.unique(block):
            mask = block == b
            out[mask] = self.blocks[b][stored[mask] - self.starts[b]]
        return out

    def __getitem__(self, key):
        rest = ()
        if isinstance(key, tuple):
            key, rest = key[0], key[1:]
        if isinstance(key, (int, np.integer)):
            index = int(key) + (len(self) if key < 0 else 0)
            if not 0 <= index < len(self):
                raise IndexError(f"ImageRows: index {key} out of range for {len(self)} images")
            stored = index if self.rows is None else int(self.rows[index])
            b = int(np.searchsorted(self.starts, stored, side="right") - 1)
            image = self.blocks[b][stored - self.starts[b]]
            return image[rest] if rest else image
        images = self._gather(self._stored_rows(key))
        return images[(slice(None), *rest)] if rest else images

    def __array__(self, dtype=None, copy=None):
        images = self._gather(self._stored_rows(slice(None)))
        return images if dtype is None else images.astype(dtype)

    def subset(self, rows) -> ImageRows:
        """Rows ``rows`` of these images, by index: no image is copied."""
        return ImageRows(self.blocks, self._stored_rows(np.asarray(rows, dtype=np.int64)))

    def __repr__(self) -> str:
        return f"ImageRows({len(self)} images {self.shape[1:]} {self.dtype} in {len(self.blocks)} block(s))"


@dataclass
class GroundTruthDataset:
    """Images (N, C, H, W) uint8 in 0..255, and their factor classes (N, n_factors).

    ``images`` is a numpy array (a memory map, or in memory) or an :class:`ImageRows`; every
    consumer indexes it (``images[rows]``), so either works.

    ``observe``, where known, gives the stored-format images (M, C, H, W) of any classes of the
    full factor grid, held here or not: a procedural dataset renders them, a full real grid
    indexes them. Metrics that sample their own grid points (the BetaVAE and FactorVAE scores)
    need it, as disentanglement_lib's ``sample_observations_from_factors``.
    """

    name: str
    images: np.ndarray | ImageRows
    classes: np.ndarray
    factor_space: FactorSpace
    observe: Callable[[np.ndarray], np.ndarray] | None = None

    def __post_init__(self) -> None:
        if self.images.dtype != np.uint8 or self.images.ndim != 4:
            raise ValueError(
                f"images: expected a uint8 array (N, C, H, W); got {self.images.dtype} "
                f"{self.images.shape}"
            )
        self.classes = self.factor_space.check_classes(self.classes)
        if len(self.classes) != len(self.images):
            raise ValueError(
                f"classes: expected one row per image ({len(self.images)}); got {len(self.classes)}"
            )

    def __len__(self) -> int:
        return len(self.images)

    @property
    def channels(self) -> int:
        return self.images.shape[1]

    @property
    def image_size(self) -> int:
        return self.images.shape[2]

    def subset(self, rows, observe: bool = False) -> GroundTruthDataset:
        """Rows ``rows`` of this dataset as a dataset of their own, by index: the images are not
        copied (an :class:`ImageRows` view), only the classes. ``observe`` keeps this dataset's
        ``observe`` (it reaches any grid point, so it still serves the subset)."""
        rows = np.asarray(rows, dtype=np.int64)
        images = self.images if isinstance(self.images, ImageRows) else ImageRows([self.images])
        images = images.subset(rows)
        return GroundTruthDataset(self.name, images, self.classes[rows], self.factor_space,
                                  observe=self.observe if observe else None)


def factor_space(name: str) -> FactorSpace:
    """The factor space of a dataset by name (``3dshapes`` and other aliases accepted)."""
    return _default_space(name)


def render(name: str, classes: np.ndarray, space: FactorSpace | None = None) -> np.ndarray:
    """Procedurally render the images of an (N, n_factors) class array, as the real file holds
    them: dSprites (N, 64, 64) 0/1; Circles and Simple (N, 64, 64) 0/255; 3DShapes, MPI3D and
    TwoShapes (N, 64, 64, 3) RGB. ``space`` overrides the default grid sizes of Circles, Simple
    and TwoShapes."""
    name = canonical_name(name)
    if not has_generator(name):
        raise ValueError(f"{name} has no generator: its images come from its files only; prepare them with "
                         f"python -m data_pipeline.prepare {name} --from-file DIR (docs/datasets.md)")
    space = space or factor_space(name)
    classes = space.check_classes(classes)
    if name == "dsprites":
        return dsprites.render(classes)
    if name == "shapes3d":
        return shapes3d.render(classes)
    if name == "mpi3d":
        return mpi3d.render(classes)
    if name == "circles":
        return sprites.render_circles(classes, space)
    if name == "simple":
        return sprites.render_simple(classes, space)
    return sprites.render_twoshapes(classes, space)


def as_channels_first(images: np.ndarray) -> np.ndarray:
    """Images as a file holds them ((N, H, W) or (N, H, W, C)) to (N, C, H, W), contiguous."""
    if images.ndim == 3:
        return images[:, None]
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2))


def grid_draw(space: FactorSpace, n_images: int | None, seed: int = 0) -> np.ndarray:
    """The flat grid indices a generator renders for ``n_images`` (seeded, without replacement,
    in flat-index order); every index for None or at least the grid's size."""
    if n_images is None or n_images >= space.n_images:
        return np.arange(space.n_images, dtype=np.int64)
    if n_images < 1:
        raise ValueError(f"n_images must be at least 1; got {n_images}")
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(space.n_images, size=n_images, replace=False))


def load_procedural(name: str, n_images: int | None = None, seed: int = 0, *,
                    classes: np.ndarray | None = None) -> GroundTruthDataset:
    """Render a dataset from its generator, in memory: the full grid, ``n_images`` grid points
    drawn at random without replacement (seeded, in flat-index order: :func:`grid_draw`), or the
    given ``classes``. (A sweep's trials render through the node cache instead,
    :mod:`data_pipeline.node_cache`: once per node, memory-mapped.)"""
    name = canonical_name(name)
    space = factor_space(name)
    if classes is not None:
        classes = space.check_classes(classes)
    else:
        classes = space.classes_of(grid_draw(space, n_images, seed))
    return GroundTruthDataset(name=name, images=render_stored(name, classes), classes=classes,
                              factor_space=space, observe=functools.partial(render_stored, name))


def render_stored(name: str, classes: np.ndarray) -> np.ndarray:
    """Images as the dataset stores them internally: (N, C, H, W) uint8 in 0..255."""
    images = as_channels_first(render(name, classes))
    if name in BINARY_DATASETS:
        images = images * np.uint8(255)
    return images


@functools.cache
def dataset_channels(name: str) -> int:
    """Image channels of a dataset (1 or 3), from one rendered grid point (RGB for a dataset read
    only from its files: D21's robot finger)."""
    if not has_generator(name):
        return 3
    space = factor_space(name)
    return load_procedural(name, classes=space.classes_of([0])).channels
