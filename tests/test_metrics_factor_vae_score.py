"""Tests for analysis.metrics.factor_vae_score: closed forms on vote matrices, then end to end."""

import itertools

import numpy as np
import pytest

from analysis.metrics.factor_vae_score import factor_vae_score, majority_vote_accuracy

R = np.diag(5.0 * np.ones(5))
SMALL = dict(n_train=200, n_eval=100, n_variance=500, batch_size=16)


def grid(sizes=(2, 3, 4), repeat=2):
    return np.repeat(np.array(list(itertools.product(*map(range, sizes)))), repeat, axis=0)


@pytest.mark.parametrize(
    ("votes", "expected"),
    [
        (R, 1.0),
        (np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]), 1.0),
        (np.vstack([R, R]), 1.0),
        (np.hstack([R, R]), 0.5),
        (np.array([[3.0, 1.0], [0.0, 4.0]]), 7.0 / 8.0),
    ],
    ids=["diagonal", "empty-code", "duplicated-codes", "duplicated-factors", "worked"],
)
def test_closed_forms(votes, expected):
    assert majority_vote_accuracy(votes) == pytest.approx(expected)


def test_no_votes_is_nan():
    assert np.isnan(majority_vote_accuracy(np.zeros((10, 10))))


def test_identity_permuted_duplicated_and_empty_codes_score_one():
    factors = grid()
    codes = factors + 0.0
    for variant in (
        codes,
        codes[:, [1, 2, 0]],
        np.hstack([codes, codes]),
        np.hstack([codes, np.zeros((len(codes), 1))]),
    ):
        result = factor_vae_score(variant, factors, **SMALL)
        assert result["factor_vae_train"] == pytest.approx(1.0)
        assert result["factor_vae_eval"] == pytest.approx(1.0)
    assert (
        factor_vae_score(np.hstack([codes, np.zeros((len(codes), 1))]), factors, **SMALL)["n_active_codes"]
        == 3.0
    )


def test_all_zero_codes_have_no_active_code_and_score_zero():
    factors = grid()
    result = factor_vae_score(np.zeros((len(factors), 4)), factors, **SMALL)
    assert result["factor_vae_eval"] == 0.0 and result["n_active_codes"] == 0.0


def test_not_a_factorial_grid_is_nan_with_a_reason():
    factors = grid()
    result = factor_vae_score(factors + 0.0, np.hstack([factors, factors]), **SMALL)
    assert np.isnan(result["factor_vae_eval"]) and "not a full factorial grid" in result["reason"]
    three = np.array([[0, 0], [1, 1], [0, 1]])
    result = factor_vae_score(three + 0.0, three, **SMALL)
    assert "cannot cover" in result["reason"]


def test_random_codes_stay_in_range():
    factors = grid()
    codes = np.random.default_rng(0).standard_normal((len(factors), 3))
    result = factor_vae_score(codes, factors, **SMALL)
    assert 0.0 <= result["factor_vae_eval"] <= 1.0
