"""Tests for analysis.metrics.modularity_explicitness: SPEC's closed forms, then end to end."""

import itertools

import numpy as np
import pytest

from analysis.metrics.modularity_explicitness import modularity, modularity_explicitness

R = np.diag(5.0 * np.ones(5))


def grid(sizes=(2, 3, 4), repeat=4):
    return np.repeat(np.array(list(itertools.product(*map(range, sizes)))), repeat, axis=0)


@pytest.mark.parametrize(
    ("matrix", "expected"),
    [
        (R, 1.0),
        (np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]), 2.0 / 3.0),
        (np.zeros((10, 10)), 0.0),
        (np.vstack([R, R]), 1.0),
        (R[:2], 1.0),
        (np.hstack([R, R]), 1.0 - 1.0 / 9.0),
    ],
    ids=["diagonal", "empty-code", "all-zero", "duplicated-codes", "fewer-codes", "duplicated-factors"],
)
def test_closed_forms(matrix, expected):
    assert modularity(matrix) == pytest.approx(expected, abs=1e-12)


def test_uniform_code_scores_zero():
    assert modularity(np.ones((1, 4))) == pytest.approx(0.0)


def test_identity_permuted_duplicated_and_empty_codes():
    factors = grid()
    codes = factors + 0.0
    plain = modularity_explicitness(codes, factors)
    assert plain["modularity"] == pytest.approx(1.0)
    assert plain["explicitness_train"] > 0.95 and plain["explicitness_test"] > 0.95
    assert modularity_explicitness(codes[:, [2, 1, 0]], factors)["modularity"] == pytest.approx(1.0)
    assert modularity_explicitness(np.hstack([codes, codes]), factors)["modularity"] == pytest.approx(1.0)
    empty = np.hstack([codes, np.zeros((len(codes), 1))])
    assert modularity_explicitness(empty, factors)["modularity"] == pytest.approx(3.0 / 4.0)
    # duplicated factors: every code informs two of the six factors equally → 1 − 1/5
    doubled = modularity_explicitness(codes, np.hstack([factors, factors]))
    assert doubled["modularity"] == pytest.approx(0.8)


def test_random_codes_score_near_chance():
    factors = grid(repeat=20)
    codes = np.random.default_rng(0).standard_normal((len(factors), 3))
    result = modularity_explicitness(codes, factors)
    assert 0.0 <= result["modularity"] <= 1.0
    assert 0.3 < result["explicitness_test"] < 0.7
    for key in ("modularity", "explicitness_train", "explicitness_test"):
        assert isinstance(result[key], float)
