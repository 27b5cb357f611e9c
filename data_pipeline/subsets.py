"""Subsets of a real dataset file: ``n_images`` rows drawn as the generators draw grid points.

On a file that holds the whole factor grid, ``subsample(data, n, seed)`` picks the rows of the grid
points ``load_procedural(name, n, seed)`` would render, so a real and a procedural trial of the same
config see the same factor combinations; a whole-grid result can also ``observe`` any grid point (the
BetaVAE and FactorVAE scores sample their own). On a partial file, ``n`` rows drawn at random
(seeded, in file order).
"""

from __future__ import annotations

import functools

import numpy as np

from data_pipeline.datasets import GroundTruthDataset


def observe_grid(images: np.ndarray, row_of_index: np.ndarray, space, classes: np.ndarray) -> np.ndarray:
    """The stored images of any grid points of a dataset that holds the whole grid: an index."""
    return images[row_of_index[space.index_of(space.check_classes(classes))]]


def grid_rows(data: GroundTruthDataset) -> np.ndarray | None:
    """For each flat grid index, the row of ``data`` that holds it; None unless ``data`` holds
    every grid point exactly once."""
    space = data.factor_space
    if len(data) != space.n_images:
        return None
    row_of_index = np.full(space.n_images, -1, dtype=np.int64)
    row_of_index[space.index_of(data.classes)] = np.arange(len(data))
    return row_of_index if (row_of_index >= 0).all() else None


def subsample(data: GroundTruthDataset, n_images: int | None, seed: int) -> GroundTruthDataset:
    """``n_images`` rows of a real dataset (all of them for None); ValueError if the file holds
    fewer (see the module docstring)."""
    rows_of_grid = grid_rows(data)
    if n_images is None or (rows_of_grid is not None and n_images >= len(data)):
        if rows_of_grid is None:
            return data
        return GroundTruthDataset(data.name, data.images, data.classes, data.factor_space,
                                  observe=functools.partial(observe_grid, data.images, rows_of_grid,
                                                            data.factor_space))
    if n_images < 1:
        raise ValueError(f"n_images must be at least 1 or null (the whole file); got {n_images}")
    rng = np.random.default_rng(seed)
    if rows_of_grid is not None:
        rows = rows_of_grid[np.sort(rng.choice(data.factor_space.n_images, size=n_images, replace=False))]
    elif n_images > len(data):
        raise ValueError(f"n_images {n_images:,} but the real {data.name} file holds only "
                         f"{len(data):,} images; set n_images to at most that, or null")
    else:
        rows = np.sort(rng.choice(len(data), size=n_images, replace=False))
    return GroundTruthDataset(data.name, data.images[rows], data.classes[rows], data.factor_space)
