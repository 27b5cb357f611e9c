"""Tests for analysis.metrics.sap: closed forms on the score matrix, then end to end."""

import itertools

import numpy as np
import pytest

from analysis.metrics.sap import sap, sap_from_score_matrix

R = np.diag(np.ones(5))


def grid(sizes=(2, 3, 4), repeat=4):
    return np.repeat(np.array(list(itertools.product(*map(range, sizes)))), repeat, axis=0)


@pytest.mark.parametrize(
    ("matrix", "expected"),
    [
        (R, 1.0),
        (np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]), 1.0),
        (np.zeros((10, 10)), 0.0),
        (np.vstack([R, R]), 0.0),
        (np.hstack([R, R]), 1.0),
        (np.array([[0.9, 0.2], [0.5, 0.6]]), (0.4 + 0.4) / 2),
    ],
    ids=["diagonal", "empty-code", "all-zero", "duplicated-codes", "duplicated-factors", "worked"],
)
def test_closed_forms(matrix, expected):
    assert sap_from_score_matrix(matrix) == pytest.approx(expected, abs=1e-12)


def test_one_code_is_not_enough():
    with pytest.raises(ValueError, match=r"n_codes >= 2"):
        sap(np.zeros((20, 1)), np.zeros((20, 1), int))


def test_continuous_identity_permuted_duplicated_and_empty_codes():
    factors = grid()
    codes = factors + 0.0
    assert sap(codes, factors, continuous=True)["sap"] == pytest.approx(1.0)
    assert sap(codes[:, [1, 2, 0]], factors, continuous=True)["sap"] == pytest.approx(1.0)
    assert sap(np.hstack([codes, codes]), factors, continuous=True)["sap"] == pytest.approx(0.0, abs=1e-12)
    empty = np.hstack([codes, np.zeros((len(codes), 1))])
    assert sap(empty, factors, continuous=True)["sap"] == pytest.approx(1.0)
    assert sap(codes, np.hstack([factors, factors]), continuous=True)["sap"] == pytest.approx(1.0)


def test_discrete_scores_binary_factors_exactly_and_stays_in_range():
    factors = grid(sizes=(2, 2, 2), repeat=10)
    codes = factors + 0.01 * np.random.default_rng(0).standard_normal(factors.shape)
    result = sap(codes, factors)
    # each binary factor is read perfectly from its own code and at chance from the others
    assert result["sap"] == pytest.approx(0.5, abs=0.15)
    assert result["score_matrix"].shape == (3, 3)
    np.testing.assert_allclose(np.diag(result["score_matrix"]), 1.0)
    duplicated = sap(np.hstack([codes, codes]), factors)["sap"]
    assert duplicated == pytest.approx(0.0, abs=0.05)
    multi = grid(sizes=(3, 4))
    value = sap(multi + 0.0, multi)["sap"]
    assert 0.0 <= value <= 1.0


def test_given_test_set_is_used():
    factors = grid(sizes=(2, 2), repeat=10)
    codes = factors + 0.0
    result = sap(codes, factors, codes_test=codes[::-1], factors_test=factors[::-1])
    np.testing.assert_allclose(np.diag(result["score_matrix"]), 1.0)
