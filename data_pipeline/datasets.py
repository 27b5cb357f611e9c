"""Ground-truth datasets: images with the factor classes that generated them.

A dataset is one shared uint8 array plus its class labels. Splits select rows by index, never by
copying, and images become floats only per batch, on the training device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from data_pipeline import dsprites
from data_pipeline.factors import FactorSpace

DATASETS = ("dsprites",)
# Datasets whose real files hold 0/1 pixels; they are stored here as 0/255.
BINARY_DATASETS = ("dsprites",)


@dataclass
class GroundTruthDataset:
    """Images (N, C, H, W) uint8 in 0..255, and their factor classes (N, n_factors)."""

    name: str
    images: np.ndarray
    classes: np.ndarray
    factor_space: FactorSpace

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
    """The factor space of a dataset by name."""
    if name == "dsprites":
        values = dsprites.factor_values()
        return FactorSpace(
            names=tuple(dsprites.FACTOR_NAMES),
            sizes=tuple(dsprites.FACTOR_SIZES),
            values=tuple(values[n] for n in dsprites.FACTOR_NAMES),
        )
    raise KeyError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")


def render(name: str, classes: np.ndarray) -> np.ndarray:
    """Procedurally render the images of an (N, n_factors) class array, as the real file holds them."""
    space = factor_space(name)
    classes = space.check_classes(classes)
    if name == "dsprites":
        return dsprites.render(classes)
    raise KeyError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")


def load_procedural(name: str, n_images: int | None = None, seed: int = 0) -> GroundTruthDataset:
    """Render a dataset from its generator: the full grid, or ``n_images`` grid points drawn at
    random without replacement (seeded, in flat-index order)."""
    space = factor_space(name)
    if n_images is None or n_images >= space.n_images:
        index = np.arange(space.n_images)
    else:
        if n_images < 1:
            raise ValueError(f"n_images must be at least 1; got {n_images}")
        rng = np.random.default_rng(seed)
        index = np.sort(rng.choice(space.n_images, size=n_images, replace=False))
    classes = space.classes_of(index)
    images = render(name, classes)
    if images.ndim == 3:
        images = images[:, None]
    if name in BINARY_DATASETS:
        images = images * np.uint8(255)
    return GroundTruthDataset(name=name, images=images, classes=classes, factor_space=space)
