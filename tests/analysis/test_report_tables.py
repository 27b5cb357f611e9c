"""The report's tables against independent computations: the seed table (mean ± sd, failed seeds),
M21's best seed, M22's verdict; and the CLI's help and progress bar."""

import io
import re

import numpy as np
import pandas as pd
import pytest

from analysis import tables
from analysis.aggregate import best_seeds
from analysis.report import parser, text_progress


def frame():
    # two configurations (β 1 and 4) × three seeds; seed 2 of β = 4 failed (no values)
    return pd.DataFrame({
        "trial_key": [f"k{i}" for i in range(6)], "split": "a", "objective": "beta_vae",
        "beta": [1.0, 1.0, 1.0, 4.0, 4.0, 4.0], "seed": pd.array([0, 1, 2, 0, 1, 2], dtype="Int64"),
        "train_nll": [10.0, 12.0, 14.0, 20.0, 22.0, np.nan],
        "test_nll": [30.0, 31.0, 35.0, 40.0, 44.0, np.nan],
        "d_score": [0.1, 0.5, 0.3, 0.2, 0.9, np.nan],
    })


def test_seed_table_mean_sd_and_failed_seeds():
    table = tables.seed_table(frame(), ["train_nll", "d_score"]).set_index("beta")
    assert table.loc["1", "train_nll"] == "12.000 ± 2.000"  # mean 12, sample sd 2
    assert table.loc["4", "train_nll"] == "21.000 ± 1.414"  # seed 2 has no value
    assert table.loc["1", "failed"] == "–" and table.loc["4", "failed"] == "seed 2 failed"
    assert table.loc["4", "seeds"] == "0, 1, 2" and (table["n"] == 3).all()
    partial = frame().assign(d_score=[np.nan, 0.5, 0.3, 0.2, 0.9, np.nan])  # seed 0 of β 1 has one value
    assert tables.seed_table(partial, ["train_nll", "d_score"]).set_index("beta").loc["1", "failed"] == "–"
    # with the best seed (M21's choice): its value first, then the mean ± sd, in one table
    table = tables.seed_table(frame(), ["train_nll"], best_seed_by="d_score").set_index("beta")
    assert table.loc["1", "best seed by d_score"] == "1" and table.loc["4", "best seed by d_score"] == "1"
    assert table.loc["1", "train_nll"] == "12.000 (12.000 ± 2.000)"
    assert table.loc["4", "train_nll"] == "22.000 (21.000 ± 1.414)"


def test_best_seed_is_the_most_disentangled_as_m21_reports():
    best = best_seeds(frame())
    assert sorted(best["trial_key"]) == ["k1", "k4"]  # d_score 0.5 of β 1, 0.9 of β 4
    # without a D-score, DCI disentanglement chooses (the tables' default)
    dci = frame().drop(columns="d_score").assign(dci_disentanglement=[0.3, 0.1, 0.2, 0.1, 0.0, 0.05])
    nll = tables.nll_table(dci).set_index("model")
    assert nll.loc["beta_vae β=1", "train_best"] == 10.0 and nll.loc["beta_vae β=4", "test_best"] == 40.0
    nll = tables.nll_table(frame()).set_index("model")
    assert nll.loc["beta_vae β=1", "train_best"] == 12.0 and nll.loc["beta_vae β=4", "test_best"] == 44.0
    assert nll.loc["beta_vae β=1", "train_mean"] == 12.0 and nll.loc["beta_vae β=1", "train_sd"] == 2.0


def test_m22_verdict_follows_the_rule_of_the_metric():
    df = pd.DataFrame({"split": ["s1", "s2", "s3", "s4"], "objective": "vae",
                       "encoder_error_train": [0.1, 0.1, 0.1, 0.1],
                       "encoder_error_test": [0.5, 0.12, 0.5, 0.12],
                       "decoder_nll_train": [50, 50, 50, 50], "decoder_nll_test": [100, 100, 52, 52]})
    table = tables.diagnosis_table(df).set_index("condition")
    assert list(table["verdict"]) == ["both", "decoder", "encoder", "neither"]
    assert table.loc["s1", "encoder ratio"] == pytest.approx(5.0)


def test_help_prints_each_default_once(capsys):
    text = parser().format_help()
    entries = re.split(r"\n  (?=-)", text[text.index("options:"):])
    for option, default in [("--max-models", "4"), ("--n-bootstrap", "1000"), ("--metric", "d_score")]:
        (entry,) = [e for e in entries if e.startswith(option)]
        assert entry.count("default") == 1 and f"(default: {default})" in entry, entry


def test_progress_over_models_is_a_bar_on_a_terminal_and_one_line_elsewhere():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal, log = Terminal(), io.StringIO()
    for stream in (terminal, log):
        show = text_progress("models", stream)
        for done in range(1, 5):
            show(done, 4)
    assert "\r" in terminal.getvalue() and "models: 100%" in terminal.getvalue()
    assert "4/4" in terminal.getvalue().rsplit("\r", 1)[-1]
    assert log.getvalue() == "models: 4 of 4 done\n"
