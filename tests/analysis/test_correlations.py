import os

import numpy as np
import pandas as pd
import pytest

from analysis.aggregate import spearman
from analysis.loading import load_trials
from analysis.report import main as report_main
from analysis.schema import HISTORY_FILE, TRIALS_FILE
from analysis.storage import compact, read_results, write_results
from analysis.trained_models import reconstruction_grid


def trial(key, beta, split, d, test_nll):
    return {"experiment": "e", "trial_key": key, "split": split, "condition": "extrapolation",
            "objective": "beta_vae", "beta": beta, "seed": 0, "steps": 10, "train_nll": 50.0,
            "test_nll": test_nll, "d_score": d, "dci_disentanglement": d / 2}


def test_a_later_write_replaces_rows_by_key_and_keeps_dtypes(tmp_path):
    write_results(tmp_path, [trial("a", 1.0, "blank_side", 0.1, 90.0)])
    write_results(tmp_path, [trial("b", 4.0, "blank_side", 0.2, 80.0)])
    write_results(tmp_path, [trial("a", 1.0, "blank_side", 0.3, 70.0)])
    df = read_results(tmp_path, TRIALS_FILE)
    assert sorted(df["trial_key"]) == ["a", "b"]
    assert df.set_index("trial_key").loc["a", "d_score"] == 0.3
    assert df["beta"].dtype == np.float64 and df["seed"].dtype == "Int64"
    assert compact(tmp_path) == 3
    pd.testing.assert_frame_equal(read_results(tmp_path, TRIALS_FILE), df)
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
    # pandas alone reads the compacted file, with the same columns
    assert list(pd.read_parquet(tmp_path / TRIALS_FILE).columns) == list(df.columns)


def test_history_rows_are_unique_per_trial_and_step(tmp_path):
    rows = [{"trial_key": "a", "step": s, "loss": float(s)} for s in (5, 10)]
    write_results(tmp_path, [{"trial_key": "a"}], rows)
    write_results(tmp_path, [{"trial_key": "a"}], rows[1:])
    write_results(tmp_path, [], [{"trial_key": "b", "step": 5}])  # history shows only trials that have a row
    assert len(read_results(tmp_path, HISTORY_FILE)) == 2


def test_unknown_result_columns_are_refused(tmp_path):
    with pytest.raises(KeyError, match="not_a_column"):
        write_results(tmp_path, [{"trial_key": "a", "not_a_column": 1}])
    assert not os.listdir(tmp_path)  # nothing written


def test_spearman_matches_closed_form():
    df = pd.DataFrame({"x": [1, 2, 3, 4, 5], "y": [5, 6, 7, 8, 7]})
    # ranks of y: 1, 2, 3.5, 5, 3.5 → Pearson on ranks
    rx, ry = np.arange(1, 6), np.array([1, 2, 3.5, 5, 3.5])
    expected = np.corrcoef(rx, ry)[0, 1]
    result = spearman(df, "x", "y", n_bootstrap=200)
    assert result["rho"] == pytest.approx(expected)
    assert -1 <= result["low"] <= result["rho"] <= result["high"] <= 1
    assert np.isnan(spearman(df.head(2), "x", "y")["rho"])


def test_reconstruction_grid_tiles_originals_above_reconstructions():
    originals = np.full((3, 1, 4, 4), 255, np.uint8)
    reconstructions = np.zeros((3, 1, 4, 4), np.float32)
    grid = reconstruction_grid(originals, reconstructions)
    assert grid.shape == (1, 2 * 4 + 3 * 2, 3 * 4 + 4 * 2)
    assert grid[0, 2:6, 2:6].min() == 1.0 and grid[0, 8:12, 2:6].max() == 0.0


def test_report_prints_the_table_and_writes_the_scatter(tmp_path, capsys):
    rows = [trial(f"k{i}", beta, split, d, nll) for i, (beta, split, d, nll) in enumerate(
        [(1.0, "leave1out", 0.1, 90), (4.0, "leave1out", 0.3, 80),
         (2.0, "leave1out", 0.2, 60), (8.0, "leave1out", 0.4, 55)])]  # one split: ρ is within it
    write_results(tmp_path, rows)
    assert report_main([str(tmp_path), "--out", str(tmp_path / "fig"), "--no-html"]) == 0
    out = capsys.readouterr().out
    assert "4 trials" in out and "leave1out" in out and "ρ = -0.80" in out
    png = tmp_path / "fig" / "disentanglement_vs_nll.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(load_trials(str(tmp_path))) == 4


def test_report_on_a_folder_without_results_exits_2(tmp_path, capsys):
    assert report_main([str(tmp_path)]) == 2
    assert "no trials.parquet" in capsys.readouterr().err


def test_files_written_before_a_column_was_added_stay_readable(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    old = pa.table({"trial_key": ["a"], "d_score": [0.5], "train_nll": [1.0]})
    pq.write_table(old, tmp_path / TRIALS_FILE)
    df = read_results(tmp_path, TRIALS_FILE)
    assert df.loc[0, "d_score"] == 0.5 and pd.isna(df.loc[0, "mig"])
    write_results(tmp_path, [trial("b", 4.0, "blank_side", 0.2, 80.0)])
    assert len(read_results(tmp_path, TRIALS_FILE)) == 2
    compact(tmp_path)  # the old file and the part, compacted into one
    assert len(pd.read_parquet(tmp_path / TRIALS_FILE)) == 2
