"""The BetaVAE score (Higgins et al., 2017), as disentanglement_lib computes it.

One training point: pick a factor ``k`` at random, draw ``batch_size`` pairs of samples that share
the value of factor ``k`` and differ at random in the others, and average ``|z_1 − z_2|`` over the
pairs. A logistic regression (scikit-learn's defaults) learns to tell ``k`` from that vector. The
score is its accuracy on ``n_train`` training points and on ``n_eval`` fresh points.

The pairs are drawn from the given samples, so the samples must form a full factorial grid (see
``analysis.metrics._grid``); otherwise the score is NaN and ``"reason"`` says why. Only factors
that take more than one value are picked as ``k``.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from analysis.metrics._checks import check_pair, varying_factors
from analysis.metrics._grid import factorial_grid

__all__ = ["beta_vae_score"]


def beta_vae_score(codes, factors, *, batch_size=64, n_train=10_000, n_eval=5_000, random_state=0):
    """BetaVAE score of ``codes`` (n_samples, n_codes) for ``factors`` (n_samples, n_factors).

    Returns ``"beta_vae_train"`` and ``"beta_vae_eval"`` (accuracies in [0, 1], NaN where the
    samples are not a full factorial grid) and ``"reason"`` (empty when the score is defined).
    """
    codes, factors = check_pair(codes, factors)
    varying_factors(factors)
    for name, value, least in (("batch_size", batch_size, 1), ("n_train", n_train, 2), ("n_eval", n_eval, 1)):
        if not (isinstance(value, (int, np.integer)) and value >= least):
            raise ValueError(f"{name} must be an integer >= {least}; got {value!r}.")
    grid = factorial_grid(factors)
    if isinstance(grid, str):
        return {"beta_vae_train": float("nan"), "beta_vae_eval": float("nan"), "reason": grid}
    rng = np.random.default_rng(random_state)
    x_train, y_train = _points(codes, grid, n_train, batch_size, rng)
    x_eval, y_eval = _points(codes, grid, n_eval, batch_size, rng)
    if np.unique(y_train).size < 2:
        # a single varying factor: every point has the same label, which is always right
        return {"beta_vae_train": 1.0, "beta_vae_eval": 1.0, "reason": ""}
    model = LogisticRegression(random_state=random_state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=ConvergenceWarning)
        model.fit(x_train, y_train)
    return {
        "beta_vae_train": float(np.mean(model.predict(x_train) == y_train)),
        "beta_vae_eval": float(np.mean(model.predict(x_eval) == y_eval)),
        "reason": "",
    }


def _points(codes, grid, n_points, batch_size, rng):
    fixed = rng.choice(grid.varying, size=n_points)
    first = grid.sample_classes(n_points * batch_size, rng)
    second = grid.sample_classes(n_points * batch_size, rng)
    column = np.repeat(fixed, batch_size)
    rows = np.arange(n_points * batch_size)
    second[rows, column] = first[rows, column]
    difference = np.abs(codes[grid.rows_of(first, rng)] - codes[grid.rows_of(second, rng)])
    return difference.reshape(n_points, batch_size, -1).mean(axis=1), fixed
