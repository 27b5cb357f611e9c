"""D21's transfer scenarios on its own data: OOD1 ordered by the robot-finger colours' HSV hue (not
their class numbers), and OOD2-A / OOD2-B on datasets of their own, tested with the regressors
fitted once on the training codes."""

from __future__ import annotations

import colorsys

import numpy as np
import pytest

from analysis.evaluation import evaluate
from analysis.metrics.registry import METRICS, EvaluationConfig
from analysis.metrics.transfer_score import ood1_scenarios, readout_mae, transfer_score
from data_pipeline.robot_finger import TRAINING_COLOURS
from data_pipeline.spaces import class_order


def test_finger_colours_are_ordered_by_hsv_hue_so_ood1_b_trains_on_the_four_high_hues():
    hues = class_order("finger", "colour")
    assert np.allclose(hues, [colorsys.rgb_to_hsv(*rgb)[0] for rgb in TRAINING_COLOURS])
    classes = np.repeat(np.arange(8), 3)
    scenarios = ood1_scenarios(hues[classes])
    trained = {name: set(classes[train]) for name, (train, _) in scenarios.items()}
    tested = {name: set(classes[test]) for name, (_, test) in scenarios.items()}
    assert trained["ood1_a"] == {0} and tested["ood1_a"] == set(range(1, 8))  # red, as D21
    # hues 0.58, 0.75, 0.83, 0.92 ((0,.5,1), (.5,0,1), (1,0,1), (1,0,.5)) against 0, 0.33, 0.42, 0.5
    assert trained["ood1_b"] == {1, 2, 3, 4} and tested["ood1_b"] == {0, 5, 6, 7}
    assert trained["ood1_c"] == {0, 2, 4, 6} and tested["ood1_c"] == {1, 3, 5, 7}  # alternate along hue
    assert class_order("shapes3d", "object_hue") is None  # classes already in hue order


@pytest.fixture
def arrays():
    rng = np.random.default_rng(0)
    factors = np.stack([np.zeros(160, int), rng.integers(0, 8, 160), rng.integers(0, 5, 160),
                        rng.integers(0, 6, 160)], axis=1)
    codes = factors[:, 1:] + rng.normal(0, 0.3, (160, 3))
    sets = {}
    for k, name in enumerate(("ood2_a", "ood2_b")):
        f = np.stack([np.zeros(40, int), rng.integers(0, 4, 40), rng.integers(0, 5, 40),
                      rng.integers(0, 6, 40)], axis=1)
        sets[name] = (f[:, 1:] + rng.normal(0.5 * k, 0.3, (40, 3)), f)
    ranges = np.array([[0, 0], [0, 7], [0, 4], [0, 5]], float)
    return codes, factors, sets, ranges


def test_ood2_sets_score_as_independent_readouts_leaving_out_the_ood_factor(arrays):
    codes, factors, sets, ranges = arrays
    out = transfer_score(codes, factors, ood_factor=1, regressors=("gbt",), factor_ranges=ranges,
                         ood2_sets=sets, random_state=3)
    keep = [2, 3]  # not the constant factor 0, not the OOD factor 1 (another set's colours)
    for name, (set_codes, set_factors) in sets.items():
        expected = readout_mae(codes, factors[:, keep] / ranges[keep, 1], set_codes,
                               set_factors[:, keep] / ranges[keep, 1], regressor="gbt", random_state=3)
        assert out[f"transfer_gbt_{name}"] == pytest.approx(expected.mean())
    assert out["transfer_gbt_ood2_a"] != out["transfer_gbt_ood2_b"]


def test_ood1_values_order_the_scenarios_as_relabelled_classes_do(arrays):
    codes, factors, _, ranges = arrays
    hues = class_order("finger", "colour")
    relabelled = factors.copy()
    relabelled[:, 1] = np.argsort(np.argsort(hues))[factors[:, 1]]  # each class's rank by hue
    by_hue = transfer_score(codes, factors, ood_factor=1, regressors=("gbt",), factor_ranges=ranges,
                            ood1_values=hues[factors[:, 1]])
    by_rank = transfer_score(codes, relabelled, ood_factor=1, regressors=("gbt",), factor_ranges=ranges)
    by_class = transfer_score(codes, factors, ood_factor=1, regressors=("gbt",), factor_ranges=ranges)
    for scenario in ("ood1_a", "ood1_b", "ood1_c"):
        assert by_hue[f"transfer_gbt_{scenario}"] == pytest.approx(by_rank[f"transfer_gbt_{scenario}"])
    assert by_hue["transfer_gbt_ood1_b"] != pytest.approx(by_class["transfer_gbt_ood1_b"])


def test_the_registry_declares_the_ood2_set_columns_and_the_config_names_the_sets():
    columns = {c.name for c in METRICS["transfer"].columns}
    assert {f"transfer_{r}_{s}" for r in ("gbt", "mlp") for s in ("ood2", "ood2_a", "ood2_b")} <= columns
    config = EvaluationConfig(ood2_a_dataset="finger_heldout_colors", ood2_b_dataset="finger_real")
    assert config.ood2_datasets == {"ood2_a": "finger_heldout_colors", "ood2_b": "finger_real"}
    with pytest.raises(ValueError, match="ood2_b_dataset"):
        EvaluationConfig(ood2_b_dataset="")


def test_evaluate_refuses_a_config_naming_ood2_sets_it_was_not_given():
    config = EvaluationConfig(ood2_a_dataset="finger_heldout_colors")
    with pytest.raises(ValueError, match="ood2_sets: the config names"):
        evaluate(object(), None, None, config)
    with pytest.raises(ValueError, match="ood2_sets"):
        evaluate(object(), None, None, EvaluationConfig(), ood2_sets={"ood2_a": None})
