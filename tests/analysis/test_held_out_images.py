"""The held-out images of an evaluation: ``n_nll`` drawn from the whole held-out part of the factor
grid where the dataset can produce any grid point (``dataset.observe``), not only from the few the
trial's subset holds; all of them, with a warning, where the split holds out fewer; the subset's
own held-out rows without ``observe``; one sample for ``test_nll`` and the metrics.

On the planted grid (tests/planted.py: 5 × 4 × 6 combinations, a 1 × 4 × 4 image per combination
with its classes in its first pixels and one pixel on) and a planted model whose decoder says the
same logit ``L`` for every pixel, the Bernoulli NLL of an image of classes (a, b, h) has a closed
form: 16·softplus(L) − L·((a + b + h) / 255 + 1)."""

import dataclasses
import logging

import numpy as np
import planted
import pytest

from analysis.evaluation import EvaluationConfig, evaluate
from data_pipeline.splits.rules import Split

LOGIT = 0.7
RIGHT = Split("planted_right", "planted", "extrapolation", {"a": (3, 4)})  # 2 × 4 × 6 = 48 combinations
CHEAP = dict(dci_estimator="none")  # the NLLs and the readout only


def closed_form_nll(classes) -> np.ndarray:
    """The planted model's Bernoulli NLL of the planted images of ``classes`` (module docstring)."""
    on = np.asarray(classes).sum(axis=1) / 255 + 1
    return 16 * np.logaddexp(0, LOGIT) - LOGIT * on


def model():
    return planted.PlantedModel(planted.factors_as_codes, 3, likelihood="bernoulli", logit=LOGIT)


def recording(data):
    """``data`` whose ``observe`` records every class array it is asked to render."""
    asked = []

    def observe(classes):
        asked.append(np.array(classes))
        return data.observe(classes)

    return dataclasses.replace(data, observe=observe), asked


def subset_with_two_held_out(split=RIGHT, observe=True):
    """Every training image of the planted grid and just 2 of ``split``'s held-out images. Its
    factors are ordinal: the encoder's diagnosis can then read the held-out values of ``a`` (no
    classifier names a class it never saw)."""
    whole = planted.dataset(kinds=("ordinal",) * 3)
    train, test = split.train_test_indices(whole.classes, whole.factor_space)
    return whole.subset(np.sort(np.concatenate([train, test[[0, -1]]])), observe=observe), test[[0, -1]]


def test_a_subset_with_two_held_out_images_gets_n_nll_rendered_from_the_grid():
    subset, _ = subset_with_two_held_out()
    data, asked = recording(subset)
    row = evaluate(model(), data, RIGHT, EvaluationConfig(n_nll=10, n_metric=10, **CHEAP), seed=5)
    rendered = np.concatenate(asked)
    assert len(rendered) == 10 == row["test_nll_images"]
    assert len({tuple(c) for c in rendered}) == 10  # without replacement
    assert np.isin(rendered[:, 0], (3, 4)).all()  # every one a held-out combination
    assert row["n_test_images"] == 2 * 4 * 6  # the pool: the grid's held-out combinations
    assert row["test_nll"] == pytest.approx(closed_form_nll(rendered).mean(), rel=1e-6)
    # another seed, another draw from the same pool
    again, asked_again = recording(subset)
    evaluate(model(), again, RIGHT, EvaluationConfig(n_nll=10, n_metric=10, **CHEAP), seed=6)
    assert {tuple(c) for c in np.concatenate(asked_again)} != {tuple(c) for c in rendered}


def test_a_split_with_fewer_held_out_combinations_than_n_nll_uses_them_all_and_says_so(caplog):
    corner = planted.split()  # a = 4 and b = 3: the 6 combinations of the third factor
    subset, _ = subset_with_two_held_out(corner)
    data, asked = recording(subset)
    with caplog.at_level(logging.WARNING, logger="analysis.evaluation"):
        row = evaluate(model(), data, corner, EvaluationConfig(n_nll=50, n_metric=10, **CHEAP))
    every = np.array([[4, 3, h] for h in range(6)])
    rendered = np.concatenate(asked)
    assert sorted(map(tuple, rendered)) == sorted(map(tuple, every))
    assert row["test_nll_images"] == row["n_test_images"] == 6
    assert row["test_nll"] == pytest.approx(closed_form_nll(every).mean(), rel=1e-6)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "planted_corner" in warned[0] and "has 6 held-out combinations" in warned[0]
    assert "n_nll = 50" in warned[0]


def test_without_observe_the_subsets_own_held_out_rows_are_the_test_images(caplog):
    subset, _ = subset_with_two_held_out(observe=False)
    assert subset.observe is None
    _, test = RIGHT.train_test_indices(subset.classes, subset.factor_space)
    with caplog.at_level(logging.WARNING, logger="analysis.evaluation"):
        row = evaluate(model(), subset, RIGHT, EvaluationConfig(n_nll=10, n_metric=10, **CHEAP))
    assert row["test_nll_images"] == row["n_test_images"] == len(test) == 2
    assert row["test_nll"] == pytest.approx(closed_form_nll(subset.classes[test]).mean(), rel=1e-6)
    assert "has 2 held-out images in the dataset, fewer than n_nll = 10" in caplog.text


def test_the_metrics_read_the_same_rendered_sample_each_image_rendered_once():
    subset, _ = subset_with_two_held_out()
    data, asked = recording(subset)
    config = EvaluationConfig(n_nll=20, n_metric=12, metrics=("encoder_decoder",))
    row = evaluate(model(), data, RIGHT, config, seed=1)
    rendered = np.concatenate(asked)
    # the NLL's 20 and the metrics' 12 are one sample: 20 images rendered, none twice
    assert len(rendered) == 20 == len({tuple(c) for c in rendered}) and np.isin(rendered[:, 0], (3, 4)).all()
    assert row["test_nll"] == pytest.approx(closed_form_nll(rendered).mean(), rel=1e-6)
    # the diagnosis decodes every code to the same logit, so its held-out NLL is the closed form on
    # its held-out images: the first n_metric of the sample, rendered from the grid
    assert row["decoder_nll_test"] == pytest.approx(closed_form_nll(rendered[:12]).mean(), rel=1e-5)
    assert np.isfinite(row["encoder_error_test"])
