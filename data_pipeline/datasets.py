"""Ground-truth datasets: images with the factor classes that generated them.

A dataset is one shared uint8 array plus its class labels. Splits select rows by index, never by
copying, and images become floats only per batch, on the training device.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from data_pipeline import dsprites, mpi3d, shapes3d, sprites
from data_pipeline.cache import cached_images
from data_pipeline.factors import FactorSpace
from data_pipeline.spaces import canonical_name
from data_pipeline.spaces import factor_space as _default_space

# Datasets whose real files hold 0/1 pixels; they are stored here as 0/255.
BINARY_DATASETS = ("dsprites",)

# Generator version of each dataset: part of the on-disk cache key.
GENERATOR_VERSIONS = {
    "dsprites": 1,
    "shapes3d": shapes3d.GENERATOR_VERSION,
    "mpi3d": mpi3d.GENERATOR_VERSION,
    "circles": sprites.GENERATOR_VERSION,
    "simple": sprites.GENERATOR_VERSION,
    "twoshapes": sprites.GENERATOR_VERSION,
}


@dataclass
class GroundTruthDataset:
    """Images (N, C, H, W) uint8 in 0..255, and their factor classes (N, n_factors).

    ``observe``, where known, gives the stored-format images (M, C, H, W) of any classes of the
    full factor grid, held here or not: a procedural dataset renders them, a full real grid
    indexes them. Metrics that sample their own grid points (the BetaVAE and FactorVAE scores)
    need it, as disentanglement_lib's ``sample_observations_from_factors``.
    """

    name: str
    images: np.ndarray
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


def factor_space(name: str) -> FactorSpace:
    """The factor space of a dataset by name (``3dshapes`` and other aliases accepted)."""
    return _default_space(name)


def render(name: str, classes: np.ndarray, space: FactorSpace | None = None) -> np.ndarray:
    """Procedurally render the images of an (N, n_factors) class array, as the real file holds
    them: dSprites (N, 64, 64) 0/1; Circles and Simple (N, 64, 64) 0/255; 3DShapes, MPI3D and
    TwoShapes (N, 64, 64, 3) RGB. ``space`` overrides the default grid sizes of Circles, Simple
    and TwoShapes."""
    name = canonical_name(name)
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


def load_procedural(name: str, n_images: int | None = None, seed: int = 0, *,
                    classes: np.ndarray | None = None, cache_dir=None) -> GroundTruthDataset:
    """Render a dataset from its generator: the full grid, ``n_images`` grid points drawn at
    random without replacement (seeded, in flat-index order), or the given ``classes``.

    With ``cache_dir`` (or the ``DISGEN_CACHE`` environment variable set to a folder) the images
    are cached on disk, keyed by dataset, generator version and grid points, and verified by
    checksum when reloaded (see :mod:`data_pipeline.cache`).
    """
    name = canonical_name(name)
    space = factor_space(name)
    if classes is not None:
        classes = space.check_classes(classes)
    else:
        if n_images is None or n_images >= space.n_images:
            index = np.arange(space.n_images)
        else:
            if n_images < 1:
                raise ValueError(f"n_images must be at least 1; got {n_images}")
            rng = np.random.default_rng(seed)
            index = np.sort(rng.choice(space.n_images, size=n_images, replace=False))
        classes = space.classes_of(index)
    images = cached_images(name, GENERATOR_VERSIONS[name], classes, lambda: _render_stored(name, classes),
                           cache_dir=cache_dir)
    return GroundTruthDataset(name=name, images=images, classes=classes, factor_space=space,
                              observe=functools.partial(_render_stored, name))


def _render_stored(name: str, classes: np.ndarray) -> np.ndarray:
    """Images as the dataset stores them internally: (N, C, H, W) uint8 in 0..255."""
    images = as_channels_first(render(name, classes))
    if name in BINARY_DATASETS:
        images = images * np.uint8(255)
    return images


@functools.cache
def dataset_channels(name: str) -> int:
    """Image channels of a dataset (1 or 3), from one rendered grid point."""
    space = factor_space(name)
    return load_procedural(name, classes=space.classes_of([0])).channels
