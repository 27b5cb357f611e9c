"""The FactorVAE score (Kim & Mnih, 2018), as disentanglement_lib computes it.

A code is active when the standard deviation of its values over ``n_variance`` random samples (its
global variance's square root) is at least ``prune_threshold`` (0.05, disentanglement_lib's
``prune_dims``). One vote: pick a factor ``k`` at random, draw ``batch_size`` samples that share
its value, and let the active code with the smallest within-batch variance relative to its global
variance vote for ``k``. The majority-vote classifier's accuracy is the score, on ``n_train`` votes
and on ``n_eval`` fresh ones (defaults: disentanglement_lib's study's batch 64, 10,000 / 5,000
votes, 10,000 samples for the variances); 0 with no active code, as in disentanglement_lib.

As for the BetaVAE score, :func:`sampled_factor_vae_score` samples the whole grid through
``represent(classes) -> codes``; :func:`factor_vae_score` takes arrays, which must form a full
factorial grid, else NaN with the reason in ``"reason"``.
"""

from __future__ import annotations

import numpy as np

from analysis.metrics._checks import check_pair, varying_factors
from analysis.metrics._grid import ArrayGrid, factorial_grid, sampler_of

__all__ = ["factor_vae_score", "majority_vote_accuracy", "sampled_factor_vae_score"]


def majority_vote_accuracy(votes):
    """Accuracy of the majority-vote classifier of a (n_codes, n_factors) vote-count matrix:
    the sum over codes of their largest count, over the total. NaN if there are no votes."""
    votes = np.asarray(votes, dtype=float)
    if votes.ndim != 2 or 0 in votes.shape:
        raise ValueError(f"votes must be a non-empty 2-D array of shape (n_codes, n_factors); "
                         f"got {votes.shape}.")
    total = votes.sum()
    return float(votes.max(axis=1).sum() / total) if total > 0 else float("nan")


def factor_vae_score(codes, factors, *, batch_size=64, n_train=10_000, n_eval=5_000, n_variance=10_000,
                     prune_threshold=0.05, random_state=0):
    """FactorVAE score of ``codes`` (n_samples, n_codes) for ``factors`` (n_samples, n_factors).

    Returns ``"factor_vae_train"``, ``"factor_vae_eval"`` (NaN where the samples are not a full
    factorial grid), ``"n_active_codes"`` and ``"reason"`` (empty when the score is defined).
    """
    codes, factors = check_pair(codes, factors)
    varying_factors(factors)
    _check_budget(batch_size, n_train, n_eval, n_variance)
    grid = factorial_grid(factors)
    nan = float("nan")
    if isinstance(grid, str):
        return {"factor_vae_train": nan, "factor_vae_eval": nan, "n_active_codes": nan, "reason": grid}
    rng = np.random.default_rng(random_state)
    return _score(ArrayGrid(codes, grid), batch_size, n_train, n_eval, n_variance, prune_threshold, rng)


def sampled_factor_vae_score(represent, factor_sizes=None, *, batch_size=64, n_train=10_000, n_eval=5_000,
                             n_variance=10_000, prune_threshold=0.05, random_state=0):
    """FactorVAE score of a representation over the full grid of ``factor_sizes``: ``represent`` is
    a function or a ``GridPool``, as for :func:`~analysis.metrics.beta_vae_score.sampled_beta_vae_score`
    (``n_variance + batch_size * (n_train + n_eval)`` points in all). Returns the same dict as
    :func:`factor_vae_score`, with an empty ``"reason"``."""
    sampler = sampler_of(represent, factor_sizes)
    _check_budget(batch_size, n_train, n_eval, n_variance)
    rng = np.random.default_rng(random_state)
    return _score(sampler, batch_size, n_train, n_eval, n_variance, prune_threshold, rng)


def _check_budget(batch_size, n_train, n_eval, n_variance):
    for name, value, least in (("batch_size", batch_size, 2), ("n_train", n_train, 1), ("n_eval", n_eval, 1),
                               ("n_variance", n_variance, 2)):
        if not (isinstance(value, (int, np.integer)) and value >= least):
            raise ValueError(f"{name} must be an integer >= {least}; got {value!r}.")


def _score(grid, batch_size, n_train, n_eval, n_variance, prune_threshold, rng):
    sample = grid.sample(n_variance, rng)
    global_variance = sample.var(axis=0, ddof=1)
    active = np.flatnonzero(np.sqrt(global_variance) >= prune_threshold)
    if active.size == 0:
        return {"factor_vae_train": 0.0, "factor_vae_eval": 0.0, "n_active_codes": 0.0, "reason": ""}
    train_votes = _votes(grid, active, global_variance, n_train, batch_size, rng)
    eval_votes = _votes(grid, active, global_variance, n_eval, batch_size, rng)
    classifier = train_votes.argmax(axis=1)  # the factor each code votes for most
    rows = np.arange(global_variance.size)
    return {"factor_vae_train": majority_vote_accuracy(train_votes),
            "factor_vae_eval": float(eval_votes[rows, classifier].sum() / eval_votes.sum()),
            "n_active_codes": float(active.size), "reason": ""}


def _votes(sampler, active, global_variance, n_votes, batch_size, rng):
    """Vote counts (n_codes, n_factors) of ``n_votes`` batches that each fix one factor."""
    votes = np.zeros((global_variance.size, sampler.sizes.size))
    fixed = rng.choice(sampler.varying, size=n_votes)
    batch = sampler.batches(fixed, batch_size, rng)
    ratio = batch[:, :, active].var(axis=1, ddof=1) / global_variance[active]
    np.add.at(votes, (active[ratio.argmin(axis=1)], fixed), 1)
    return votes


def score_factor_vae(sample) -> dict:
    """The registry's FactorVAE score: eval accuracy on the evaluation's score pool, with its record."""
    source, factor_sizes, record = sample.score_pool
    if source is None:
        return {**record, "factor_vae_score": float("nan")}
    return {**record, "factor_vae_score": sampled_factor_vae_score(
        source, factor_sizes, batch_size=record["score_batch_size"], n_train=record["score_n_train"],
        n_eval=record["score_n_eval"], n_variance=record["score_n_variance"],
        random_state=sample.seed)["factor_vae_eval"]}
