"""What a trials row holds, read however it is read: every setting the model ran with (defaults
included), group columns as categoricals, integers as integers, flags as booleans, units in the
schema, a status; older files read with the same dtypes; a failed or stopped model's row gives way
to its finished one; and analysis computes on finished models only. The rows of real sweeps are
checked in tests/end_to_end/test_command.py (finished, failed, stopped) and
tests/end_to_end/test_command.py (a pack member that diverged)."""

from __future__ import annotations

import json
from dataclasses import fields

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import analysis
from analysis import schema, storage
from analysis.metrics.registry import METRICS, EvaluationConfig
from analysis.schema import SETTINGS, TRIALS_SCHEMA
from data_pipeline.config import DataConfig
from models.config import SETTINGS as MODEL_DECLARATIONS
from sweeps.grid import get_spec, trial_configs
from sweeps.results import trial_row
from sweeps.trials import RUN_KEYS, TrialConfig


def planned(**changes) -> TrialConfig:
    trial = trial_configs(get_spec("default"), "default", "tiny", [0])[0]
    return trial.replace(**changes) if changes else trial


def test_the_setting_columns_are_the_config_classes_fields():
    assert schema.DATA_SETTINGS == {f.name: f.type for f in fields(DataConfig)}
    assert planned().data.__class__ is DataConfig  # the trial's data part is the one declaration
    assert schema.MODEL_SETTINGS == {name: s.type for name, s in MODEL_DECLARATIONS.items()}
    for name, declared in MODEL_DECLARATIONS.items():  # each model setting's unit and null meaning
        metadata = TRIALS_SCHEMA.field(name).metadata or {}
        assert metadata.get(b"unit", b"").decode() == (declared.unit or ""), name
        assert metadata.get(b"null", b"").decode() == (declared.null or ""), name
    # the evaluation's trial settings are EvaluationConfig's fields but its finer options
    assert schema.EVALUATION_SETTINGS == {f.name: f.type for f in fields(EvaluationConfig)
                                          if f.metadata.get("setting", True)}
    assert {"report_every", "n_metric", "metrics"} <= set(schema.EVALUATION_SETTINGS)
    assert "score_sampling" not in schema.EVALUATION_SETTINGS
    assert list(schema.RUN_SETTINGS) == list(RUN_KEYS)
    assert set(planned().effective_settings()) == {*SETTINGS, "trial_key"}
    for name, declared in SETTINGS.items():
        kind = TRIALS_SCHEMA.field(name).type
        expected = {"str": pa.types.is_dictionary, "int": pa.types.is_int64, "float": pa.types.is_float64,
                    "bool": pa.types.is_boolean}.get(declared.replace(" | None", ""), pa.types.is_string)
        assert expected(kind), (name, declared, kind)


def test_effective_settings_fill_defaults_and_resolve_what_none_stands_for():
    trial = planned()
    settings = trial.effective_settings()
    # the defaults the grid never names (issue 25: task, image_size and lr_decay were null)
    assert (settings["task"], settings["image_size"], settings["lr_decay"]) == ("vae", 64, 0.5)
    assert settings["gamma"] is None and settings["likelihood"] == "bernoulli"  # β-VAE has no γ
    assert settings["lr_milestones"] == [] and settings["metrics"] == list(trial.evaluation.metrics)
    # None: every metric computed by default (all but the opt-in rendering judge)
    by_default = [name for name, metric in METRICS.items() if metric.by_default]
    assert planned(metrics=None).effective_settings()["metrics"] == by_default
    assert "rendering_judge" in METRICS and "rendering_judge" not in by_default
    assert planned(objective="factor_vae").effective_settings()["gamma"] == 35.0  # its default γ
    assert planned(objective="wae_mmd").effective_settings()["likelihood"] == "mse"
    assert planned(objective="factor_vae", gamma=6.0).effective_settings()["gamma"] == 6.0
    # the trial key stays the hash of the settings as given: old experiments still resume
    assert settings["trial_key"] == trial.trial_key == planned().trial_key


def kinds(df: pd.DataFrame) -> pd.Series:
    """Each column's dtype, a categorical as "category" (whatever its categories)."""
    return df.dtypes.map(lambda d: "category" if isinstance(d, pd.CategoricalDtype) else str(d))


def finished_row(trial: TrialConfig, **metrics) -> dict:
    result = {"train_nll": 10.0, "test_nll": 12.0, "d_score": 0.5, "encoder_fails": 1.0, "decoder_fails": 0.0,
              "n_train_images": 100, "step": 20, "steps": 20, "n_images": 3000, "bf16": False,
              "device": "cpu", **metrics}
    return trial_row("exp", trial, result)


def test_a_row_holds_every_setting_and_reads_alike_with_pd_read_parquet_and_load_trials(tmp_path):
    trial = planned()
    storage.write_results(tmp_path, [finished_row(trial)])
    storage.compact(tmp_path)
    plain = pd.read_parquet(tmp_path / "trials.parquet")
    loaded = analysis.load_trials(tmp_path)
    pd.testing.assert_series_equal(kinds(plain), kinds(loaded))
    row = plain.iloc[0]
    # every setting without a "null" in its field's metadata is filled
    must = [f.name for f in schema.SETTING_FIELDS if b"null" not in (f.metadata or {})]
    assert not plain[must].isna().any().any(), plain[must].isna().sum()[lambda s: s > 0]
    assert len(plain[plain["image_size"] == 64]) == 1
    assert json.loads(row["config"]) == {**trial.effective_settings(), "n_images": 3000, "bf16": False}
    assert json.loads(row["metrics"]) == trial.effective_settings()["metrics"]
    for column in ["dataset", "split", "condition", "objective", "architecture", "task", "preset", "scale",
                   "data_source", "device", "status", "experiment"]:
        assert isinstance(plain[column].dtype, pd.CategoricalDtype), column
    for column in ["seed", "steps", "latent_dim", "n_images", "n_train_images", "trained_steps"]:
        assert str(plain[column].dtype) == "Int64", column
    assert str(plain["encoder_fails"].dtype) == "boolean" and row["encoder_fails"] is np.True_
    assert row["decoder_fails"] is np.False_ and row["status"] == "finished"
    # units in the schema's field metadata, in the file
    fields_ = pq.read_schema(tmp_path / "trials.parquet")
    assert fields_.field("test_nll").metadata[b"unit"] == b"nats"
    assert fields_.field("train_seconds").metadata[b"unit"] == b"s"
    assert schema.HISTORY_SCHEMA.field("images_per_second").metadata[b"unit"] == b"images/s"


def test_what_only_the_run_knows_comes_from_its_result():
    """The whole grid (n_images None) is so many images, an epoch budget so many steps, the
    transfer factor the evaluation's choice: the row and its config JSON hold those values."""
    trial = planned(n_images=None, epochs=2.0)
    row = finished_row(trial, n_images=737_280, steps=46_080, transfer_factor="shape")
    assert (row["n_images"], row["steps"], row["epochs"]) == (737_280, 46_080, 2.0)
    assert row["transfer_factor"] == "shape"
    assert json.loads(row["config"])["n_images"] == 737_280 and json.loads(row["config"])["steps"] == 46_080
    failed = unfinished(trial, "failed", "boom")  # a model that did not finish: the settings as planned
    assert failed["n_images"] is None and failed["steps"] == trial.model.steps and failed["error"] == "boom"


def test_an_older_file_reads_with_the_dtypes_of_a_new_one(tmp_path):
    """A trials.parquet as disgen wrote it before: plain strings, float flags, ints with nulls as
    written by pyarrow, no status, no provenance, most settings missing."""
    new = tmp_path / "new"
    storage.write_results(new, [finished_row(planned())])
    storage.compact(new)
    old = tmp_path / "old"
    old.mkdir()
    pq.write_table(pa.table({
        "experiment": ["old", "old"], "trial_key": ["k1", "k2"], "dataset": ["dsprites", "dsprites"],
        "split": ["blank_side", None], "beta": [1.0, 4.0], "seed": pa.array([0, None], pa.int64()),
        "encoder_fails": [1.0, float("nan")], "decoder_fails": [0.0, None], "train_nll": [1.0, 2.0],
        "config": ['{"beta": 1.0}', '{"beta": 4.0}'],
        "finished_at": pa.array([0, 1], pa.timestamp("s", tz="UTC")),
    }), old / "trials.parquet")
    reference = kinds(pd.read_parquet(new / "trials.parquet"))
    for frame in (analysis.load_trials(old), storage.read_results(old)):
        pd.testing.assert_series_equal(kinds(frame), reference)
        assert frame["status"].tolist() == ["finished", "finished"]  # older files held finished models
        assert frame["encoder_fails"].tolist()[0] is True and frame["encoder_fails"].isna().tolist()[1]
        assert frame["seed"].tolist()[0] == 0 and frame["seed"].isna().tolist()[1]
    # and both experiments at once
    both = analysis.load_trials(new, old)  # leave1out, then blank_side: the categories sort anyway
    pd.testing.assert_series_equal(kinds(both), reference)
    assert len(both) == 3 and list(both["split"].cat.categories) == ["blank_side", "leave1out"]


def unfinished(trial: TrialConfig, status: str, error: str | None = None) -> dict:
    return trial_row("exp", trial, {"step": 5, "error": error}, status)


def test_a_failed_or_stopped_row_gives_way_to_the_finished_one(tmp_path):
    one, two, three = planned(), planned(beta=2.0), planned(beta=3.0)
    store = storage.ResultsStore(tmp_path, compact_every=100)
    store.commit(storage.new_part(), [unfinished(one, "failed", "NonFiniteLossError: step 2")])
    store.commit(storage.new_part(), [finished_row(two)])
    store.commit(storage.new_part(), [unfinished(three, "stopped")])
    assert store.keys == {two.trial_key}  # the finished models: what a resume does not run again
    # the failed model finishes on --resume; the finished one fails in a run it should not have had
    store.commit(storage.new_part(), [finished_row(one, test_nll=99.0)])
    assert store.commit(storage.new_part(), [unfinished(two, "failed", "a late failure")]) == []
    store.commit(storage.new_part(), [unfinished(three, "failed", "then it failed")])

    def rows():
        df = storage.read_results(tmp_path).set_index("trial_key")
        return {key: (df.loc[key, "status"], None if pd.isna(df.loc[key, "error"]) else df.loc[key, "error"])
                for key in df.index}

    expected = {one.trial_key: ("finished", None), two.trial_key: ("finished", None),
                three.trial_key: ("failed", "then it failed")}
    assert len(storage.read_results(tmp_path)) == 3
    assert rows() == expected
    assert storage.read_results(tmp_path).set_index("trial_key").loc[one.trial_key, "test_nll"] == 99.0
    store.fold()
    assert rows() == expected
    # the reader's precedence alone, whatever the order the parts were written in: a failed row
    # written after a finished one (by an older driver, or by hand) does not hide it
    storage.write_results(tmp_path, [unfinished(one, "failed", "written after")])
    assert rows() == expected
    store.compact()
    assert rows() == expected
    assert storage.ResultsStore(tmp_path).keys == {one.trial_key, two.trial_key}


def test_correlations_tables_findings_and_figures_use_finished_models_only(tmp_path):
    """A stopped model's row with numbers (a hand-made frame: the sweep stores none) would change
    every result if it were counted."""
    from analysis.aggregate import correlations, seed_summary
    from analysis.findings import findings
    from analysis.report import correlation_text
    from analysis.tables import nll_table, trials_text

    rows = [{"trial_key": f"k{i}", "status": "finished", "dataset": "dsprites", "split": "leave1out",
             "objective": "beta_vae", "beta": float(i + 1), "seed": 0, "d_score": 0.1 * i,
             "train_nll": 50.0 - i, "test_nll": 60.0 - i} for i in range(4)]
    # in a split of its own: counted, it would add a cell to every table
    rows.append({**rows[0], "trial_key": "stopped", "status": "stopped", "beta": 99.0, "d_score": 0.9,
                 "train_nll": 500.0, "test_nll": 600.0, "split": "blank_side"})
    rows.append({**rows[1], "trial_key": "stopped2", "status": "stopped", "beta": 98.0, "d_score": 0.0,
                 "train_nll": 1.0, "test_nll": 900.0, "split": "blank_side"})
    storage.write_results(tmp_path, rows)
    df = analysis.load_trials(tmp_path)
    assert sorted(df["status"]) == ["finished"] * 4 + ["stopped"] * 2  # load_trials: every row
    finished = analysis.finished_models(df)
    assert len(finished) == 4
    rho = correlations(df, scores=["train_nll", "test_nll"], n_bootstrap=10)
    assert (rho["n"] == 4).all() and np.allclose(rho["rho"], -1.0) and set(rho["split"]) == {"leave1out"}
    assert analysis.spearman(df, "d_score", "test_nll")["n"] == 4
    table = analysis.correlation_table(df, scores=["test_nll"], n_bootstrap=10)
    assert set(table["split"]) == {"leave1out"} and (table["n"] == 4).all()
    assert set(seed_summary(df, ["test_nll"])["beta"]) == {1.0, 2.0, 3.0, 4.0}
    assert "stopped" not in trials_text(df) and "99" not in trials_text(df)
    assert "600" not in nll_table(df).to_string()
    assert "n=4" in correlation_text(df)
    assert [repr(f) for f in findings(df)] == [repr(f) for f in findings(finished)]
    from analysis.findings import reconstruction_ratios

    assert set(reconstruction_ratios(df)["split"]) == {"leave1out"}
    # the figures: each takes the finished models (the decorator that filters them)
    from analysis import figures

    for function in (figures.disentanglement_vs_nll, figures.violins_by, figures.metric_vs_score):
        assert function.__wrapped__ and function.__name__ != "on_finished", function


@pytest.mark.parametrize("value, flag", [(1.0, True), (0.0, False), (float("nan"), None), (None, None),
                                         (True, True)])
def test_a_flag_is_stored_as_a_boolean(value, flag):
    table = schema.to_table([{"trial_key": "k", "encoder_fails": value}], TRIALS_SCHEMA)
    assert table.column("encoder_fails").to_pylist() == [flag]
