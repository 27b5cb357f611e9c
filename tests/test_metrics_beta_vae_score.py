"""Tests for analysis.metrics.beta_vae_score on full factorial grids and on other sample sets."""

import itertools

import numpy as np
import pytest

from analysis.metrics.beta_vae_score import beta_vae_score

SMALL = dict(n_train=300, n_eval=200, batch_size=16)


def grid(sizes=(2, 3, 4), repeat=2):
    return np.repeat(np.array(list(itertools.product(*map(range, sizes)))), repeat, axis=0)


def test_identity_permuted_duplicated_and_empty_codes_score_one():
    factors = grid()
    codes = factors + 0.0
    for variant in (
        codes,
        codes[:, [2, 0, 1]],
        np.hstack([codes, codes]),
        np.hstack([codes, np.zeros((len(codes), 1))]),
    ):
        result = beta_vae_score(variant, factors, **SMALL)
        assert result["beta_vae_train"] == pytest.approx(1.0)
        assert result["beta_vae_eval"] == pytest.approx(1.0)
        assert result["reason"] == ""


def test_all_zero_codes_score_near_chance():
    factors = grid()
    result = beta_vae_score(np.zeros((len(factors), 2)), factors, **SMALL)
    assert result["beta_vae_eval"] < 0.5


def test_duplicated_factors_are_not_a_factorial_grid():
    factors = grid()
    result = beta_vae_score(factors + 0.0, np.hstack([factors, factors]), **SMALL)
    assert np.isnan(result["beta_vae_train"]) and np.isnan(result["beta_vae_eval"])
    assert "not a full factorial grid" in result["reason"]


def test_a_held_out_split_is_not_a_factorial_grid():
    factors = grid()
    keep = ~((factors[:, 0] == 1) & (factors[:, 2] == 3))
    result = beta_vae_score(factors[keep] + 0.0, factors[keep], **SMALL)
    assert np.isnan(result["beta_vae_eval"])
    assert "of the 24 combinations" in result["reason"]


def test_random_codes_stay_in_range():
    factors = grid()
    codes = np.random.default_rng(0).standard_normal((len(factors), 3))
    result = beta_vae_score(codes, factors, **SMALL)
    assert 0.0 <= result["beta_vae_eval"] <= 1.0


def test_bad_budget():
    with pytest.raises(ValueError, match="n_train must be an integer >= 2"):
        beta_vae_score(grid() + 0.0, grid(), n_train=1)
