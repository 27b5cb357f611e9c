"""The readout per factor (analysis.metrics.factor_readout, analysis.evaluation): how well each
factor can be read from the codes of held-in training images, in the score of its kind, on planted
codes with known answers. Categorical factors read by accuracy (codes that equal the factors: 1;
noise: chance, also when the noise is a fixed function of the image, which a readout scored on
images it was fitted on would memorise); ordinal factors by R², the same for a 32-value and a
6-value factor encoded equally well, and about 0 once the codes are shuffled across images;
dSprites' circular orientation modulo each shape's symmetry."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import planted
import pytest

from analysis.evaluation import EvaluationConfig, evaluate
from analysis.metrics.factor_readout import factor_readout_scores, readout_score
from data_pipeline.factors import FactorSpace
from data_pipeline.spaces import factor_space
from data_pipeline.splits.rules import Split

NAMES, SIZES = ("shape", "scale", "posX"), (3, 6, 32)  # factor names the results schema has columns for
KINDS = ("categorical", "ordinal", "ordinal")


def data_and_split():
    """The full 3 × 6 × 32 grid, one image per combination; posX > 0.5 (classes 16-31) held out, so
    16 posX values train: chance 1/16 there, not 1/32."""
    data = planted.dataset(SIZES, NAMES, KINDS)
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


def noisy_readout(space, name, r2, n=3000, seed=0):
    """Classes of ``n`` random grid points of ``space`` and codes (value + Gaussian noise, and a
    second code of pure noise) from which the factor's value is recoverable with R² ``r2`` at best."""
    rng = np.random.default_rng(seed)
    classes = rng.integers(0, space.sizes, (n, space.n_factors))
    value = space.readout_targets(classes, name)
    noise = value.std() * np.sqrt((1 - r2) / r2)
    return classes, np.stack([value + noise * rng.standard_normal(n), rng.standard_normal(n)], axis=1)


def scores_of(space, classes, codes):
    """The readout's scores on the second half of the rows, fitted on the first."""
    half = len(classes) // 2
    return factor_readout_scores(space, codes[:half], classes[:half], codes[half:], classes[half:], classes,
                                 random_state=0)


def test_readout_score_is_accuracy_for_categories_and_r2_for_the_others():
    space = FactorSpace(("shape", "posX"), (3, 4), (np.arange(3.0), np.linspace(0, 1, 4)),
                        ("categorical", "ordinal"))
    truth = np.array([[0, 0], [1, 1], [2, 2], [0, 3]])
    assert readout_score(space, "shape", [0, 1, 0, 0], truth) == 0.75
    values = np.linspace(0, 1, 4)
    assert readout_score(space, "posX", values, truth) == 1.0
    assert readout_score(space, "posX", np.full(4, values.mean()), truth) == pytest.approx(0.0)
    # R² = 1 - SSE / SST: one value off by a third of the range
    expected = 1 - (1 / 3) ** 2 / ((values - values.mean()) ** 2).sum()
    assert readout_score(space, "posX", [0, 2 / 3, 2 / 3, 1], truth) == pytest.approx(expected)
    assert np.isnan(readout_score(space, "posX", [], truth[:0]))


def test_an_ordinal_factor_encoded_with_r2_098_reads_so_and_shuffled_reads_at_zero():
    space = factor_space("dsprites")
    classes, codes = noisy_readout(space, "posX", 0.98)
    score = scores_of(space, classes, codes)["posX"]
    assert score["kind"] == "ordinal" and score["chance"] == 0.0
    assert 0.95 < score["score"] <= 0.985, score
    shuffled = codes[np.random.default_rng(1).permutation(len(codes))]  # the same codes, other images
    assert scores_of(space, classes, shuffled)["posX"]["score"] < 0.1


def test_a_32_value_and_a_6_value_factor_encoded_equally_well_read_alike():
    space = factor_space("dsprites")
    for r2 in (0.6, 0.9, 0.98):
        scores = [scores_of(space, *noisy_readout(space, name, r2, seed=3))[name]["score"]
                  for name in ("posX", "scale")]
        # a forest on noisy codes reads a little below the best R² (it fits some noise)
        assert abs(scores[0] - scores[1]) < 0.06, (r2, scores)
        assert -0.08 < np.mean(scores) - r2 < 0.02, (r2, scores)


def test_dsprites_orientation_reads_modulo_each_shapes_symmetry():
    full = factor_space("dsprites")
    space = FactorSpace(("shape", "orientation"), (3, 40), (full.values[0], full.values[2]),
                        ("categorical", "circular"), (("orientation", "shape", (4, 2, 1)),))
    rng = np.random.default_rng(0)
    classes = rng.integers(0, (3, 40), (3000, 2))
    theta = space.values[1][classes[:, 1]]
    order = np.array([4, 2, 1])[classes[:, 0]]
    # the code a perfect encoder can have: the angle modulo what the image shows (a square's
    # quarter turn), which as a raw angle would be a poor readout of orientation
    seen = np.mod(theta, 2 * np.pi / order)
    codes = np.stack([np.cos(order * seen), np.sin(order * seen), classes[:, 0]], axis=1)
    score = scores_of(space, classes, codes)["orientation"]
    assert score["kind"] == "circular" and score["score"] > 0.97
    # 0 and 2π are the same angle: targets agree at both ends of the grid
    ends = space.readout_targets(np.array([[2, 0], [2, 39]]), "orientation")
    np.testing.assert_allclose(ends[0], ends[1], atol=1e-12)
    noise = np.stack([rng.standard_normal(3000), classes[:, 0]], axis=1)
    assert scores_of(space, classes, noise)["orientation"]["score"] < 0.1


def test_codes_equal_to_the_factors_read_perfectly():
    data, split = data_and_split()
    out = evaluate(planted.PlantedModel(exact_factors, 3), data, split,
                   EvaluationConfig(n_nll=20, n_metric=300, metrics=()))
    assert out["readout_estimator"] == "random_forest"
    assert out["accuracy_shape"] == 1.0 and out["r2_scale"] > 0.99 and out["r2_posX"] > 0.99
    assert out["chance_shape"] == 1 / 3 and "chance_posX" not in out  # chance of R² is 0
    assert out["readout_n_train"] == 300 and 0 < out["readout_n_test"] < 150  # fitted images left out
    readout = json.loads(out["factor_readout"])
    assert readout["posX"]["kind"] == "ordinal" and readout["posX"]["chance"] == 0.0
    assert readout["shape"] == {"kind": "categorical", "score": 1.0, "chance": 1 / 3}
    assert "r2_orientation" not in out  # a factor this dataset lacks stays null in the results


def test_codes_of_noise_read_at_chance_on_images_the_readout_did_not_fit():
    data, split = data_and_split()
    out = evaluate(planted.PlantedModel(image_noise, 4), data, split,
                   EvaluationConfig(n_nll=20, n_metric=300, n_metric_test=600, metrics=()))
    # about 65% of the 600 test draws are of images among the 300 fitted draws (288 training images,
    # 1 - exp(-300/288)); scored, they would lift shape's accuracy to 0.77
    assert 180 < out["readout_n_test"] < 250
    assert abs(out["accuracy_shape"] - out["chance_shape"]) < 0.15, out["accuracy_shape"]
    assert out["r2_scale"] < 0.15 and out["r2_posX"] < 0.15, (out["r2_scale"], out["r2_posX"])


def test_readout_columns_survive_parquet_and_load_trials(tmp_path):
    from analysis import load_trials
    from analysis.schema import READOUT_COLUMNS
    from analysis.storage import write_results

    data, split = data_and_split()
    out = evaluate(planted.PlantedModel(exact_factors, 3), data, split,
                   EvaluationConfig(n_nll=20, n_metric=200, dci_estimator="none"))
    write_results(tmp_path, [{**out, "experiment": "e", "trial_key": "t0", "status": "finished"}])
    df = load_trials(tmp_path)
    assert df["r2_posX"].dtype == np.float64 and df.loc[0, "r2_posX"] > 0.99
    assert df.loc[0, "chance_shape"] == 1 / 3 and df.loc[0, "readout_estimator"] == "random_forest"
    assert pd.isna(df.loc[0, "r2_orientation"])
    assert json.loads(df.loc[0, "factor_readout"])["shape"]["chance"] == 1 / 3
    assert {"accuracy_shape", "accuracy_object_hue", "r2_horizontal_axis", "accuracy_hue_2", "r2_posX",
            "r2_orientation"} <= set(READOUT_COLUMNS)
    assert "accuracy_posX" not in READOUT_COLUMNS and "chance_orientation" not in READOUT_COLUMNS
