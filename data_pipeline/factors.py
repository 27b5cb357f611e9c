"""Factor spaces: the generative factors of a ground-truth dataset.

Every dataset in the studies is a full factorial grid stored in row-major order: one image per
combination of factor classes, the last factor varying fastest. The flat index of an image is the
mixed-radix number of its class tuple. A :class:`FactorSpace` converts between the three ways of
naming a point of the grid: its class tuple, its flat index and its factor values (raw, as the
dataset's labels hold them, or normalised to [0, 1]).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FactorSpace:
    """Names, sizes and raw values of a dataset's generative factors."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    values: tuple[np.ndarray, ...]

    def __post_init__(self) -> None:
        if not (len(self.names) == len(self.sizes) == len(self.values)):
            raise ValueError("a factor space needs one name, size and value array per factor")
        for name, size, vals in zip(self.names, self.sizes, self.values):
            if size < 1 or len(vals) != size:
                raise ValueError(f"factor {name!r}: {len(vals)} values for size {size}")

    @property
    def n_factors(self) -> int:
        return len(self.names)

    @property
    def n_images(self) -> int:
        """The number of points in the full grid."""
        return int(np.prod(self.sizes, dtype=np.int64))

    def position(self, name: str) -> int:
        """The column of factor ``name``; a clear error if there is none."""
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"no factor {name!r}; the factors are {', '.join(self.names)}") from None

    def check_classes(self, classes: np.ndarray) -> np.ndarray:
        """Return ``classes`` as an (N, n_factors) int64 array, or raise naming what is wrong."""
        classes = np.asarray(classes)
        if classes.ndim != 2 or classes.shape[1] != self.n_factors:
            raise ValueError(
                f"classes: expected shape (N, {self.n_factors}) for factors "
                f"{', '.join(self.names)}; got {classes.shape}"
            )
        if not np.issubdtype(classes.dtype, np.integer):
            raise ValueError(f"classes: expected integer factor classes, got dtype {classes.dtype}")
        classes = classes.astype(np.int64, copy=False)
        for col, (name, size) in enumerate(zip(self.names, self.sizes)):
            column = classes[:, col]
            if column.size and (column.min() < 0 or column.max() >= size):
                raise ValueError(
                    f"classes: factor {name!r} (column {col}) must be in 0..{size - 1}; "
                    f"got values in {column.min()}..{column.max()}"
                )
        return classes

    def index_of(self, classes: np.ndarray) -> np.ndarray:
        """Flat row-major indices (last factor fastest) of an (N, n_factors) class array."""
        classes = self.check_classes(classes)
        return np.ravel_multi_index(tuple(classes.T), self.sizes).astype(np.int64)

    def classes_of(self, index: np.ndarray) -> np.ndarray:
        """The (N, n_factors) class array of flat indices."""
        index = np.asarray(index, dtype=np.int64)
        if index.size and (index.min() < 0 or index.max() >= self.n_images):
            raise ValueError(f"index: expected values in 0..{self.n_images - 1}")
        return np.stack(np.unravel_index(index, self.sizes), axis=1).astype(np.int64)

    def raw_values(self, classes: np.ndarray) -> np.ndarray:
        """Raw factor values (the dataset's own label units) of a class array."""
        classes = self.check_classes(classes)
        return np.stack([v[classes[:, i]] for i, v in enumerate(self.values)], axis=1).astype(float)

    def normalised(self, classes: np.ndarray) -> np.ndarray:
        """Factor classes scaled to [0, 1] (a one-class factor maps to 0)."""
        classes = self.check_classes(classes)
        denominators = np.maximum(np.asarray(self.sizes) - 1, 1)
        return classes / denominators

    def all_classes(self) -> np.ndarray:
        """Every class tuple of the grid, in flat-index order."""
        return self.classes_of(np.arange(self.n_images))
