"""The in-distribution control's images (data_pipeline.in_distribution): training combinations of
the split that the trial never trained on, checked by index sets; and its NLL in ``evaluate``,
against the planted model's closed form (tests/planted.py)."""

import dataclasses

import numpy as np
import planted
import pytest

from analysis.evaluation import EvaluationConfig, evaluate
from data_pipeline.factors import FactorSpace
from data_pipeline.in_distribution import (
    HOLD_BACK_SHARE,
    held_back_mask,
    holds_back,
    in_distribution_pool,
    training_rows,
)
from data_pipeline.splits.rules import Split

RIGHT = Split("planted_right", "planted", "extrapolation", {"a": (3, 4)})
LOGIT = 0.7


def closed_form_nll(classes) -> np.ndarray:
    """The planted model's Bernoulli NLL of the planted images of ``classes`` (a constant logit)."""
    on = np.asarray(classes).sum(axis=1) / 255 + 1
    return 16 * np.logaddexp(0, LOGIT) - LOGIT * on


def index_set(classes, space) -> set:
    return set(space.index_of(classes).tolist())


def test_a_whole_grid_holds_back_about_two_percent_of_its_training_combinations_apart_from_everything():
    space = FactorSpace(("a", "b", "c"), (40, 40, 40), tuple(np.arange(40.0) for _ in range(3)))
    split = Split("left", "planted", "extrapolation", {"a": tuple(range(30, 40))})
    data = planted.dataset(space=space)
    assert holds_back(data, split)
    train, back, test = training_rows(data, split, data_seed=3)
    full_train, full_test = split.train_test_indices(data.classes, space)
    assert np.array_equal(test, full_test)
    # the held-back rows and the training rows partition the split's training part
    assert not set(back) & set(train) and set(back) | set(train) == set(full_train)
    assert not set(back) & set(test)
    assert abs(len(back) / len(full_train) - HOLD_BACK_SHARE) < 0.003
    # deterministic by data_seed: the same seed the same slice, another seed another
    assert np.array_equal(training_rows(data, split, 3)[1], back)
    assert len(set(training_rows(data, split, 4)[1]) ^ set(back)) > len(back)
    # a combination is held back whatever rows it is in: the mask is a function of the grid point
    assert np.array_equal(held_back_mask(data.classes[back[::-1]], space, 3), np.ones(len(back), bool))
    assert in_distribution_pool(data, split, 3)[0] == "rows"
    assert np.array_equal(in_distribution_pool(data, split, 3)[1], back)


def test_a_subset_takes_its_control_from_grid_points_outside_it_and_trains_on_every_training_row():
    whole = planted.dataset()
    space = whole.factor_space
    rows = np.random.default_rng(0).choice(len(whole.classes), 60, replace=False)
    subset = whole.subset(np.sort(rows), observe=True)
    assert not holds_back(subset, RIGHT)
    train, back, test = training_rows(subset, RIGHT, data_seed=0)
    assert len(back) == 0
    assert np.array_equal(train, RIGHT.train_test_indices(subset.classes, space)[0])
    source, pool = in_distribution_pool(subset, RIGHT, 0)
    assert source == "grid"
    grid_training = set(np.flatnonzero(RIGHT.train_mask(space.all_classes(), space)).tolist())
    assert set(pool.tolist()) == grid_training - index_set(subset.classes, space)
    assert not set(pool.tolist()) & set(RIGHT.test_grid_indices(space).tolist())


def test_without_observe_a_subset_holds_back_its_own_training_rows():
    whole = planted.dataset()
    subset = whole.subset(np.arange(0, len(whole.classes), 2), observe=False)
    assert holds_back(subset, RIGHT)
    assert in_distribution_pool(subset, RIGHT, 0)[0] == "rows"


def recording(data):
    asked = []

    def observe(classes):
        asked.append(np.array(classes))
        return data.observe(classes)

    return dataclasses.replace(data, observe=observe), asked


def model():
    return planted.PlantedModel(planted.factors_as_codes, 3, likelihood="bernoulli", logit=LOGIT)


CHEAP = dict(dci_estimator="none")


def test_the_nll_of_a_subset_is_the_closed_form_on_rendered_training_combinations_outside_it():
    whole = planted.dataset()
    space = whole.factor_space
    subset = whole.subset(np.sort(np.random.default_rng(1).choice(len(whole.classes), 60, replace=False)),
                          observe=True)
    data, asked = recording(subset)
    row = evaluate(model(), data, RIGHT, EvaluationConfig(n_nll=8, n_metric=10, **CHEAP), seed=2)
    # what was rendered: the held-out sample (8) and the in-distribution sample (8)
    rendered = [a for a in asked if RIGHT.train_mask(a, space).all()]
    assert len(rendered) == 1 and len(rendered[0]) == 8 == row["in_distribution_nll_images"]
    classes = rendered[0]
    assert not index_set(classes, space) & index_set(subset.classes, space)  # never a training image
    assert row["in_distribution_nll"] == pytest.approx(closed_form_nll(classes).mean(), rel=1e-6)
    assert row["in_distribution_source"] == "grid points outside the subset"


@pytest.mark.parametrize("task", ["vae", "ground_truth_decoder"])
def test_on_a_whole_grid_the_nll_is_over_the_held_back_rows(task):
    whole = planted.dataset(sizes=(20, 10, 6), names=("a", "b", "object_hue"))
    split = Split("right", "planted", "extrapolation", {"a": (18, 19)})
    _, back, _ = training_rows(whole, split, 5)
    assert len(back) >= 5
    config = EvaluationConfig(n_nll=len(back) + 10, n_metric=10, **CHEAP)
    if task == "vae":
        row = evaluate(model(), whole, split, config, data_seed=5)
        expected = closed_form_nll(whole.classes[back]).mean()
    else:
        import torch

        decoder = _TinyDecoder()
        row = evaluate(decoder, whole, split, config, data_seed=5)
        values = torch.as_tensor(whole.factor_space.raw_values(whole.classes[back]), dtype=torch.float32)
        with torch.no_grad():
            logits = decoder(values).numpy().reshape(len(back), -1)
        x = whole.images[back].reshape(len(back), -1) / 255.0
        expected = (np.logaddexp(0, logits) - x * logits).sum(1).mean()  # independent of bernoulli_nll
    assert row["in_distribution_nll_images"] == len(back)
    assert row["in_distribution_source"] == "held back from training"
    assert row["in_distribution_nll"] == pytest.approx(expected, rel=1e-5)
    trained = split.train_test_indices(whole.classes, whole.factor_space)[0]
    assert row["n_train_images"] == len(trained) - len(back)


def _TinyDecoder():
    """A ground-truth decoder of the planted 1 × 4 × 4 images: a linear map of the factor values to
    the 16 logits (a GroundTruthDecoder with its network replaced, so evaluate takes its path)."""
    import torch

    from models.ground_truth import GroundTruthDecoder

    decoder = GroundTruthDecoder(3, architecture="higgins", channels=1, image_size=64)
    torch.manual_seed(0)
    linear = torch.nn.Linear(3, 16)
    decoder.decoder = torch.nn.Sequential(linear, torch.nn.Unflatten(1, (1, 4, 4)))
    return decoder
