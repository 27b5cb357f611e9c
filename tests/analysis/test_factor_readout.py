"""The readout accuracy per factor (analysis.metrics.factor_readout, analysis.evaluation): how well
each factor can be read from the codes of held-in training images, on cases with known answers.
Codes that equal the factors read at accuracy 1; codes of pure noise read at chance, also when
the noise is a fixed function of the image, which a readout scored on images it was fitted on would
memorise. Both readouts are checked: DCI's own fits and the random forest used without DCI."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import planted
import pytest

from analysis.evaluation import EvaluationConfig, evaluate
from analysis.metrics.dci import dci
from analysis.metrics.factor_readout import forest_predictions, readout_accuracy
from data_pipeline.splits.rules import Split

NAMES, SIZES = ("shape", "scale", "posX"), (3, 6, 32)  # factor names the results schema has columns for


def data_and_split():
    """The full 3 × 6 × 32 grid, one image per combination; posX > 0.5 (classes 16-31) held out, so
    16 posX values train: chance 1/16 there, not 1/32."""
    data = planted.dataset(SIZES, NAMES)
    return data, Split("right_half", "planted", "extrapolation", {"posX": tuple(range(16, 32))})


def exact_factors(classes):
    """Codes = the factor classes, exactly."""
    return np.asarray(classes, dtype=float)


def image_noise(classes):
    """Codes of pure noise that are a fixed function of the image (here, of its classes): a
    readout fitted on an image's code predicts that image right, so only images it never saw
    show chance."""
    flat = np.ravel_multi_index(tuple(np.asarray(classes).T), SIZES).astype(float)
    return np.stack([np.modf(np.abs(np.sin(flat * 12.9898 + 78.233 * k)) * 43758.5453)[0] for k in range(4)],
                    axis=1)


def test_dci_gives_each_factors_fitted_readout():
    rng = np.random.default_rng(0)
    factors = rng.integers(0, [3, 5], (200, 2))
    codes = factors + 0.01 * rng.standard_normal(factors.shape)
    test = rng.integers(0, [3, 5], (80, 2))
    test[:, 1] = 0
    result = dci(codes, factors, codes_test=test + 0.01 * rng.standard_normal(test.shape), factors_test=test,
                 estimator="hist_gbt", n_jobs=1)
    assert (result["predictions_test"] == test).all()
    np.testing.assert_array_equal(result["accuracy_test"], [1.0, 1.0])
    assert result["informativeness_test"] == pytest.approx(result["accuracy_test"].mean())
    assert "predictions_test" not in dci(codes, factors, estimator="lasso_m21", n_jobs=1)


def test_readout_accuracy_scores_only_unseen_samples_and_not_constant_factors():
    predictions = np.array([[0, 1], [1, 1], [2, 1], [0, 1]])
    truth = np.array([[0, 1], [0, 1], [2, 1], [1, 1]])
    np.testing.assert_allclose(readout_accuracy(predictions, truth), [0.5, 1.0])
    np.testing.assert_allclose(readout_accuracy(predictions, truth, [True, False, True, False]), [1.0, 1.0])
    accuracy = readout_accuracy(predictions, truth, n_values=[3, 1])
    assert accuracy[0] == 0.5 and np.isnan(accuracy[1])  # one value on the training images: nothing to read
    assert np.isnan(readout_accuracy(predictions, truth, [False] * 4)).all()
    with pytest.raises(ValueError, match="boolean mask of 4"):
        readout_accuracy(predictions, truth, [True])
    # a factor with one training class is predicted as that class
    np.testing.assert_array_equal(forest_predictions(np.eye(3), [[0, 4]] * 3, np.eye(3))[:, 1], [4, 4, 4])


@pytest.mark.parametrize("options, estimator", [({"metrics": ()}, "random_forest"),
                                                ({"dci_estimator": "none"}, "random_forest"),
                                                # DCI's fits, read in DCI's test order: about 2 s
                                                pytest.param({"metrics": ("dci",), "dci_estimator": "gbt"},
                                                             "dci_gbt", marks=pytest.mark.slow)])
def test_codes_equal_to_the_factors_read_at_accuracy_one(options, estimator):
    data, split = data_and_split()
    out = evaluate(planted.PlantedModel(exact_factors, 3), data, split,
                   EvaluationConfig(n_nll=20, n_metric=300, **options))
    assert out["readout_estimator"] == estimator
    for name in NAMES:
        assert out[f"accuracy_{name}"] == 1.0, name
    assert (out["chance_shape"], out["chance_scale"], out["chance_posX"]) == (1 / 3, 1 / 6, 1 / 16)
    assert out["readout_n_train"] == 300 and 0 < out["readout_n_test"] < 150  # fitted images left out
    assert json.loads(out["factor_readout"])["posX"] == {"accuracy": 1.0, "chance": 1 / 16}
    assert "accuracy_orientation" not in out  # a factor this dataset lacks stays null in the results


def test_codes_of_noise_read_at_chance_on_images_the_readout_did_not_fit():
    # DCI's fits go through the same scoring (factor_readout), and the test above checks their order
    data, split = data_and_split()
    out = evaluate(planted.PlantedModel(image_noise, 4), data, split,
                   EvaluationConfig(n_nll=20, n_metric=300, n_metric_test=600, metrics=()))
    # about 65% of the 600 test draws are of images among the 300 fitted draws (288 training images,
    # 1 - exp(-300/288)); scored, they would lift shape to 0.77, scale to 0.67 and posX to 0.63
    assert 180 < out["readout_n_test"] < 250
    for name in NAMES:
        assert abs(out[f"accuracy_{name}"] - out[f"chance_{name}"]) < 0.15, (name, out[f"accuracy_{name}"])


def test_readout_columns_survive_parquet_and_load_trials(tmp_path):
    from analysis import load_trials
    from analysis.schema import READOUT_FACTORS
    from analysis.storage import write_results

    data, split = data_and_split()
    out = evaluate(planted.PlantedModel(exact_factors, 3), data, split,
                   EvaluationConfig(n_nll=20, n_metric=200, dci_estimator="none"))
    write_results(tmp_path, [{**out, "experiment": "e", "trial_key": "t0", "status": "finished"}])
    df = load_trials(tmp_path)
    assert df["accuracy_posX"].dtype == np.float64 and df.loc[0, "accuracy_posX"] == 1.0
    assert df.loc[0, "chance_posX"] == 1 / 16 and df.loc[0, "readout_estimator"] == "random_forest"
    assert pd.isna(df.loc[0, "accuracy_orientation"])
    assert json.loads(df.loc[0, "factor_readout"])["scale"]["chance"] == 1 / 6
    assert {f"accuracy_{n}" for n in READOUT_FACTORS} >= {"accuracy_shape", "accuracy_object_hue",
                                                           "accuracy_horizontal_axis", "accuracy_hue_2"}
