"""Factor spaces: the generative factors of a ground-truth dataset.

Every dataset in the studies is a full factorial grid stored in row-major order: one image per
combination of factor classes, the last factor varying fastest. The flat index of an image is the
mixed-radix number of its class tuple. A :class:`FactorSpace` converts between the three ways of
naming a point of the grid: its class tuple, its flat index and its factor values (raw, as the
dataset's labels hold them, or normalised to [0, 1]).

Each factor also has a **kind**, which says how a readout should score whether a representation
holds it (docs/analysis.md, "Readout per factor"):

- ``categorical``: unordered classes (a shape, a colour); read as a class, scored by accuracy;
- ``ordinal``: ordered values (a position, a scale); read as a number, scored by R²;
- ``circular``: an angle in radians, read as its cosine and sine and scored by R². Where the
  image looks the same after a fraction of a turn that depends on another factor (dSprites: a
  square after a quarter turn, an ellipse after a half turn), ``symmetry`` gives that factor and
  the order per class, and the angle is read modulo its symmetry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FACTOR_KINDS = ("categorical", "ordinal", "circular")


@dataclass(frozen=True)
class FactorSpace:
    """Names, sizes, raw values and kinds of a dataset's generative factors.

    ``kinds``: one of :data:`FACTOR_KINDS` per factor (empty: every factor ordinal, the numbers a
    user's labels hold). ``symmetry``: for a circular factor whose rotational symmetry depends on
    another factor, ``(circular factor, that factor, order per class of that factor)``; an angle
    θ of order k is read as (cos kθ, sin kθ)."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    values: tuple[np.ndarray, ...]
    kinds: tuple[str, ...] = ()
    symmetry: tuple[tuple[str, str, tuple[int, ...]], ...] = ()

    def __post_init__(self) -> None:
        if not (len(self.names) == len(self.sizes) == len(self.values)):
            raise ValueError("a factor space needs one name, size and value array per factor")
        for name, size, vals in zip(self.names, self.sizes, self.values):
            if size < 1 or len(vals) != size:
                raise ValueError(f"factor {name!r}: {len(vals)} values for size {size}")
        kinds = tuple(self.kinds) or ("ordinal",) * len(self.names)
        if len(kinds) != len(self.names) or any(k not in FACTOR_KINDS for k in kinds):
            raise ValueError(f"kinds: expected one of {', '.join(FACTOR_KINDS)} for each of the "
                             f"{len(self.names)} factors; got {self.kinds!r}")
        object.__setattr__(self, "kinds", kinds)
        for name, by, orders in self.symmetry:
            if kinds[self.position(name)] != "circular":
                raise ValueError(f"symmetry: {name!r} is {kinds[self.position(name)]}, not circular")
            if len(orders) != self.sizes[self.position(by)] or min(orders) < 1:
                raise ValueError(f"symmetry of {name!r}: expected an order ≥ 1 for each of the "
                                 f"{self.sizes[self.position(by)]} classes of {by!r}; got {orders}")

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

    def kind(self, name: str) -> str:
        """The kind of factor ``name``: categorical, ordinal or circular."""
        return self.kinds[self.position(name)]

    def readout_targets(self, classes: np.ndarray, name: str) -> np.ndarray:
        """What a readout of factor ``name`` predicts for each row of ``classes``: the class
        (categorical), the raw value (ordinal), or (cos kθ, sin kθ) of the angle θ with k its
        symmetry order on that row (circular, shape (N, 2))."""
        classes = self.check_classes(classes)
        column = self.position(name)
        kind = self.kinds[column]
        if kind == "categorical":
            return classes[:, column]
        values = np.asarray(self.values[column], dtype=float)[classes[:, column]]
        if kind == "ordinal":
            return values
        order = np.ones(len(classes))
        for circular, by, orders in self.symmetry:
            if circular == name:
                order = np.asarray(orders, dtype=float)[classes[:, self.position(by)]]
        return np.stack([np.cos(order * values), np.sin(order * values)], axis=1)

    def all_classes(self) -> np.ndarray:
        """Every class tuple of the grid, in flat-index order."""
        return self.classes_of(np.arange(self.n_images))


def nearest_classes(values: np.ndarray, space: FactorSpace) -> tuple[np.ndarray, int | None, float]:
    """Factor classes of raw label values (N, factors), each matched to the nearest value of its
    factor's grid: (classes, the first column whose worst match lies off its grid by more than
    1e-3 of the grid's range (or of 1), or None, and that worst distance). The callers say what an
    off-grid column means for their file."""
    classes = np.empty(values.shape, dtype=np.int64)
    for col, grid in enumerate(space.values):
        distance = np.abs(values[:, col, None] - grid[None, :])
        classes[:, col] = distance.argmin(axis=1)
        worst = distance.min(axis=1).max() if len(values) else 0.0
        if worst > 1e-3 * max(1.0, float(np.ptp(grid))):
            return classes, col, float(worst)
    return classes, None, 0.0
