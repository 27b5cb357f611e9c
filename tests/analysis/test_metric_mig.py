"""Tests for analysis.metrics.mig: closed forms on the mutual-information matrix, then end to end
on a full factorial grid, where the factors are exactly independent."""

import itertools

import numpy as np
import pytest

from analysis.metrics.mig import discretize, mig, mig_from_mutual_information

R = np.diag(5.0 * np.ones(5))


def grid(sizes=(2, 3, 4), repeat=3):
    return np.repeat(np.array(list(itertools.product(*map(range, sizes)))), repeat, axis=0)


@pytest.mark.parametrize(
    ("matrix", "entropy", "expected"),
    [
        (R, 5.0 * np.ones(5), 1.0),
        (np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]), np.ones(2), 1.0),
        (np.zeros((10, 10)), np.ones(10), 0.0),
        (np.vstack([R, R]), 5.0 * np.ones(5), 0.0),
        (np.hstack([R, R]), 5.0 * np.ones(10), 1.0),
        (R, 10.0 * np.ones(5), 0.5),
    ],
    ids=["diagonal", "empty-code", "all-zero", "duplicated-codes", "duplicated-factors", "half-captured"],
)
def test_closed_forms(matrix, entropy, expected):
    assert mig_from_mutual_information(matrix, entropy) == pytest.approx(expected, abs=1e-12)


def test_zero_entropy_factors_are_left_out():
    matrix = np.array([[1.0, 0.0], [0.0, 0.0]])
    assert mig_from_mutual_information(matrix, [1.0, 0.0]) == 1.0
    assert np.isnan(mig_from_mutual_information(matrix, [0.0, 0.0]))


def test_discretize_uses_equal_width_bins_over_each_codes_range():
    codes = np.array([[0.0, 5.0], [0.5, 5.0], [1.0, 5.0], [0.04, 5.0]])
    binned = discretize(codes, n_bins=20)
    np.testing.assert_array_equal(binned[:, 0], [0, 10, 19, 0])
    assert np.all(binned[:, 1] == binned[0, 1])  # a constant code falls in one bin


def test_identity_permuted_duplicated_and_empty_codes():
    factors = grid()
    codes = factors + 0.0
    assert mig(codes, factors)["mig"] == pytest.approx(1.0)
    assert mig(codes[:, [2, 0, 1]], factors)["mig"] == pytest.approx(1.0)
    assert mig(np.hstack([codes, codes]), factors)["mig"] == pytest.approx(0.0, abs=1e-12)
    assert mig(np.hstack([codes, np.zeros((len(codes), 1))]), factors)["mig"] == pytest.approx(1.0)
    # duplicated factors: each code captures two factors, and MIG does not mind
    assert mig(codes, np.hstack([factors, factors]))["mig"] == pytest.approx(1.0)
    result = mig(codes, factors)
    assert result["mutual_information"].shape == (3, 3)
    assert isinstance(result["mig"], float)


def test_random_codes_score_low_and_results_stay_in_range():
    factors = grid(repeat=20)
    codes = np.random.default_rng(0).standard_normal((len(factors), 4))
    value = mig(codes, factors)["mig"]
    assert 0.0 <= value < 0.15
    mixed = codes[:, :3] + factors
    assert 0.0 <= mig(mixed, factors)["mig"] <= 1.0


def test_constant_factor_is_left_out():
    factors = np.hstack([grid(), np.full((len(grid()), 1), 7)])
    result = mig(grid() + 0.0, factors)
    assert result["mig"] == pytest.approx(1.0)
    assert result["n_factors_scored"] == 3.0
