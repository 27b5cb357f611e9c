"""Tests for analysis.aggregate: derived columns and the grouped correlation table."""

import numpy as np
import pandas as pd
import pytest

from analysis.aggregate import add_derived_columns, correlation_table, correlations
from analysis.loading import load_trials
from analysis.storage import write_results


def frame():
    rng = np.random.default_rng(0)
    n = 12
    d = np.linspace(0, 1, n)
    return pd.DataFrame(
        {
            "objective": ["beta_vae"] * 6 + ["ada_gvae"] * 6,
            "condition": ["extrapolation", "recombination_to_element"] * 6,
            "architecture": ["burgess"] * n,
            "d_score": d,
            "mig": d[::-1],
            "train_nll": 50 + rng.random(n),
            "test_nll": 100 - 10 * d,
            "transfer_gbt_ood2": 0.5 - 0.3 * d,
            "sap": np.nan,
        }
    )


def test_derived_columns():
    df = add_derived_columns(frame())
    np.testing.assert_allclose(df["nll_gap"], df["test_nll"] - df["train_nll"])
    assert list(df["supervision"].unique()) == ["none", "weak"]


def test_correlation_table_groups_and_closed_forms():
    table = correlation_table(frame(), n_bootstrap=50)
    assert set(table["group_by"]) == {"all", "supervision", "condition"}  # one architecture: no block
    assert set(table["x"]) == {"d_score", "mig"}  # sap has no values
    assert set(table["y"]) == {"test_nll", "train_nll", "nll_gap", "transfer_gbt_ood2"}
    every = table[table["group_by"] == "all"].set_index(["x", "y"])
    assert every.loc[("d_score", "test_nll"), "rho"] == pytest.approx(-1.0)
    assert every.loc[("mig", "transfer_gbt_ood2"), "rho"] == pytest.approx(1.0)
    assert every.loc[("d_score", "test_nll"), "n"] == 12
    weak = table[(table["group_by"] == "supervision") & (table["group"] == "weak")].set_index(["x", "y"])
    assert weak.loc[("d_score", "transfer_gbt_ood2"), "rho"] == pytest.approx(-1.0)
    assert weak.loc[("d_score", "transfer_gbt_ood2"), "n"] == 6


def test_correlations_defaults_skip_missing_columns():
    table = correlations(frame()[["d_score", "test_nll", "train_nll"]], n_bootstrap=20)
    assert set(table["x"]) == {"d_score"} and set(table["y"]) == {"test_nll", "train_nll", "nll_gap"}


def test_load_many_experiments(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        write_results(tmp_path / name, [{"experiment": name, "trial_key": f"{name}1", "mig": 0.5}])
    df = load_trials(str(tmp_path / "a"), str(tmp_path / "b"))
    assert list(df["experiment"]) == ["a", "b"] and list(df["mig"]) == [0.5, 0.5]
    with pytest.raises(FileNotFoundError, match="no trials.parquet"):
        load_trials(str(tmp_path))
