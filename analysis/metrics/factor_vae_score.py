"""The FactorVAE score (Kim & Mnih, 2018), as disentanglement_lib computes it.

The variance of each code over ``n_variance`` random samples is its global variance; codes with a
global variance below ``prune_threshold`` (0.05) are inactive and ignored. One vote: pick a factor
``k`` at random, draw ``batch_size`` samples that share the value of factor ``k``, divide each
active code's variance within the batch by its global variance, and let the code with the smallest
ratio vote for ``k``. The majority-vote classifier maps each code to the factor it voted for most;
its accuracy over the votes is the score, computed on ``n_train`` votes and on ``n_eval`` fresh ones.

As for the BetaVAE score, the samples must form a full factorial grid; otherwise the score is NaN
and ``"reason"`` says why. With no active code the score is 0 (as in disentanglement_lib).
"""

from __future__ import annotations

import numpy as np

from analysis.metrics._checks import check_pair, varying_factors
from analysis.metrics._grid import factorial_grid

__all__ = ["factor_vae_score", "majority_vote_accuracy"]


def majority_vote_accuracy(votes):
    """Accuracy of the majority-vote classifier of a (n_codes, n_factors) vote-count matrix:
    the sum over codes of their largest count, over the total. NaN if there are no votes."""
    votes = np.asarray(votes, dtype=float)
    if votes.ndim != 2 or 0 in votes.shape:
        raise ValueError(
            f"votes must be a non-empty 2-D array of shape (n_codes, n_factors); got {votes.shape}."
        )
    total = votes.sum()
    return float(votes.max(axis=1).sum() / total) if total > 0 else float("nan")


def factor_vae_score(
    codes,
    factors,
    *,
    batch_size=64,
    n_train=10_000,
    n_eval=5_000,
    n_variance=10_000,
    prune_threshold=0.05,
    random_state=0,
):
    """FactorVAE score of ``codes`` (n_samples, n_codes) for ``factors`` (n_samples, n_factors).

    Returns ``"factor_vae_train"``, ``"factor_vae_eval"`` (NaN where the samples are not a full
    factorial grid), ``"n_active_codes"`` and ``"reason"`` (empty when the score is defined).
    """
    codes, factors = check_pair(codes, factors)
    varying_factors(factors)
    for name, value, least in (
        ("batch_size", batch_size, 2),
        ("n_train", n_train, 1),
        ("n_eval", n_eval, 1),
        ("n_variance", n_variance, 2),
    ):
        if not (isinstance(value, (int, np.integer)) and value >= least):
            raise ValueError(f"{name} must be an integer >= {least}; got {value!r}.")
    grid = factorial_grid(factors)
    nan = float("nan")
    if isinstance(grid, str):
        return {"factor_vae_train": nan, "factor_vae_eval": nan, "n_active_codes": nan, "reason": grid}
    rng = np.random.default_rng(random_state)
    sample = codes[grid.rows_of(grid.sample_classes(n_variance, rng), rng)]
    global_variance = sample.var(axis=0, ddof=1)
    active = np.flatnonzero(global_variance >= prune_threshold)
    if active.size == 0:
        return {"factor_vae_train": 0.0, "factor_vae_eval": 0.0, "n_active_codes": 0.0, "reason": ""}
    train_votes = _votes(codes, grid, active, global_variance, n_train, batch_size, rng)
    eval_votes = _votes(codes, grid, active, global_variance, n_eval, batch_size, rng)
    classifier = train_votes.argmax(axis=1)  # the factor each code votes for most
    rows = np.arange(codes.shape[1])
    return {
        "factor_vae_train": majority_vote_accuracy(train_votes),
        "factor_vae_eval": float(eval_votes[rows, classifier].sum() / eval_votes.sum()),
        "n_active_codes": float(active.size),
        "reason": "",
    }


def _votes(codes, grid, active, global_variance, n_votes, batch_size, rng):
    votes = np.zeros((codes.shape[1], grid.sizes.size))
    fixed = rng.choice(grid.varying, size=n_votes)
    classes = grid.sample_classes(n_votes * batch_size, rng).reshape(n_votes, batch_size, -1)
    classes[np.arange(n_votes), :, fixed] = classes[np.arange(n_votes), 0, fixed][:, None]
    batch = codes[grid.rows_of(classes.reshape(n_votes * batch_size, -1), rng)].reshape(
        n_votes, batch_size, -1
    )
    ratio = batch[:, :, active].var(axis=1, ddof=1) / global_variance[active]
    np.add.at(votes, (active[ratio.argmin(axis=1)], fixed), 1)
    return votes
