"""Issue 14, points 3 and 4: correlations never pool datasets or splits, and M21's best-seed
selection is offered next to the mean ± sd."""

import numpy as np
import pandas as pd
import pytest

from analysis.aggregate import best_seeds, correlation_table, correlations, seed_summary
from analysis.report import correlation_text, seed_text


def two_datasets():
    """leave1out on two datasets: within each, D-score and test NLL rise together (ρ = +1), but the
    dataset with the higher D-scores has much lower NLLs, so pooling the two gives ρ < 0."""
    d = np.linspace(0.1, 0.5, 6)
    return pd.DataFrame({
        "dataset": ["dsprites"] * 6 + ["shapes3d"] * 6,
        "split": ["leave1out"] * 12,
        "objective": ["beta_vae"] * 12,
        "d_score": np.concatenate([d, d + 0.5]),
        "test_nll": np.concatenate([1000 + 10 * d, 100 + 10 * d]),
        "train_nll": np.concatenate([900 + d, 90 + d]),
    })


def test_correlation_table_is_taken_within_dataset_and_split():
    table = correlation_table(two_datasets(), n_bootstrap=20)
    overall = table[(table["group_by"] == "all") & (table["x"] == "d_score") & (table["y"] == "test_nll")]
    assert sorted(overall["dataset"]) == ["dsprites", "shapes3d"]
    assert set(overall["split"]) == {"leave1out"}
    np.testing.assert_allclose(overall["rho"], [1.0, 1.0])
    assert list(overall["n"]) == [6, 6]
    # pooling the two would have given a negative correlation
    pooled = correlation_table(two_datasets(), within=(), n_bootstrap=20)
    row = pooled[(pooled["x"] == "d_score") & (pooled["y"] == "test_nll")]
    assert row["rho"].iloc[0] < 0


def test_correlations_group_by_cell_and_user_columns():
    df = two_datasets().assign(architecture=["burgess", "kim"] * 6)
    table = correlations(df, by=["architecture"], n_bootstrap=10)
    assert list(table.columns[:3]) == ["dataset", "split", "architecture"]
    assert len(table.groupby(["dataset", "split", "architecture"])) == 4
    with pytest.raises(KeyError, match="by: no column"):
        correlations(df, by=["nope"])


def test_report_text_names_the_dataset():
    text = correlation_text(two_datasets())
    assert "dataset=dsprites, split=leave1out" in text and "dataset=shapes3d, split=leave1out" in text


def seeds():
    return pd.DataFrame({
        "dataset": ["dsprites"] * 6, "split": ["leave1out"] * 6,
        "objective": ["beta_vae"] * 6, "beta": [4.0] * 3 + [8.0] * 3, "seed": [0, 1, 2] * 2,
        "d_score": [0.2, 0.7, 0.4, 0.9, np.nan, 0.3],
        "test_nll": [10.0, 20.0, 30.0, 40.0, 50.0, 60.0],
    })


def test_best_seed_is_the_most_disentangled_per_configuration():
    best = best_seeds(seeds(), "d_score")
    assert list(best["seed"]) == [1, 0] and list(best["test_nll"]) == [20.0, 40.0]
    best = best_seeds(seeds(), "test_nll")
    assert list(best["seed"]) == [2, 2]
    with pytest.raises(KeyError, match="best_seed_by"):
        best_seeds(seeds(), "dci_disentanglement")


def test_seed_summary_gives_best_and_mean_and_says_which_is_shown():
    summary = seed_summary(seeds(), ["test_nll"], best_seed_by="d_score").set_index("beta")
    assert summary.loc[4.0, "best"] == 20.0 and summary.loc[4.0, "mean"] == 20.0
    assert summary.loc[8.0, "best"] == 40.0 and summary.loc[8.0, "mean"] == 50.0
    assert summary.loc[8.0, "sd"] == pytest.approx(10.0)
    assert set(summary["shown"]) == {"best seed by d_score"}
    assert set(seed_summary(seeds(), ["test_nll"], best_seed_by=None)["shown"]) == {"mean"}
    assert summary.loc[8.0, "seeds"] == "0, 1, 2" and summary.loc[8.0, "best_seed"] == 0
    text = seed_text(seeds())
    assert "highest d_score" in text and "mean ± sd" in text and "40.000 (50.000 ± 10.000)" in text


def test_the_html_report_shows_the_best_seed_and_says_so(tmp_path):
    from analysis.html_report import write_html_report

    df = seeds().assign(train_nll=1.0, trial_key=[str(i) for i in range(6)])
    text = open(write_html_report([str(tmp_path)], str(tmp_path), df=df, max_models=0, n_bootstrap=10)).read()
    assert "<h2>Seeds</h2>" in text and "best seed by d_score" in text and "highest d_score" in text
    assert text.count("<h2>Seeds") == 1 and "<td>40.000 (50.000 ± 10.000)</td>" in text  # one table
