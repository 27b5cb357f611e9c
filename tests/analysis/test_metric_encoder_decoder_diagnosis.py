"""Tests for analysis.metrics.encoder_decoder_diagnosis with synthetic encoders and decoders."""

import itertools
import json
from types import SimpleNamespace

import numpy as np
import pytest

from analysis.metrics.encoder_decoder_diagnosis import (
    ENCODER_MARGIN,
    RATIO,
    encoder_decoder_diagnosis,
    fails,
    judged_factors,
    score_encoder_decoder,
)
from analysis.metrics.registry import METRICS
from data_pipeline.factors import FactorSpace
from data_pipeline.splits.rules import Split

WEIGHTS = np.random.default_rng(0).standard_normal((2, 12))


def data():
    factors = np.array(list(itertools.product(range(8), range(8))), float)
    held_out = (factors[:, 0] >= 6) & (factors[:, 1] >= 6)
    return factors, held_out


def good_decode(codes):
    return 1 / (1 + np.exp(-(codes @ WEIGHTS)))


def images_of(factors):
    return good_decode(factors / 7.0)


def test_a_model_that_generalises_fails_nowhere():
    factors, held_out = data()
    codes = factors / 7.0
    result = encoder_decoder_diagnosis(
        codes[~held_out],
        factors[~held_out],
        codes[held_out],
        factors[held_out],
        decode=good_decode,
        images=images_of(factors[~held_out]),
        images_test=images_of(factors[held_out]),
    )
    assert result["encoder_error_test"] == pytest.approx(0.0, abs=1e-9)
    assert result["diagnosis"] == "neither"


def test_an_encoder_that_collapses_held_out_images_is_blamed():
    factors, held_out = data()
    codes = factors / 7.0
    collapsed = np.zeros_like(codes[held_out])  # the encoder maps every new image to the origin
    result = encoder_decoder_diagnosis(codes[~held_out], factors[~held_out], collapsed, factors[held_out])
    assert result["encoder_fails"] == 1.0
    assert np.isnan(result["decoder_nll_test"]) and "decoder not tested" in result["diagnosis"]


def test_a_decoder_that_cannot_render_new_combinations_is_blamed():
    factors, held_out = data()
    codes = factors / 7.0

    def bad_decode(z):
        out = good_decode(z)
        new = (z[:, 0] > 5.5 / 7) & (z[:, 1] > 5.5 / 7)
        out[new] = 1.0 - out[new]
        return out

    result = encoder_decoder_diagnosis(
        codes[~held_out],
        factors[~held_out],
        codes[held_out],
        factors[held_out],
        decode=bad_decode,
        images=images_of(factors[~held_out]),
        images_test=images_of(factors[held_out]),
    )
    assert result["diagnosis"] == "decoder"
    assert result["decoder_nll_test"] > result["decoder_nll_train"]


def test_decoder_arguments_come_together():
    factors, held_out = data()
    with pytest.raises(ValueError, match="decode, images and images_test together"):
        encoder_decoder_diagnosis(
            factors[~held_out], factors[~held_out], factors[held_out], factors[held_out], decode=good_decode
        )


# -- the encoder judged on the split's own factors, each read in the way of its kind --------------
# A dSprites-like grid (shape, scale, orientation, posX, posY; 3 × 4 × 8 × 8 × 4 = 3,072 images)
# under dSprites' shape2tx rule: squares on the right half held out (512 images), so the rule names
# shape and posX. The planted encoder writes shape one-hot, scale, posX and posY (each normalised)
# into 6 codes with Gaussian noise (σ = 0.1) and leaves orientation out, as dSprites VAEs often do.

DSPRITES_LIKE = FactorSpace(
    ("shape", "scale", "orientation", "posX", "posY"), (3, 4, 8, 8, 4),
    (np.arange(3.0), np.linspace(0.5, 1.0, 4), np.linspace(0, 2 * np.pi, 8, endpoint=False),
     np.linspace(0, 1, 8), np.linspace(0, 1, 4)),
    ("categorical", "ordinal", "circular", "ordinal", "ordinal"),
    (("orientation", "shape", (4, 2, 1)),))
SHAPE2TX = Split("shape2tx", "dsprites_like", "recombination_to_range", {"shape": (0,), "posX": (4, 5, 6, 7)})
SQUARE, ELLIPSE = np.eye(3)[0], np.eye(3)[1]


def dsprites_like(sigma=0.1):
    """Every class tuple, the held-out mask and the planted encoder's codes (columns: one-hot
    shape, scale, posX, posY)."""
    classes = DSPRITES_LIKE.all_classes()
    codes = np.hstack([np.eye(3)[classes[:, 0]], classes[:, [1]] / 3, classes[:, [3]] / 7,
                       classes[:, [4]] / 3])
    codes += sigma * np.random.default_rng(0).standard_normal(codes.shape)
    return classes, SHAPE2TX.test_mask(classes, DSPRITES_LIKE), codes


SHAPE2TX_FACTORS = SHAPE2TX.factor_names(DSPRITES_LIKE)  # ("shape", "posX")


def diagnose(codes_test, factors_judged=SHAPE2TX_FACTORS, **kwargs):
    classes, held_out, codes = dsprites_like()
    return encoder_decoder_diagnosis(codes[~held_out], classes[~held_out], codes_test, classes[held_out],
                                     space=DSPRITES_LIKE, factors_judged=factors_judged, **kwargs)


def squares_read_as_ellipses():
    """Held-out codes where the encoder gives every held-out square the ellipse's code (its
    position still right)."""
    _, held_out, codes = dsprites_like()
    codes_test = codes[held_out].copy()
    codes_test[:, :3] += ELLIPSE - SQUARE
    return codes_test


def test_an_encoder_that_reads_held_out_squares_as_ellipses_fails_where_the_average_let_it_pass():
    result = diagnose(squares_read_as_ellipses())
    assert result["encoder_fails"] == 1.0 and result["diagnosis"].startswith("encoder fails")
    # every held-out square is classified as an ellipse: shape's misclassification rate 0 → 1
    assert result["encoder_errors"]["shape"]["train"] == pytest.approx(0.0, abs=0.01)
    assert result["encoder_errors"]["shape"]["test"] == 1.0
    # The old rule: one linear regression of every factor normalised to [0, 1], MAE averaged over
    # all five. Its per-factor MAEs (train → test) are shape 0.056 → 0.510, scale 0.076 → 0.077,
    # orientation 0.283 → 0.286 (not encoded), posX 0.072 → 0.076, posY 0.075 → 0.078: averages
    # 0.112 → 0.205, under the threshold 1.5 · 0.112 + 0.05 = 0.219, so the encoder "held".
    every = encoder_decoder_diagnosis(*_old_rule_arrays(squares_read_as_ellipses()))["encoder_errors"]
    old_train = np.mean([e["train"] for e in every.values()])
    old_test = np.mean([e["test"] for e in every.values()])
    assert old_train == pytest.approx(0.112, abs=0.002) and old_test == pytest.approx(0.205, abs=0.002)
    assert fails(old_train, old_test, RATIO, ENCODER_MARGIN) == 0.0


def _old_rule_arrays(codes_test):
    """The old rule's inputs: no space (every factor ordinal), every factor read."""
    classes, held_out, codes = dsprites_like()
    return codes[~held_out], classes[~held_out], codes_test, classes[held_out]


def test_an_encoder_that_places_held_out_combinations_right_holds():
    _, held_out, codes = dsprites_like()
    result = diagnose(codes[held_out])
    assert result["encoder_fails"] == 0.0
    assert all(e["fails"] == 0.0 for e in result["encoder_errors"].values())
    assert result["encoder_errors"]["shape"]["test"] == pytest.approx(0.0, abs=0.01)


def test_a_factor_the_split_does_not_name_is_not_judged():
    _, held_out, codes = dsprites_like()
    codes_test = codes[held_out].copy()
    codes_test[:, 5] = 0.0  # every held-out image read at the top row: posY collapses
    result = diagnose(codes_test)
    assert set(result["encoder_errors"]) == {"shape", "posX"}
    assert result["encoder_fails"] == 0.0
    # the same codes judged on every factor: posY's MAE (0.075 on training images, 0.49 held out) fails
    every = diagnose(codes_test, factors_judged=None)
    assert every["encoder_fails"] == 1.0 and every["encoder_factor"] == "posY"


def test_the_decisive_factor_and_every_judged_factors_errors_are_recorded():
    result = diagnose(squares_read_as_ellipses())
    errors = result["encoder_errors"]
    assert {name: e["kind"] for name, e in errors.items()} == {"shape": "categorical", "posX": "ordinal"}
    assert result["encoder_factor"] == "shape"
    assert (result["encoder_error_train"], result["encoder_error_test"]) == (errors["shape"]["train"],
                                                                             errors["shape"]["test"])
    assert errors["shape"]["fails"] == 1.0 and errors["posX"]["fails"] == 0.0
    assert errors["posX"]["test"] == pytest.approx(errors["posX"]["train"], abs=0.02)
    # findings' excess, test − (ratio · train + margin), computed from the two columns, is the
    # decisive factor's, the largest of the judged factors'
    excess = {name: e["test"] - (RATIO * e["train"] + ENCODER_MARGIN) for name, e in errors.items()}
    assert result["encoder_error_test"] - (RATIO * result["encoder_error_train"] + ENCODER_MARGIN) \
        == pytest.approx(max(excess.values()))


def test_a_circular_factor_is_read_as_its_angle_modulo_its_symmetry():
    classes, _, _ = dsprites_like()
    angle = np.atleast_2d(DSPRITES_LIKE.readout_targets(classes, "orientation"))  # (cos kθ, sin kθ)
    codes = np.hstack([np.eye(3)[classes[:, 0]], angle])
    held_out = classes[:, 2] == 3  # one orientation never seen in training
    reads = encoder_decoder_diagnosis(codes[~held_out], classes[~held_out], codes[held_out],
                                      classes[held_out], space=DSPRITES_LIKE, factors_judged=("orientation",))
    assert reads["encoder_errors"]["orientation"]["kind"] == "circular"
    assert reads["encoder_error_train"] == pytest.approx(0.0, abs=1e-9)
    assert reads["encoder_error_test"] == pytest.approx(0.0, abs=1e-9) and reads["encoder_fails"] == 0.0
    flipped = codes[held_out].copy()
    flipped[:, 3:] *= -1  # held-out images read half a symmetric turn off: error 1
    blind = encoder_decoder_diagnosis(codes[~held_out], classes[~held_out], flipped, classes[held_out],
                                      space=DSPRITES_LIKE, factors_judged=("orientation",))
    assert blind["encoder_error_test"] == pytest.approx(1.0) and blind["encoder_fails"] == 1.0


def test_a_class_never_seen_in_training_is_not_judged_by_the_classifier():
    classes, _, codes = dsprites_like()
    held_out = classes[:, 0] == 2  # every heart held out: no classifier fitted on training codes names it
    result = encoder_decoder_diagnosis(codes[~held_out], classes[~held_out], codes[held_out],
                                       classes[held_out], space=DSPRITES_LIKE, factors_judged=("shape",))
    assert result["encoder_errors"]["shape"]["n_test"] == 0
    assert np.isnan(result["encoder_fails"]) and result["encoder_factor"] is None


def test_the_split_names_the_judged_factors_and_every_factor_where_it_names_none():
    assert judged_factors(SHAPE2TX, DSPRITES_LIKE) == ("shape", "posX")
    elsewhere = Split("other", "x", "recombination_to_element", {"hue": (1,)})  # no factor of the space
    assert judged_factors(elsewhere, DSPRITES_LIKE) is None
    assert judged_factors(object(), DSPRITES_LIKE) is None


def test_the_registry_metric_judges_the_splits_factors_and_writes_the_errors_as_json():
    classes, held_out, codes = dsprites_like()
    weights = np.random.default_rng(1).standard_normal((6, 16))
    images = 1 / (1 + np.exp(-(codes @ weights)))
    train_rows, test_rows = np.flatnonzero(~held_out), np.flatnonzero(held_out)
    bad = codes.copy()
    bad[test_rows, :3] += ELLIPSE - SQUARE
    sample = SimpleNamespace(
        rows=train_rows, dataset=SimpleNamespace(classes=classes, images=images),
        encode=lambda rows: bad[rows],
        held_out_images=images[test_rows], held_out_codes=bad[test_rows], held_out_factors=classes[test_rows],
        decode=lambda z: 1 / (1 + np.exp(-(z @ weights))), space=DSPRITES_LIKE, split=SHAPE2TX,
        factor_ranges=np.stack([np.zeros(5), np.asarray(DSPRITES_LIKE.sizes) - 1.0], axis=1),
        likelihood="bernoulli", seed=0,
        config=SimpleNamespace(diagnosis_ratio=RATIO, diagnosis_encoder_margin=ENCODER_MARGIN,
                               diagnosis_decoder_margin=0.0))
    row = score_encoder_decoder(sample)
    assert row["encoder_factor"] == "shape" and row["encoder_fails"] == 1.0
    errors = json.loads(row["encoder_errors"])
    assert set(errors) == {"shape", "posX"} and errors["shape"]["test"] == 1.0
    assert set(row) <= {c.name for c in METRICS["encoder_decoder"].columns}


# -- the decoder side: categorical factors one-hot in the inverse map factors → codes --------------


def test_the_inverse_map_gives_an_unseen_combination_its_codes_when_they_are_linear_in_one_hot_shape():
    classes = DSPRITES_LIKE.all_classes()
    rng = np.random.default_rng(2)
    shape_codes, position_code = rng.standard_normal((3, 6)), rng.standard_normal(6)
    codes = np.eye(3)[classes[:, 0]] @ shape_codes + (classes[:, [3]] / 7) * position_code  # no noise
    held_out = SHAPE2TX.test_mask(classes, DSPRITES_LIKE)
    weights = rng.standard_normal((6, 16))
    decoded = []

    def decode(z):
        decoded.append(z)
        return 1 / (1 + np.exp(-(z @ weights)))

    result = encoder_decoder_diagnosis(
        codes[~held_out], classes[~held_out], codes[held_out], classes[held_out], space=DSPRITES_LIKE,
        factors_judged=("shape", "posX"), decode=decode, images=decode(codes[~held_out]),
        images_test=decode(codes[held_out]))
    # the held-out squares on the right get exactly their codes (a class number as the input
    # instead, as before, puts each shape's codes on one line through the three: the held-out
    # squares' expected codes are then off by 0.42 on average and up to 1.16)
    np.testing.assert_allclose(decoded[-1], codes[held_out], atol=1e-8)
    assert result["decoder_fails"] == 0.0
