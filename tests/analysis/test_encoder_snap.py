"""M22's encoder snap test (analysis.metrics.encoder_decoder_diagnosis.snap_counts) on Circles
``midpos`` (a 10 × 10 hole in the 32 × 32 positions): an encoder whose codes are the factor values
snapped to the nearest position seen in training is nearer the snap on every held-out image; an
exact encoder is nearer the truth on every one."""

import numpy as np
import planted

from analysis.evaluation import EvaluationConfig, evaluate
from analysis.metrics.encoder_decoder_diagnosis import encoder_decoder_diagnosis
from data_pipeline import get_split
from data_pipeline.datasets import factor_space
from data_pipeline.splits.rules import Split

SPACE = factor_space("circles")
MIDPOS = get_split("circles", "midpos")


def snapped(classes: np.ndarray) -> np.ndarray:
    """Each held-out position moved to the nearest position seen in training (Euclidean, on the
    grid), the failure M22 describes; a seen position stays."""
    grid = SPACE.all_classes()
    seen = grid[MIDPOS.train_mask(grid, SPACE)]
    out = classes.copy()
    for i, c in enumerate(classes):
        if not MIDPOS.train_mask(c[None], SPACE)[0]:
            out[i] = seen[np.argmin(((seen - c) ** 2).sum(1))]
    return out


def diagnose(encoder):
    grid = SPACE.all_classes()
    train, test = grid[MIDPOS.train_mask(grid, SPACE)], grid[MIDPOS.test_mask(grid, SPACE)]
    codes = lambda classes: SPACE.normalised(encoder(classes))  # noqa: E731
    return encoder_decoder_diagnosis(codes(train), train, codes(test), test, space=SPACE,
                                     factors_judged=MIDPOS.factor_names(SPACE),
                                     seen=lambda classes: MIDPOS.train_mask(classes, SPACE)), len(test)


def test_an_encoder_that_snaps_is_nearer_the_snap_on_every_held_out_image():
    result, n = diagnose(snapped)
    assert result["encoder_snap_images"] == n == 100
    assert result["encoder_nearer_snap"] == n and result["encoder_nearer_truth"] == 0


def test_an_exact_encoder_is_nearer_the_truth_on_every_held_out_image():
    result, n = diagnose(lambda classes: classes)
    assert result["encoder_nearer_truth"] == n and result["encoder_nearer_snap"] == 0


def test_evaluate_writes_the_snap_counts_with_the_diagnosis():
    whole = planted.dataset(kinds=("ordinal",) * 3)
    right = Split("planted_right", "planted", "extrapolation", {"a": (3, 4)})
    model = planted.PlantedModel(planted.factors_as_codes, 3, likelihood="bernoulli", logit=0.7)
    row = evaluate(model, whole, right, EvaluationConfig(n_nll=20, n_metric=60, metrics=("encoder_decoder",)))
    # a is read exactly (codes = classes): 20 held-out images drawn, each nearer its true a
    assert row["encoder_snap_images"] == min(60, 2 * 4 * 6) == row["encoder_nearer_truth"]
    assert row["encoder_nearer_snap"] == 0
