"""The in-distribution control: images of *training* combinations of a split that a model never
trained on, so that a held-out NLL can be set against the NLL of images the model did not see but
whose combinations it was trained to render (docs/data.md, "The in-distribution control").

Where they come from, decided on the trial's own dataset (its ``n_images`` subset):

- **Grid points outside the subset.** A dataset that can produce any grid point
  (``dataset.observe``: a generator renders it, a whole-grid file indexes it) and whose rows do
  not hold every training combination of the split: the training part of the whole factor grid,
  less the combinations the dataset holds. Nothing changes in training.
- **The hold-back.** Otherwise (the trial trains on the whole training part, or the dataset has no
  ``observe``, as a user's labelled file): :data:`HOLD_BACK_SHARE` of the grid's combinations,
  chosen by a hash of (flat grid index, ``data_seed``), are *held back* from the training rows;
  the training rows of those combinations are the in-distribution images, and the model never
  trains on them. Only here does the control change which images train.

:func:`training_rows` is the one place every trainer and every evaluation takes a split's
training rows from, so the held-back rows are left out of training and of every training-image
statistic alike.
"""

from __future__ import annotations

import numpy as np

__all__ = ["HOLD_BACK_SHARE", "held_back_mask", "holds_back", "in_distribution_pool", "training_rows"]

# the share of the grid's combinations held back where a trial trains on the whole training part
HOLD_BACK_SHARE = 0.02
_MASK64 = (1 << 64) - 1


def _hash(values: np.ndarray) -> np.ndarray:
    """splitmix64 of uint64 values, vectorised (wrapping arithmetic)."""
    z = values.astype(np.uint64)
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def held_back_mask(classes: np.ndarray, space, data_seed: int) -> np.ndarray:
    """True for the rows of ``classes`` whose combination is among the :data:`HOLD_BACK_SHARE`
    of the grid held back under ``data_seed`` (a hash of the flat grid index and the seed, so a
    combination is held back or not whatever rows or split it appears in)."""
    index = space.index_of(space.check_classes(classes)).astype(np.uint64)
    with np.errstate(over="ignore"):
        keyed = index * np.uint64(0x100000001B3) + np.uint64(int(data_seed) & _MASK64)
    return _hash(_hash(keyed)) < np.uint64(int(HOLD_BACK_SHARE * 2.0 ** 64))


def _outside_grid(dataset, split) -> np.ndarray:
    """Flat grid indices of the split's training part of the whole grid that ``dataset`` does not
    hold (empty where it has no ``observe``)."""
    space = dataset.factor_space
    if dataset.observe is None:
        return np.zeros(0, np.int64)
    grid = np.flatnonzero(split.train_mask(space.all_classes(), space)).astype(np.int64)
    return np.setdiff1d(grid, space.index_of(dataset.classes), assume_unique=False)


def holds_back(dataset, split) -> bool:
    """Whether the trial on ``dataset`` (its subset) holds back a validation slice: where no grid
    point of the training part lies outside its rows (see the module docstring)."""
    return len(_outside_grid(dataset, split)) == 0


def training_rows(dataset, split, data_seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(training rows, held-back rows, held-out rows) of ``dataset`` under ``split``: the split's
    training rows less the held-back ones (none unless :func:`holds_back`). ValueError where a
    side is empty, as ``Split.train_test_indices``."""
    train, test = split.train_test_indices(dataset.classes, dataset.factor_space)
    if not holds_back(dataset, split):
        return train, np.zeros(0, np.int64), test
    back = held_back_mask(dataset.classes[train], dataset.factor_space, data_seed)
    if back.all():  # a tiny dataset: keep it trainable, no control
        return train, np.zeros(0, np.int64), test
    return train[~back], train[back], test


def in_distribution_pool(dataset, split, data_seed: int) -> tuple[str, np.ndarray]:
    """Where the in-distribution images come from: ("grid", flat grid indices to render with
    ``dataset.observe``) or ("rows", the dataset's held-back rows)."""
    outside = _outside_grid(dataset, split)
    if len(outside):
        return "grid", outside
    return "rows", training_rows(dataset, split, data_seed)[1]
