"""The metric registry (analysis/metrics/registry.py): what derives from it, the guard rails a new
metric meets, and EvaluationConfig's defaults and errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import planted
import pyarrow as pa
import pytest

from analysis.evaluation import EvaluationConfig, evaluate
from analysis.metrics.registry import DISENTANGLEMENT_SCORES, METRICS, Column, Metric, metric_columns
from analysis.schema import EVALUATION_SETTINGS, TRIALS_SCHEMA

SMALL = EvaluationConfig(n_nll=20, n_metric=100)


def test_every_metric_column_is_a_results_column_of_its_kind_with_its_unit():
    kinds = {"float": pa.types.is_float64, "int": pa.types.is_int64, "bool": pa.types.is_boolean,
             "group": pa.types.is_dictionary, "text": pa.types.is_string}
    for column in metric_columns():
        field = TRIALS_SCHEMA.field(column.name)
        assert kinds[column.kind](field.type), column
        if column.unit:
            assert field.metadata[b"unit"] == column.unit.encode(), column
    assert TRIALS_SCHEMA.field("decoder_nll_test").metadata[b"unit"] == b"nats"


def test_the_reports_disentanglement_scores_are_the_registrys():
    from analysis.aggregate import DISENTANGLEMENT_METRICS

    assert DISENTANGLEMENT_SCORES == DISENTANGLEMENT_METRICS


def test_the_config_defaults_are_evaluates_and_its_settings_are_columns():
    config = EvaluationConfig()
    assert (config.n_nll, config.n_metric, config.dci_estimator, config.transfer_regressors) == \
        (1000, 1000, "gbt", ("gbt",))
    # every metric but the opt-in rendering judge
    assert config.chosen_metrics == tuple(m for m in METRICS if m != "rendering_judge")
    assert config.n_grid is None
    assert config.score_sampling == "training" and config.diagnosis_ratio == 1.5
    assert set(config.settings()) == set(EVALUATION_SETTINGS) and "n_grid" not in EVALUATION_SETTINGS
    assert config.settings()["metrics"] == config.chosen_metrics


@pytest.mark.parametrize("changes, message", [
    ({"metrics": ("nope",)}, "metrics: unknown 'nope'; choose from d_score, dci"),
    ({"metrics": "mig"}, "metrics: expected a list of metric names"),
    ({"dci_estimator": None}, "dci_estimator: unknown None; choose one of gbt, hist_gbt, none"),
    ({"transfer_regressors": ("svm",)}, "transfer_regressors: unknown 'svm'; choose from gbt, mlp"),
    ({"n_metric": 1}, "n_metric: must be at least 2; got 1"),
    ({"n_nll": 2.5}, "n_nll: expected a whole number >= 1; got 2.5"),
    ({"score_sampling": "fresh"}, "score_sampling: unknown 'fresh'; choose one of training, grid"),
])
def test_a_bad_setting_is_a_one_line_error_naming_it(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        EvaluationConfig(**changes)


def test_a_trials_settings_parse_with_the_sweeps_errors():
    settings = {"report_every": 5, "n_nll": 10, "n_metric": 20, "metrics": ["mig"], "dataset": "dsprites"}
    assert EvaluationConfig.parse(settings) == EvaluationConfig(5, 10, 20, metrics=("mig",))
    assert EvaluationConfig.parse({**settings, "transfer_factor": "scale"}).transfer_factor == "scale"
    with pytest.raises(ValueError, match="n_metric: not set; set it under 'fixed' or a scale"):
        EvaluationConfig.parse({"report_every": 5, "n_nll": 10})
    with pytest.raises(ValueError, match="transfer_factor: dsprites has no factor 'hue'"):
        EvaluationConfig.parse({**settings, "transfer_factor": "hue"})


def _toy(compute, inputs=("training_draws",)):
    return Metric(compute, (Column("toy_score"),), inputs)


def test_a_metric_runs_from_its_line_and_is_nan_where_not_chosen(monkeypatch):
    monkeypatch.setitem(METRICS, "toy", _toy(lambda sample: {"toy_score": float(sample.codes.std())}))
    dataset, split = planted.dataset(), planted.split()
    model = planted.PlantedModel(planted.factors_as_codes, 3)
    out = evaluate(model, dataset, split, dataclasses.replace(SMALL, metrics=("toy", "mig")))
    assert out["toy_score"] > 0 and 0 <= out["mig"] <= 1
    without = evaluate(model, dataset, split, dataclasses.replace(SMALL, metrics=("mig",)))
    assert np.isnan(without["toy_score"])


def test_a_metric_that_reads_an_undeclared_input_is_told_where_to_declare_it(monkeypatch):
    monkeypatch.setitem(METRICS, "toy", _toy(lambda sample: {"toy_score": float(len(sample.held_out_codes))}))
    dataset, split = planted.dataset(), planted.split()
    with pytest.raises(AttributeError, match="metric toy reads 'held_out_codes': add 'held_out' to its in"):
        evaluate(planted.PlantedModel(planted.factors_as_codes, 3), dataset, split,
                 dataclasses.replace(SMALL, metrics=("toy",)))


def test_a_metric_that_returns_a_key_it_did_not_declare_is_refused(monkeypatch):
    monkeypatch.setitem(METRICS, "toy", _toy(lambda sample: {"toy_score": 1.0, "toy_extra": 2.0}))
    dataset, split = planted.dataset(), planted.split()
    with pytest.raises(ValueError, match=r"metric toy returned \['toy_extra'\], which are not its columns"):
        evaluate(planted.PlantedModel(planted.factors_as_codes, 3), dataset, split,
                 dataclasses.replace(SMALL, metrics=("toy",)))


def test_an_unknown_input_or_kind_is_refused_where_the_line_is_written():
    with pytest.raises(ValueError, match="unknown input 'pixels'; choose from training_draws"):
        Metric(lambda sample: {}, (), ("pixels",))
    with pytest.raises(ValueError, match="column c: unknown kind 'double'"):
        Column("c", kind="double")
