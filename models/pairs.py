"""Pairs of images for weakly supervised objectives (Ada-GVAE).

A pair is two training rows that share every factor except at most k, the k chosen at random for
each pair (Locatello et al. 2020; Dittadi et al. 2021 use k = 1). The sampler needs only each
row's factor values, so it works on full factorial grids and on any labelled dataset: it groups
the training rows by their values on the factors outside the chosen k and draws the partner from
the anchor's group. Anchors whose group has no other member are redrawn.
"""

from __future__ import annotations

import numpy as np


class PairSampler:
    def __init__(self, factors: np.ndarray, train_indices: np.ndarray, factors_changed: int = 1):
        factors = np.asarray(factors)
        if factors.ndim != 2:
            raise ValueError(f"factors: expected one row of factor values per image, shape (N, F); "
                             f"got shape {factors.shape}")
        self.rows = np.asarray(train_indices, dtype=np.int64)
        if len(self.rows) and self.rows.max() >= len(factors):
            raise ValueError(f"factors: has {len(factors)} rows but train_indices reaches {self.rows.max()}")
        self.values = factors[self.rows]
        self.varying = [f for f in range(factors.shape[1]) if len(np.unique(self.values[:, f])) > 1]
        if factors_changed > len(self.varying):
            raise ValueError(f"pair_factors_changed: {factors_changed} exceeds the {len(self.varying)} "
                             "factors "
                             "that vary over the training rows")
        self.k = factors_changed
        self._groupings: dict[tuple, tuple] = {}

    def _grouping(self, changed: tuple[int, ...]):
        if changed not in self._groupings:
            kept = [f for f in range(self.values.shape[1]) if f not in changed]
            if kept:
                _, group = np.unique(self.values[:, kept], axis=0, return_inverse=True)
                group = group.reshape(-1)
            else:
                group = np.zeros(len(self.values), np.int64)
            order = np.argsort(group, kind="stable")
            counts = np.bincount(group)
            starts = np.cumsum(counts) - counts
            position = np.empty(len(group), np.int64)
            position[order] = np.arange(len(group)) - starts[group[order]]
            if counts.max() < 2:
                raise ValueError(f"factors: no two training rows differ only in factors {list(changed)}; "
                                 "pairs cannot be drawn")
            self._groupings[changed] = (group, order, starts, counts, position)
        return self._groupings[changed]

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` pairs of row indices (into the full image array) drawn with ``rng``."""
        first, second = np.empty(n, np.int64), np.empty(n, np.int64)
        filled, attempts = 0, 0
        while filled < n:
            attempts += 1
            if attempts > 1000 * n:
                raise RuntimeError("could not draw pairs: almost no anchor has a partner")
            changed = tuple(sorted(int(f) for f in rng.choice(self.varying, size=self.k, replace=False)))
            group, order, starts, counts, position = self._grouping(changed)
            anchor = int(rng.integers(len(self.rows)))
            g = group[anchor]
            if counts[g] < 2:
                continue
            pick = int(rng.integers(counts[g] - 1))
            if pick == position[anchor]:
                pick = counts[g] - 1
            first[filled], second[filled] = self.rows[anchor], self.rows[order[starts[g] + pick]]
            filled += 1
        return first, second
