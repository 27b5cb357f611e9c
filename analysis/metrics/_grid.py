"""Sampling from a full factorial grid, for the BetaVAE and FactorVAE scores: pairs or batches of
samples that share one factor's value and vary at random in the others, drawn either through a
representation function ``represent(classes) -> codes`` anywhere on the grid (as
disentanglement_lib does), or from arrays of codes and factors that cover every combination (else
the scores are ill-defined: NaN with the reason). docs/analysis.md, "Bad input and the choices made
for it", says more.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

# Grid points per call of a representation function: bounds the memory of the rendered images.
CHUNK_SIZE = 8192


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
        return (f"not a full factorial grid: {factors.shape[0]:,} samples cannot cover the "
                f"{n_combinations:,} combinations of the factor values")
    n_present = np.unique(factors, axis=0).shape[0]
    if n_present < n_combinations:
        return (f"not a full factorial grid: {n_present:,} of the {n_combinations:,} combinations "
                "of the factor values occur")
    grid = FactorialGrid(factors)
    if grid.varying.size == 0:
        return "every factor takes a single value"
    return grid


def check_factor_sizes(factor_sizes):
    """Class counts per factor, from a sequence of ints or anything with ``.sizes`` (a FactorSpace)."""
    sizes = getattr(factor_sizes, "sizes", factor_sizes)
    try:
        sizes = list(sizes)
    except TypeError:
        raise ValueError(
            f"factor_sizes must be a sequence of class counts per factor (or a FactorSpace); got {sizes!r}."
        ) from None
    if not sizes or not all(isinstance(s, numbers.Integral) and s >= 1 for s in sizes):
        raise ValueError(f"factor_sizes must be a non-empty sequence of integers >= 1; got {sizes!r}.")
    sizes = np.asarray(sizes, dtype=np.int64)
    if not np.any(sizes > 1):
        raise ValueError(f"factor_sizes: every factor takes a single value ({sizes.tolist()}); "
                         "nothing to score.")
    return sizes


def uniform_classes(sizes, n, rng):
    """``n`` combinations of factor classes drawn uniformly from the grid of ``sizes``, shape (n, F)."""
    return np.stack([rng.integers(0, size, n) for size in sizes], axis=1)


def represent_in_chunks(represent, classes, chunk_size=CHUNK_SIZE, n_codes=None):
    """Codes (M, n_codes) of grid points ``classes`` (M, F), ``chunk_size`` points per call, checked."""
    if not callable(represent):
        raise ValueError(f"represent must be a callable classes (M, n_factors) -> codes (M, n_codes); "
                         f"got {type(represent).__name__}.")
    chunks = []
    for start in range(0, len(classes), chunk_size):
        part = classes[start:start + chunk_size]
        codes = np.asarray(represent(part))
        if codes.ndim != 2 or codes.shape[0] != len(part) or codes.shape[1] < 1:
            raise ValueError(f"represent must return codes of shape (M, n_codes) for classes of shape "
                             f"(M, n_factors); for classes of shape {part.shape} it returned shape "
                             f"{codes.shape}.")
        if n_codes is not None and codes.shape[1] != n_codes:
            raise ValueError(f"represent returned {codes.shape[1]} codes per point after {n_codes}.")
        n_codes = codes.shape[1]
        codes = codes.astype(float)
        if not np.all(np.isfinite(codes)):
            raise ValueError(f"represent returned NaN or infinite codes (shape {codes.shape}).")
        chunks.append(codes)
    return np.concatenate(chunks)


class _Sampler:
    """What the BetaVAE and FactorVAE scores draw: ``sample(n)``, codes of n uniform grid points;
    ``pairs(fixed)``, two grid points per entry sharing factor ``fixed[i]``'s value; ``batches(fixed,
    batch_size)``, (len(fixed), batch_size, n_codes) codes of batches sharing it. Subclasses give
    ``sizes`` and ``codes_of``."""

    def sample(self, n, rng):
        return self.codes_of(uniform_classes(self.sizes, n, rng), rng)

    def pairs(self, fixed, rng):
        first = uniform_classes(self.sizes, len(fixed), rng)
        second = uniform_classes(self.sizes, len(fixed), rng)
        rows = np.arange(len(fixed))
        second[rows, fixed] = first[rows, fixed]
        # one call for both sides, so that a representation function sees full chunks
        codes = self.codes_of(np.concatenate([first, second]), rng)
        return codes[: len(fixed)], codes[len(fixed):]

    def batches(self, fixed, batch_size, rng):
        n = len(fixed)
        classes = uniform_classes(self.sizes, n * batch_size, rng).reshape(n, batch_size, -1)
        classes[np.arange(n), :, fixed] = classes[np.arange(n), 0, fixed][:, None]
        return self.codes_of(classes.reshape(n * batch_size, -1), rng).reshape(n, batch_size, -1)

    @property
    def varying(self):
        return np.flatnonzero(self.sizes > 1)


class ArrayGrid(_Sampler):
    """Given codes of a :class:`FactorialGrid`: a sample of each drawn combination, picked at random."""

    def __init__(self, codes, grid):
        self.sizes, self._codes, self._grid = grid.sizes, codes, grid

    def codes_of(self, classes, rng):
        return self._codes[self._grid.rows_of(classes, rng)]


class SampledGrid(_Sampler):
    """The full grid of ``sizes`` through a representation function, called on every point drawn
    (disentanglement_lib's way: each point is rendered and encoded afresh)."""

    def __init__(self, represent, sizes):
        if not callable(represent):
            raise ValueError(f"represent must be a callable classes (M, n_factors) -> codes (M, n_codes), "
                             f"or a GridPool; got {type(represent).__name__}.")
        self.sizes, self._represent, self._n_codes = sizes, represent, None

    def codes_of(self, classes, rng):
        codes = represent_in_chunks(self._represent, classes, n_codes=self._n_codes)
        self._n_codes = codes.shape[1]
        return codes


class GridPool(_Sampler):
    """``n_pool`` grid points drawn uniformly from the full grid and encoded once; build with
    :func:`grid_pool`. A point of a pair or batch that must share factor ``k``'s value ``v`` is a
    pool point with ``k = v``, picked at random with replacement: each pair and batch has
    disentanglement_lib's distribution, but they are not independent of each other (more
    variance, no bias). ``n_pool`` should be a few times ``batch_size`` × the largest factor size."""

    def __init__(self, classes, codes, sizes):
        self.codes = codes
        self._index(classes, sizes)

    def _index(self, classes, sizes):
        self.classes, self.sizes, self.n_rows = classes, np.asarray(sizes), len(classes)
        # per factor: rows sorted by the factor's class, and where each class starts
        self._order = np.argsort(classes, axis=0, kind="stable")
        self._counts = [np.bincount(classes[:, k], minlength=size) for k, size in enumerate(self.sizes)]
        self._starts = [np.concatenate([[0], np.cumsum(c)[:-1]]) for c in self._counts]

    def _codes(self, rows):
        return self.codes[rows]

    def _rows_sharing(self, anchors, factor, rng):
        """For each row ``anchors[i]``, a random row with the same class of ``factor[i]``."""
        value = self.classes[anchors, factor]
        out = np.empty_like(anchors)
        for k in np.unique(factor):
            mine = factor == k
            v = value[mine]
            offset = rng.integers(0, self._counts[k][v])
            out[mine] = self._order[self._starts[k][v] + offset, k]
        return out

    def sample(self, n, rng):
        return self._codes(rng.integers(0, self.n_rows, n))

    def pairs(self, fixed, rng):
        first = rng.integers(0, self.n_rows, len(fixed))
        second = self._rows_sharing(first, fixed, rng)
        codes = self._codes(np.concatenate([first, second]))
        return codes[: len(fixed)], codes[len(fixed):]

    def batches(self, fixed, batch_size, rng):
        anchors = rng.integers(0, self.n_rows, len(fixed))
        rows = self._rows_sharing(np.repeat(anchors, batch_size), np.repeat(fixed, batch_size), rng)
        return self._codes(rows).reshape(len(fixed), batch_size, -1)


class RowSampler(GridPool):
    """A :class:`GridPool` over a fixed set of rows, such as a model's training images, encoded afresh
    at every draw (``encode(rows)``: codes of row numbers 0..N−1 of ``classes`` (N, F)). On a full
    factorial grid this is disentanglement_lib's distribution; on other rows (a held-out split's
    training images) its restriction to them."""

    def __init__(self, classes, encode, sizes):
        self._encode, self._n_codes = encode, None
        self._index(np.asarray(classes), check_factor_sizes(sizes))

    def _codes(self, rows):
        codes = represent_in_chunks(self._encode, rows, n_codes=self._n_codes)
        self._n_codes = codes.shape[1]
        return codes


def grid_pool(represent, factor_sizes, n_pool, *, random_state=0):
    """A :class:`GridPool` of ``n_pool`` uniform grid points of ``factor_sizes`` (a sequence of
    class counts, or a FactorSpace), encoded by ``represent(classes) -> codes``. ``random_state``
    is anything ``numpy.random.default_rng`` takes."""
    sizes = check_factor_sizes(factor_sizes)
    if not (isinstance(n_pool, numbers.Integral) and n_pool >= 2):
        raise ValueError(f"n_pool must be an integer >= 2; got {n_pool!r}.")
    rng = np.random.default_rng(random_state)
    classes = uniform_classes(sizes, n_pool, rng)
    return GridPool(classes, represent_in_chunks(represent, classes), sizes)


def sampler_of(represent, factor_sizes):
    """The sampler for a representation function (with ``factor_sizes``) or a :class:`GridPool`."""
    if isinstance(represent, GridPool):
        if factor_sizes is not None and not np.array_equal(check_factor_sizes(factor_sizes), represent.sizes):
            raise ValueError(f"factor_sizes {list(getattr(factor_sizes, 'sizes', factor_sizes))} differ from "
                             f"the pool's {represent.sizes.tolist()}; pass factor_sizes=None with a "
                             "GridPool.")
        return represent
    if factor_sizes is None:
        raise ValueError("factor_sizes is needed with a representation function (only a GridPool knows "
                         "its own).")
    return SampledGrid(represent, check_factor_sizes(factor_sizes))
