"""Tests for analysis.metrics.transfer_score: the scenarios' masks, then readouts end to end."""

import itertools

import numpy as np
import pytest

from analysis.metrics.transfer_score import ood1_scenarios, readout_mae, transfer_score


def grid(sizes=(3, 4, 6), repeat=2):
    return np.repeat(np.array(list(itertools.product(*map(range, sizes)))), repeat, axis=0)


def test_ood1_scenarios_split_the_values_as_d21_does():
    values = np.array([0, 1, 2, 3, 4, 5, 6, 7])
    scenarios = ood1_scenarios(values)
    assert list(values[scenarios["ood1_a"][0]]) == [0] and list(values[scenarios["ood1_a"][1]]) == [
        1,
        2,
        3,
        4,
        5,
        6,
        7,
    ]
    assert list(values[scenarios["ood1_b"][0]]) == [4, 5, 6, 7] and list(values[scenarios["ood1_b"][1]]) == [
        0,
        1,
        2,
        3,
    ]
    assert list(values[scenarios["ood1_c"][0]]) == [0, 2, 4, 6] and list(values[scenarios["ood1_c"][1]]) == [
        1,
        3,
        5,
        7,
    ]
    for train, test in scenarios.values():
        assert not np.any(train & test)


def test_readout_mae_closed_form_for_a_constant_target():
    codes = np.zeros((10, 2))
    errors = readout_mae(codes, np.zeros((10, 1)), codes[:4], np.full((4, 1), 0.25))
    assert errors == pytest.approx([0.25])


def test_identity_codes_transfer_with_small_error_and_duplicates_do_too():
    factors = grid()
    codes = factors + 0.0
    result = transfer_score(codes, factors, ood_factor=2, regressors=("gbt",))
    assert set(result) == {
        "n_factors_scored",
        "transfer_gbt_ood1_a",
        "transfer_gbt_ood1_b",
        "transfer_gbt_ood1_c",
    }
    assert result["n_factors_scored"] == 2.0
    for key in ("transfer_gbt_ood1_a", "transfer_gbt_ood1_b", "transfer_gbt_ood1_c"):
        assert result[key] < 0.01
    doubled = transfer_score(np.hstack([codes, codes]), factors, ood_factor=2, regressors=("gbt",))
    assert doubled["transfer_gbt_ood1_b"] < 0.01


def test_random_codes_transfer_worse_and_scores_stay_in_range():
    factors = grid()
    codes = np.random.default_rng(0).standard_normal((len(factors), 3))
    result = transfer_score(codes, factors, ood_factor=2, regressors=("gbt",))
    assert 0.1 < result["transfer_gbt_ood1_c"] <= 1.0


def test_ood2_with_both_regressors():
    factors = grid(sizes=(3, 4, 4))
    codes = factors + 0.0
    held_out = factors[:, 1] == 3
    result = transfer_score(
        codes[~held_out],
        factors[~held_out],
        codes_ood2=codes[held_out],
        factors_ood2=factors[held_out],
        ood2_excluded=[1],
    )
    assert set(result) == {"n_factors_scored", "transfer_gbt_ood2", "transfer_mlp_ood2"}
    assert result["transfer_gbt_ood2"] < 0.01
    assert 0.0 <= result["transfer_mlp_ood2"] < 0.2


def test_bad_arguments():
    factors = grid()
    with pytest.raises(ValueError, match="Give ood_factor"):
        transfer_score(factors + 0.0, factors)
    with pytest.raises(ValueError, match=r"ood_factor must be a column index of factors \(0..2\)"):
        transfer_score(factors + 0.0, factors, ood_factor=3)
    with pytest.raises(ValueError, match="regressors must be"):
        transfer_score(factors + 0.0, factors, ood_factor=0, regressors=("forest",))
