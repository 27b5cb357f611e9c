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


# --- the sampled path: a representation function over the full grid, or a pool of encoded points ---

from analysis.metrics import grid_pool, sampled_factor_vae_score  # noqa: E402

SIZES = (3, 4, 5)
SAMPLED = dict(n_train=300, n_eval=600, n_variance=1000, batch_size=64)


def encoder(columns=None, noise=1e-6, constant=False, seed=0):
    """The true grid classes (or some columns of them) plus tiny noise; a constant; or, with
    ``columns=[]``, unit noise independent of the classes."""
    rng = np.random.default_rng(seed)

    def represent(classes):
        if constant:
            return np.full((len(classes), 3), 7.0)
        if columns == []:
            return rng.standard_normal((len(classes), 10))
        codes = classes[:, columns] if columns is not None else classes
        return codes + noise * rng.standard_normal(codes.shape)

    return represent


@pytest.mark.parametrize(
    "columns", [None, [1, 2, 0], [0, 1, 2, 0, 1, 2]], ids=["true", "permuted", "duplicated"]
)
@pytest.mark.parametrize("pooled", [False, True], ids=["direct", "pool"])
def test_sampled_true_factor_classes_score_one(columns, pooled):
    represent = encoder(columns)
    source = grid_pool(represent, SIZES, 2000) if pooled else represent
    result = sampled_factor_vae_score(source, None if pooled else SIZES, **SAMPLED)
    assert result["factor_vae_train"] == pytest.approx(1.0)
    assert result["factor_vae_eval"] == pytest.approx(1.0)
    assert result["n_active_codes"] == float(len(columns or SIZES)) and result["reason"] == ""


@pytest.mark.parametrize("pooled", [False, True], ids=["direct", "pool"])
def test_sampled_score_with_one_of_three_factors_left_out_is_two_thirds(pooled):
    # codes 0 and 1 win the votes for factors 0 and 1; a batch that fixes factor 2 leaves both
    # codes varying, so its vote goes to code 0 or 1 and is counted wrong: accuracy 2/3
    represent = encoder([0, 1])
    source = grid_pool(represent, SIZES, 2000) if pooled else represent
    result = sampled_factor_vae_score(source, None if pooled else SIZES, **SAMPLED)
    # 600 eval votes: standard error 0.02
    assert result["factor_vae_eval"] == pytest.approx(2 / 3, abs=0.06)


def test_sampled_constant_encoder_has_no_active_code_and_noise_scores_chance():
    result = sampled_factor_vae_score(encoder(constant=True), SIZES, **SAMPLED)
    assert result["factor_vae_eval"] == 0.0 and result["n_active_codes"] == 0.0
    result = sampled_factor_vae_score(encoder(columns=[]), SIZES, **SAMPLED)
    assert result["factor_vae_eval"] == pytest.approx(1 / 3, abs=0.07)  # chance: 3 factors


def test_sampled_budget_counts_every_encoded_point_and_a_pool_encodes_once():
    calls = []

    def represent(classes):
        calls.append(len(classes))
        return classes + 0.0

    kwargs = dict(n_train=20, n_eval=10, n_variance=100, batch_size=16)
    sampled_factor_vae_score(represent, SIZES, **kwargs)
    assert sum(calls) == 100 + 16 * 30
    calls.clear()
    pool = grid_pool(represent, SIZES, 500, random_state=1)
    assert sum(calls) == 500 and pool.codes.shape == (500, 3)
    assert sampled_factor_vae_score(pool, **kwargs)["factor_vae_eval"] == pytest.approx(1.0)
    assert sum(calls) == 500
