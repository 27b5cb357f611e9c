"""Seeded samplers over a factor grid: weak-supervision pairs, composition triplets, D21 subsets.

All samplers work on flat grid indices of a :class:`FactorSpace` and draw only from ``allowed``
(for example the training indices of a split), so no held-out image leaks into training data.
"""

from __future__ import annotations

import numpy as np

from data_pipeline.factors import FactorSpace
from data_pipeline.splits.registry import D21_ENCODER_HELD_OUT_HUES, D21_ENCODER_HUES


def _allowed_set(space: FactorSpace, allowed) -> np.ndarray:
    if allowed is None:
        return np.arange(space.n_images)
    allowed = np.unique(np.asarray(allowed, dtype=np.int64))
    if allowed.size == 0:
        raise ValueError("allowed: expected at least one grid index to draw from")
    return allowed


def weak_pairs(space: FactorSpace, n_pairs: int, k: int | None = 1, seed: int = 0, allowed=None,
               max_tries: int = 100) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs of grid indices whose factor classes differ in exactly ``k`` factors.

    ``k=None`` draws k per pair uniformly from 1..(number of varying factors - 1), as Locatello
    et al. (2020) do. Factors with one class never change. Returns (first, second, k per pair).
    Both images of a pair are in ``allowed``; pairs are redrawn up to ``max_tries`` times.
    """
    varying = np.flatnonzero(np.asarray(space.sizes) > 1)
    if k is not None and not 1 <= k <= len(varying):
        raise ValueError(f"k: expected 1..{len(varying)} (factors that vary) or None; got {k}")
    if n_pairs < 1:
        raise ValueError(f"n_pairs must be at least 1; got {n_pairs}")
    rng = np.random.default_rng(seed)
    pool = _allowed_set(space, allowed)
    sizes = np.asarray(space.sizes)
    first = np.empty(n_pairs, np.int64)
    second = np.empty(n_pairs, np.int64)
    ks = np.empty(n_pairs, np.int64)
    todo = np.arange(n_pairs)
    for _ in range(max_tries):
        m = len(todo)
        a = rng.choice(pool, size=m)
        ca = space.classes_of(a)
        kk = np.full(m, k) if k is not None else rng.integers(1, max(len(varying) - 1, 1) + 1, size=m)
        # choose kk distinct varying factors per pair: rank random keys
        keys = rng.random((m, len(varying)))
        order = np.argsort(keys, axis=1)
        change = np.zeros((m, space.n_factors), bool)
        rows = np.repeat(np.arange(m), kk)
        cols = varying[np.concatenate([order[i, :kk[i]] for i in range(m)])]
        change[rows, cols] = True
        # a new class different from the old one: old + uniform(1..size-1) mod size
        shift = (rng.random((m, space.n_factors)) * (sizes - 1)).astype(np.int64) + 1
        cb = np.where(change, (ca + shift) % sizes, ca)
        b = space.index_of(cb)
        ok = np.isin(b, pool)
        first[todo[ok]], second[todo[ok]], ks[todo[ok]] = a[ok], b[ok], kk[ok]
        todo = todo[~ok]
        if len(todo) == 0:
            return first, second, ks
    raise ValueError(f"weak_pairs: could not draw {len(todo)} of {n_pairs} pairs inside `allowed` "
                     f"in {max_tries} tries; allow more images or use a smaller k")


def composition_triplets(space: FactorSpace, n: int, seed: int = 0, allowed=None, max_tries: int = 100):
    """Composition-task triplets (M21 §2.3): (reference, transform, action, target).

    ``action`` is the factor whose class the target takes from the transform; every other factor
    comes from the reference. Reference, transform and target are all in ``allowed`` (pass a
    split's training indices: no held-out image appears in a training triplet).
    """
    if n < 1:
        raise ValueError(f"n must be at least 1; got {n}")
    rng = np.random.default_rng(seed)
    pool = _allowed_set(space, allowed)
    out = [np.empty(n, np.int64) for _ in range(4)]
    todo = np.arange(n)
    for _ in range(max_tries):
        m = len(todo)
        ref, tra = rng.choice(pool, size=m), rng.choice(pool, size=m)
        action = rng.integers(0, space.n_factors, size=m)
        target_classes = space.classes_of(ref)
        target_classes[np.arange(m), action] = space.classes_of(tra)[np.arange(m), action]
        target = space.index_of(target_classes)
        ok = np.isin(target, pool)
        for arr, val in zip(out, (ref, tra, action, target)):
            arr[todo[ok]] = val[ok]
        todo = todo[~ok]
        if len(todo) == 0:
            return tuple(out)
    raise ValueError(f"composition_triplets: could not draw {len(todo)} of {n} triplets inside "
                     f"`allowed` in {max_tries} tries")


def d21_ood_subsets(classes: np.ndarray, space: FactorSpace, factor: str = "object_hue",
                    encoder_held_out=D21_ENCODER_HELD_OUT_HUES) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Dittadi et al. (2021)'s OOD subsets on a colour factor, as (train rows, test rows) per
    scenario, for the downstream regressors:

    * ``encoder``: the representation trains on every colour but ``encoder_held_out``;
    * ``OOD1-A``: train on the lowest encoder colour, test on the other encoder colours;
    * ``OOD1-B``: train on the high half of the encoder colours, test on the low half;
    * ``OOD1-C``: alternate encoder colours between train and test;
    * ``OOD2-A``: train on every encoder colour, test on the held-out ones.
    """
    classes = space.check_classes(classes)
    column = classes[:, space.position(factor)]
    size = space.sizes[space.position(factor)]
    held = tuple(sorted(set(int(c) for c in encoder_held_out)))
    seen = tuple(c for c in range(size) if c not in held)
    if len(seen) < 2 or not held:
        raise ValueError(f"encoder_held_out: expected some but not all of the {size} {factor} classes "
                         f"(leaving at least 2); got {held}")
    half = len(seen) // 2

    def rows(values):
        return np.flatnonzero(np.isin(column, values))

    return {
        "encoder": (rows(seen), rows(held)),
        "OOD1-A": (rows(seen[:1]), rows(seen[1:])),
        "OOD1-B": (rows(seen[half:]), rows(seen[:half])),
        "OOD1-C": (rows(seen[0::2]), rows(seen[1::2])),
        "OOD2-A": (rows(seen), rows(held)),
    }


__all__ = ["D21_ENCODER_HUES", "composition_triplets", "d21_ood_subsets", "weak_pairs"]
