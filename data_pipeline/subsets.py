"""Subsets of a stored dataset: ``n_images`` rows drawn as the generators draw grid points.

:func:`subset_rows` decides on the factor classes alone (what a driver reads, never the images),
so the driver and a trial choose the same rows. Where the data holds every grid point that
``load_procedural(name, n, seed)`` would render (a file or prepared folder with the whole factor
grid, or one prepared from the generator with that draw), those are the rows, so a real, a
prepared and a procedural trial of the same config see the same factor combinations; a whole-grid
dataset can also ``observe`` any grid point, and so can its subsets (the BetaVAE and FactorVAE
scores sample their own, and the evaluation draws its held-out images from the whole grid).
Otherwise ``n`` rows are drawn at random (seeded, in stored order). A subset is an index set
(:meth:`GroundTruthDataset.subset`): no image is copied.
"""

from __future__ import annotations

import numpy as np

from data_pipeline.datasets import GroundTruthDataset, grid_draw


def observe_grid(images, row_of_index: np.ndarray, space, classes: np.ndarray) -> np.ndarray:
    """The stored images of any grid points of a dataset that holds the whole grid: an index."""
    return images[row_of_index[space.index_of(space.check_classes(classes))]]


def grid_rows(data) -> np.ndarray | None:
    """For each flat grid index, the row of ``data`` (anything with ``classes`` and
    ``factor_space``) that holds it; None unless ``data`` holds every grid point exactly once."""
    return grid_rows_of(data.classes, data.factor_space)


def grid_rows_of(classes: np.ndarray, space) -> np.ndarray | None:
    """:func:`grid_rows` of a class array in factor space ``space``."""
    if len(classes) != space.n_images:
        return None
    row_of_index = np.full(space.n_images, -1, dtype=np.int64)
    row_of_index[space.index_of(classes)] = np.arange(len(classes))
    return row_of_index if (row_of_index >= 0).all() else None


def _rows_of_draw(classes: np.ndarray, space, n_images: int, seed: int) -> np.ndarray | None:
    """The rows holding the grid points a generator draws for (n_images, seed) in ``space``, in
    draw order, if the data holds every one of them; else None."""
    if len(classes) < n_images or not len(classes):
        return None
    drawn = grid_draw(space, n_images, seed)
    index = space.index_of(classes)
    order = np.argsort(index, kind="stable")
    found = np.minimum(np.searchsorted(index[order], drawn), len(order) - 1)
    if not np.array_equal(index[order][found], drawn):
        return None
    return order[found]


def subset_rows(name: str, classes: np.ndarray, space, n_images: int | None, seed: int) -> np.ndarray | None:
    """The rows of a stored dataset a trial with ``n_images`` and ``data_seed`` trains on (see the
    module docstring); None for all of them. ValueError if it holds too few."""
    if n_images is None:
        return None
    if n_images < 1:
        raise ValueError(f"n_images must be at least 1 or null (the whole file); got {n_images}")
    if n_images >= len(classes) and grid_rows_of(classes, space) is not None:
        return None
    rows = None if name == "labelled" else _rows_of_draw(classes, space, n_images, seed)
    if rows is None:
        if n_images > len(classes):
            raise ValueError(f"n_images {n_images:,} but the {name} data holds only {len(classes):,} "
                             "images; set n_images to at most that, or null")
        rows = np.sort(np.random.default_rng(seed).choice(len(classes), size=n_images, replace=False))
    return None if np.array_equal(rows, np.arange(len(classes))) else rows


def subsample(data: GroundTruthDataset, n_images: int | None, seed: int,
              keep_observe: bool = True) -> GroundTruthDataset:
    """``n_images`` rows of ``data`` (all of them for None), by index (see the module docstring).
    A subset keeps ``data.observe`` unless ``keep_observe`` is False: where the data has one it
    reaches any grid point (a generator renders it, a whole-grid dataset indexes it), so it still
    serves the subset; ValueError if the data holds fewer rows."""
    rows = subset_rows(data.name, data.classes, data.factor_space, n_images, seed)
    if rows is None:
        return data
    return data.subset(rows, observe=keep_observe)
