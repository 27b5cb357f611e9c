"""MIG: the mutual information gap (Chen et al., 2018), as disentanglement_lib computes it.

Each code is binned into ``n_bins`` (20) equal-width bins over its own range; ``I(code_i;
factor_j)`` by :func:`sklearn.metrics.mutual_info_score` (nats). MIG is the mean over factors of
(largest − second-largest mutual information) / ``H(factor_j)``. A factor that takes a single
value has no entropy: it is left out of the mean and of ``n_factors_scored``.
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import mutual_info_score

from analysis.metrics._checks import check_pair, varying_factors

__all__ = ["mig", "discretize", "mutual_information_matrix", "mig_from_mutual_information"]

N_BINS = 20


def discretize(codes, n_bins=N_BINS):
    """Bin each column of ``codes`` (n_samples, n_codes) into ``n_bins`` equal-width bins over
    its own range; returns integer bin indices 0..n_bins-1 of the same shape."""
    codes = np.asarray(codes, dtype=float)
    if not (isinstance(n_bins, (int, np.integer)) and n_bins >= 2):
        raise ValueError(f"n_bins must be an integer >= 2; got {n_bins!r}.")
    binned = np.zeros(codes.shape, dtype=np.int64)
    for i in range(codes.shape[1]):
        edges = np.histogram_bin_edges(codes[:, i], bins=n_bins)
        # the inner edges; the last bin is closed on the right, as np.histogram's is
        binned[:, i] = np.clip(np.digitize(codes[:, i], edges[1:-1]), 0, n_bins - 1)
    return binned


def mutual_information_matrix(discrete_codes, factors):
    """``I(code_i; factor_j)`` in nats, shape (n_codes, n_factors), from discrete arrays."""
    n_codes, n_factors = discrete_codes.shape[1], factors.shape[1]
    matrix = np.zeros((n_codes, n_factors))
    for i in range(n_codes):
        for j in range(n_factors):
            matrix[i, j] = mutual_info_score(factors[:, j], discrete_codes[:, i])
    return np.maximum(matrix, 0.0)  # mutual_info_score can return -1e-16


def mig_from_mutual_information(mutual_information, factor_entropy):
    """MIG from a (n_codes >= 2, n_factors) mutual-information matrix and each factor's entropy.

    Factors with zero entropy are left out; NaN if none is left.
    """
    matrix = np.asarray(mutual_information, dtype=float)
    entropy = np.asarray(factor_entropy, dtype=float)
    if matrix.ndim != 2 or matrix.shape[0] < 2:
        raise ValueError(f"mutual_information must have shape (n_codes >= 2, n_factors); got {matrix.shape}.")
    if entropy.shape != (matrix.shape[1],):
        raise ValueError(f"factor_entropy must have shape ({matrix.shape[1]},); got {entropy.shape}.")
    ordered = np.sort(matrix, axis=0)
    scored = entropy > 0
    if not scored.any():
        return float("nan")
    gaps = (ordered[-1, scored] - ordered[-2, scored]) / entropy[scored]
    return float(np.mean(gaps))


def mig(codes, factors, *, n_bins=N_BINS):
    """Mutual information gap of ``codes`` (n_samples, n_codes >= 2) about ``factors``
    (n_samples, n_factors) of integer class labels.

    Returns a dict with ``"mig"`` (float in [0, 1]), ``"n_factors_scored"`` (float) and
    ``"mutual_information"`` (the (n_codes, n_factors) matrix in nats).
    """
    codes, factors = check_pair(codes, factors, min_codes=2)
    varying = varying_factors(factors)
    mutual_information = mutual_information_matrix(discretize(codes, n_bins), factors)
    entropy = np.array([mutual_info_score(factors[:, j], factors[:, j]) for j in range(factors.shape[1])])
    entropy[np.setdiff1d(np.arange(factors.shape[1]), varying)] = 0.0
    return {"mig": mig_from_mutual_information(mutual_information, entropy),
            "n_factors_scored": float(varying.size), "mutual_information": mutual_information}


def score_mig(sample) -> dict:
    """The registry's MIG: on the evaluation's training draws (``analysis.metrics.registry``)."""
    return {"mig": mig(sample.codes, sample.factors)["mig"]}
