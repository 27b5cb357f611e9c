"""Sampling from a full factorial grid of samples, for the BetaVAE and FactorVAE scores.

Both scores need pairs or batches of samples that share the value of one factor and vary in the
others at random. Given only arrays of codes and factors, that is possible when the samples cover
every combination of factor values (a full factorial grid); several samples of one combination are
allowed and picked between at random. On any other set of samples (a held-out split, a random
subset, correlated factors, as in Dittadi et al. 2021) the scores are ill-defined, and the metrics
return NaN with the reason.
"""

from __future__ import annotations

import math

import numpy as np


class FactorialGrid:
    """Index of samples by their combination of factor values; build with :func:`factorial_grid`."""

    def __init__(self, factors):
        self.n_samples = factors.shape[0]
        columns = [np.unique(factors[:, j], return_inverse=True) for j in range(factors.shape[1])]
        self.sizes = np.array([c[0].size for c in columns])
        self.classes = np.stack([c[1].reshape(-1) for c in columns], axis=1)
        flat = np.ravel_multi_index(self.classes.T, self.sizes) if self.sizes.size else np.zeros(0)
        self.order = np.argsort(flat, kind="stable")
        counts = np.bincount(flat, minlength=int(np.prod(self.sizes)))
        self.counts = counts
        self.starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        self.varying = np.flatnonzero(self.sizes > 1)

    def sample_classes(self, n, rng):
        """``n`` combinations of factor classes drawn uniformly from the grid, shape (n, n_factors)."""
        return np.stack([rng.integers(0, size, n) for size in self.sizes], axis=1)

    def rows_of(self, classes, rng):
        """One sample row for each combination in ``classes``, chosen at random among equals."""
        flat = np.ravel_multi_index(classes.T, self.sizes)
        offset = rng.integers(0, self.counts[flat])
        return self.order[self.starts[flat] + offset]


def factorial_grid(factors, *, max_combinations=10_000_000):
    """A :class:`FactorialGrid` over ``factors`` or, if they do not form one, the reason as a string."""
    sizes = [np.unique(factors[:, j]).size for j in range(factors.shape[1])]
    n_combinations = math.prod(sizes)
    if n_combinations > max_combinations:
        return f"the factors span {n_combinations:,} combinations, more than the {max_combinations:,} indexed"
    if n_combinations > factors.shape[0]:
        return (
            f"not a full factorial grid: {factors.shape[0]:,} samples cannot cover the "
            f"{n_combinations:,} combinations of the factor values"
        )
    n_present = np.unique(factors, axis=0).shape[0]
    if n_present < n_combinations:
        return (
            f"not a full factorial grid: {n_present:,} of the {n_combinations:,} combinations "
            "of the factor values occur"
        )
    grid = FactorialGrid(factors)
    if grid.varying.size == 0:
        return "every factor takes a single value"
    return grid
