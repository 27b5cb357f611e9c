"""The BetaVAE score (Higgins et al., 2017), as disentanglement_lib computes it.

One training point: pick a factor ``k`` (one that takes more than one value) at random, draw
``batch_size`` pairs of grid points that share the value of factor ``k``, and average
``|z_1 − z_2|`` over the pairs. A logistic regression (scikit-learn's defaults) learns to tell
``k`` from that vector; the score is its accuracy on ``n_train`` training points and on ``n_eval``
fresh points (defaults: disentanglement_lib's study's batch 64, 10,000 / 5,000 points).

:func:`sampled_beta_vae_score` draws the pairs anywhere on the full grid through a representation
function ``represent(classes) -> codes``, as disentanglement_lib does; :func:`beta_vae_score`
draws them from arrays of codes and factors, which must form a full factorial grid (see
``analysis.metrics._grid``), else the score is NaN and ``"reason"`` says why.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from analysis.metrics._checks import check_pair, varying_factors
from analysis.metrics._grid import ArrayGrid, factorial_grid, sampler_of

__all__ = ["beta_vae_score", "sampled_beta_vae_score"]


def beta_vae_score(codes, factors, *, batch_size=64, n_train=10_000, n_eval=5_000, random_state=0):
    """BetaVAE score of ``codes`` (n_samples, n_codes) for ``factors`` (n_samples, n_factors).

    Returns ``"beta_vae_train"`` and ``"beta_vae_eval"`` (accuracies in [0, 1], NaN where the
    samples are not a full factorial grid) and ``"reason"`` (empty when the score is defined).
    """
    codes, factors = check_pair(codes, factors)
    varying_factors(factors)
    _check_budget(batch_size, n_train, n_eval)
    grid = factorial_grid(factors)
    if isinstance(grid, str):
        return {"beta_vae_train": float("nan"), "beta_vae_eval": float("nan"), "reason": grid}
    rng = np.random.default_rng(random_state)
    return _score(ArrayGrid(codes, grid), batch_size, n_train, n_eval, rng, random_state)


def sampled_beta_vae_score(represent, factor_sizes=None, *, batch_size=64, n_train=10_000, n_eval=5_000,
                           random_state=0):
    """BetaVAE score of a representation over the full grid of ``factor_sizes`` (class counts, or a
    FactorSpace). ``represent`` maps integer classes (M, n_factors) to codes (M, n_codes), called
    on at most 8,192 points at a time and ``2 * batch_size * (n_train + n_eval)`` points in all
    (disentanglement_lib's sampling); or it is a :class:`~analysis.metrics._grid.GridPool` encoded
    beforehand (``grid_pool``; ``factor_sizes`` may be left out), from which the pairs are drawn.
    Returns the same dict as :func:`beta_vae_score`, with an empty ``"reason"``."""
    sampler = sampler_of(represent, factor_sizes)
    _check_budget(batch_size, n_train, n_eval)
    rng = np.random.default_rng(random_state)
    return _score(sampler, batch_size, n_train, n_eval, rng, random_state)


def _check_budget(batch_size, n_train, n_eval):
    for name, value, least in (("batch_size", batch_size, 1), ("n_train", n_train, 2), ("n_eval", n_eval, 1)):
        if not (isinstance(value, (int, np.integer)) and value >= least):
            raise ValueError(f"{name} must be an integer >= {least}; got {value!r}.")


def _score(grid, batch_size, n_train, n_eval, rng, random_state):
    x_train, y_train = _points(grid, n_train, batch_size, rng)
    x_eval, y_eval = _points(grid, n_eval, batch_size, rng)
    if np.unique(y_train).size < 2:
        # a single varying factor: every point has the same label, which is always right
        return {"beta_vae_train": 1.0, "beta_vae_eval": 1.0, "reason": ""}
    model = LogisticRegression(random_state=random_state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=ConvergenceWarning)
        model.fit(x_train, y_train)
    return {"beta_vae_train": float(np.mean(model.predict(x_train) == y_train)),
            "beta_vae_eval": float(np.mean(model.predict(x_eval) == y_eval)), "reason": ""}


def _points(sampler, n_points, batch_size, rng):
    """``n_points`` feature vectors (mean |z_1 − z_2| over a batch of pairs) and their factors."""
    fixed = rng.choice(sampler.varying, size=n_points)
    first, second = sampler.pairs(np.repeat(fixed, batch_size), rng)
    return np.abs(first - second).reshape(n_points, batch_size, -1).mean(axis=1), fixed


def score_beta_vae(sample) -> dict:
    """The registry's BetaVAE score: eval accuracy on the evaluation's score pool
    (``analysis.evaluation``, "BetaVAE and FactorVAE scores"), with the pool's record."""
    source, factor_sizes, record = sample.score_pool
    if source is None:
        return {**record, "beta_vae_score": float("nan")}
    return {**record, "beta_vae_score": sampled_beta_vae_score(
        source, factor_sizes, batch_size=record["score_batch_size"], n_train=record["score_n_train"],
        n_eval=record["score_n_eval"], random_state=sample.seed)["beta_vae_eval"]}
