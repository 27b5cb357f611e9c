"""Tests for analysis.metrics.dci: closed forms on importance matrices, then small end-to-end runs."""

import math

import numpy as np
import pytest

from analysis.metrics.dci import ESTIMATORS, completeness, dci, disentanglement

ONE_MINUS_LN2_OVER_LN10 = 1.0 - math.log(2) / math.log(10)
R = np.diag(5.0 * np.ones(5))
# The end-to-end tests fit serially, to stay quick on two busy cores; parallel fitting has its
# own test below.
SERIAL = 1


# --------------------------------------------------------------------------------------------
# Closed forms on the importance matrix (SPEC section 5)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("matrix", "expected_d", "expected_c"),
    [
        (R, 1.0, 1.0),
        (np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]), 1.0, 1.0),
        (np.zeros((10, 10)), 0.0, 0.0),
        (np.vstack([R, R]), 1.0, ONE_MINUS_LN2_OVER_LN10),
        (np.hstack([R, R]), ONE_MINUS_LN2_OVER_LN10, 1.0),
    ],
    ids=["diagonal", "unused-code", "all-zero", "vstack", "hstack"],
)
def test_closed_forms(matrix, expected_d, expected_c):
    assert disentanglement(matrix) == pytest.approx(expected_d, abs=1e-8)
    assert completeness(matrix) == pytest.approx(expected_c, abs=1e-8)


def test_all_zero_is_exactly_zero():
    assert disentanglement(np.zeros((3, 4))) == 0.0
    assert completeness(np.zeros((3, 4))) == 0.0


def test_uniform_matrix_scores_zero():
    assert disentanglement(np.ones((4, 6))) == pytest.approx(0.0, abs=1e-12)
    assert completeness(np.ones((4, 6))) == pytest.approx(0.0, abs=1e-12)


def test_scores_ignore_order_and_scale():
    rng = np.random.default_rng(0)
    matrix = rng.random((6, 4))
    shuffled = 3.0 * matrix[rng.permutation(6)][:, rng.permutation(4)]
    assert disentanglement(shuffled) == pytest.approx(disentanglement(matrix), rel=1e-9)
    assert completeness(shuffled) == pytest.approx(completeness(matrix), rel=1e-9)


@pytest.mark.parametrize("score", [disentanglement, completeness])
@pytest.mark.parametrize(
    ("matrix", "message"),
    [
        (np.ones(3), "importance_matrix must be a non-empty 2-D array"),
        (np.array([[1.0, -1.0]]), "non-negative"),
        (np.array([[1.0, np.nan]]), "NaN"),
    ],
)
def test_importance_matrix_errors(score, matrix, message):
    with pytest.raises(ValueError, match=message):
        score(matrix)


# --------------------------------------------------------------------------------------------
# End to end on small data
# --------------------------------------------------------------------------------------------


def _factors(n_samples=180, sizes=(2, 3, 4), seed=0):
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, size, n_samples) for size in sizes], axis=1)


def _identity_codes(factors, seed=1, noise=0.01):
    rng = np.random.default_rng(seed)
    return factors + noise * rng.standard_normal(factors.shape)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_identity_codes_score_near_one(estimator):
    factors = _factors()
    result = dci(_identity_codes(factors), factors, estimator=estimator, n_jobs=SERIAL)
    assert result["disentanglement"] > 0.95
    assert result["completeness"] > 0.95
    assert result["informativeness_test"] > 0.95
    assert result["importance_matrix"].shape == (3, 3)
    assert set(result) >= {
        "disentanglement",
        "completeness",
        "informativeness_train",
        "informativeness_test",
        "importance_matrix",
    }
    for key in ("disentanglement", "completeness", "informativeness_train", "informativeness_test"):
        assert isinstance(result[key], float)


@pytest.mark.parametrize("estimator", ["gbt", "lasso_m21"])
def test_permuted_codes_give_the_same_disentanglement(estimator):
    factors = _factors()
    codes = _identity_codes(factors)
    permutation = [2, 0, 1]
    plain = dci(codes, factors, estimator=estimator, n_jobs=SERIAL)
    permuted = dci(codes[:, permutation], factors, estimator=estimator, n_jobs=SERIAL)
    # The estimators visit the codes in a seeded random order, which a permutation changes,
    # so the fits agree closely but not to the last digit.
    assert permuted["disentanglement"] == pytest.approx(plain["disentanglement"], abs=1e-3)
    assert permuted["completeness"] == pytest.approx(plain["completeness"], abs=1e-3)
    np.testing.assert_allclose(
        permuted["importance_matrix"], plain["importance_matrix"][permutation], rtol=0.02, atol=1e-3
    )


@pytest.mark.parametrize("estimator", ["gbt", "lasso_m21"])
def test_duplicated_codes_lower_completeness(estimator):
    factors = _factors()
    codes = _identity_codes(factors)
    duplicated = np.hstack([codes, _identity_codes(factors, seed=2)])
    plain = dci(codes, factors, estimator=estimator, n_jobs=SERIAL)
    doubled = dci(duplicated, factors, estimator=estimator, n_jobs=SERIAL)
    assert doubled["importance_matrix"].shape == (6, 3)
    assert doubled["completeness"] < plain["completeness"] - 0.05
    assert doubled["disentanglement"] > 0.95  # each code still serves one factor


@pytest.mark.parametrize(("estimator", "bound"), [("gbt", 0.1), ("lasso_m21", 0.5)])
def test_random_codes_give_low_disentanglement(estimator, bound):
    factors = _factors()
    codes = np.random.default_rng(3).standard_normal((factors.shape[0], 5))
    result = dci(codes, factors, estimator=estimator, n_jobs=SERIAL)
    assert result["disentanglement"] < bound


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_parallel_equals_serial(estimator):
    factors = _factors(n_samples=150, sizes=(2, 3, 4))
    codes = np.random.default_rng(4).standard_normal((150, 4)) + factors[:, [0, 1, 2, 0]]
    serial = dci(codes, factors, estimator=estimator, n_jobs=1, random_state=7)
    parallel = dci(codes, factors, estimator=estimator, n_jobs=2, random_state=7)
    np.testing.assert_array_equal(parallel["importance_matrix"], serial["importance_matrix"])
    for key in ("disentanglement", "completeness", "informativeness_train", "informativeness_test"):
        assert parallel[key] == serial[key]


def test_lasso_m22_pads_and_reorders():
    factors = _factors(sizes=(3, 4))
    clean = _identity_codes(factors)
    noise = np.random.default_rng(5).standard_normal((factors.shape[0], 2))
    codes = np.hstack([noise[:, :1], clean[:, 1:], noise[:, 1:], clean[:, :1]])  # 4 codes
    result = dci(codes, factors, estimator="lasso_m22", n_jobs=SERIAL)
    assert result["importance_matrix"].shape == (4, 2)
    assert result["importance_matrix_padded"].shape == (4, 4)
    # code 3 predicts factor 0 and code 1 predicts factor 1, so they come first
    np.testing.assert_array_equal(result["code_order"][:2], [3, 1])
    assert disentanglement(result["importance_matrix_padded"]) == result["disentanglement"]
    assert completeness(result["importance_matrix_padded"]) == result["completeness"]


def test_lasso_constant_factor_gets_a_zero_column():
    factors = _factors(sizes=(3, 4))
    factors = np.hstack([factors, np.full((factors.shape[0], 1), 2)])
    result = dci(_identity_codes(factors[:, :2]), factors, estimator="lasso_m21", n_jobs=SERIAL)
    np.testing.assert_array_equal(result["importance_matrix"][:, 2], 0.0)
    assert result["disentanglement"] > 0.95
    assert result["informativeness_test"] > 0.95  # the constant factor is left out


def test_given_test_set_is_used():
    factors = _factors()
    codes = _identity_codes(factors)
    result = dci(
        codes[:160],
        factors[:160],
        codes_test=codes[160:],
        factors_test=factors[160:],
        estimator="lasso_m21",
    )
    assert result["informativeness_test"] > 0.95


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------


def _bad_input_cases():
    factors = _factors(n_samples=20)
    codes = _identity_codes(factors)
    nan_codes = codes.copy()
    nan_codes[3, 1] = np.nan
    return [
        ((codes[:19], factors), {}, r"codes and factors must have the same number of samples"),
        ((codes[:, 0], factors), {}, r"codes must be a 2-D array of shape \(n_samples, n_codes\)"),
        ((codes, factors[:, 0]), {}, r"factors must be a 2-D array of shape \(n_samples, n_factors\)"),
        ((nan_codes, factors), {}, r"codes contains NaN"),
        ((codes[:1], factors[:1]), {}, r"codes must have at least 2 samples"),
        ((codes, factors), {"estimator": "svm"}, r"estimator must be one of 'gbt', 'hist_gbt'"),
        ((codes, factors + 0.5), {}, r"factors must hold integer class labels"),
        ((codes, factors), {"codes_test": codes}, r"Give both codes_test and factors_test"),
        (
            (codes, factors),
            {"codes_test": codes[:, :2], "factors_test": factors},
            r"codes_test must have shape \(n_test, 3\)",
        ),
        ((codes, factors), {"test_fraction": 1.5}, r"test_fraction must be a number in \(0, 1\)"),
        ((codes[:6], factors[:6]), {"estimator": "lasso_m21"}, r"at least 5 training samples"),
    ]


@pytest.mark.parametrize(("args", "kwargs", "message"), _bad_input_cases())
def test_bad_input(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        dci(*args, **kwargs)


def test_informativeness_is_the_mean_over_the_scored_factors():
    """A constant factor is left out of the mean (NaN accuracy); the others count, each once."""
    rng = np.random.default_rng(0)
    factors = np.stack([rng.integers(0, 3, 300), rng.integers(0, 4, 300), np.zeros(300, int)], axis=1)
    codes = np.column_stack([factors[:, 0] + rng.normal(0, 0.3, 300), rng.normal(size=300)])
    result = dci(codes, factors, estimator="hist_gbt", n_jobs=1)
    accuracy = result["accuracy_test"]
    assert np.isnan(accuracy[2]) and accuracy[0] > accuracy[1] + 0.2
    assert result["informativeness_test"] == pytest.approx(np.mean(accuracy[:2]))
