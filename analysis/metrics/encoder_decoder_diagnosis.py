"""Encoder or decoder? Montero et al. (2022)'s question about a failure on held-out combinations.

- The **encoder** fails when a linear readout from codes to the (normalised) factors, fitted on
  training codes, predicts the factors of held-out images clearly worse than those of training
  images it was not fitted on (linear, because it extrapolates: a tree readout could not).
- The **decoder** fails when decoding the codes the held-out images *should* have (the inverse
  linear map, factors → codes, fitted on training codes) scores clearly worse against the true
  images (NLL per image) than the same on training images.

**The verdict** is one rule for both sides (:func:`fails`): a side fails when

    error_test > ratio · error_train + margin,

with ``ratio`` = 1.5, ``margin`` = 0.05 for the encoder (MAE on factors in [0, 1]) and 0 nats for
the decoder. M22 states no threshold: these numbers are disgen's, they are parameters, and
``evaluate`` writes them into every row (``diagnosis_ratio``, ``diagnosis_encoder_margin``,
``diagnosis_decoder_margin``).
"""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import train_test_split

from analysis.metrics._checks import check_pair, check_test_pair
from analysis.metrics.reconstruction_nll import nll_per_image

__all__ = ["encoder_decoder_diagnosis", "fails", "score_encoder_decoder", "RATIO", "ENCODER_MARGIN",
           "DECODER_MARGIN"]

# disgen's thresholds (M22 gives none); see the module docstring
RATIO = 1.5
ENCODER_MARGIN = 0.05
DECODER_MARGIN = 0.0


def fails(error_train, error_test, ratio=RATIO, margin=0.0):
    """The verdict's one formula: ``error_test > ratio * error_train + margin`` (NaN errors: NaN)."""
    if np.isnan(error_train) or np.isnan(error_test):
        return float("nan")
    return float(error_test > ratio * error_train + margin)


def encoder_decoder_diagnosis(codes, factors, codes_test, factors_test, *, decode=None, images=None,
                              images_test=None, factor_ranges=None, ratio=RATIO,
                              encoder_margin=ENCODER_MARGIN, decoder_margin=DECODER_MARGIN,
                              likelihood="bernoulli", holdout_fraction=0.25, random_state=0):
    """Diagnose a failure on held-out combinations. ``codes`` (n_train, n_codes), ``factors``
    (n_train, n_factors): training images' codes and factor values; ``codes_test``,
    ``factors_test``: the held-out images'. For the decoder side give ``decode`` (codes (n, n_codes)
    → pixel probabilities of the images' shape) and ``images``, ``images_test`` (uint8 or [0, 1]) in
    the codes' row order.

    Returns floats: ``encoder_error_train`` / ``encoder_error_test`` (readout MAE on factors in
    [0, 1], the train value on training images left out of the fit), ``decoder_nll_train`` /
    ``decoder_nll_test`` (NLL of decoding the expected codes; NaN without ``decode``), and
    ``encoder_fails`` / ``decoder_fails`` (1.0 or 0.0; NaN when unknown, by :func:`fails` with
    ``ratio`` and the side's margin), plus ``"diagnosis"``, which side fails in words: "encoder",
    "decoder", "both" or "neither". ``likelihood`` scores the decoded images: "bernoulli" (NLL of
    pixel probabilities) or "gaussian" (see ``analysis.metrics.reconstruction_nll``).
    """
    codes, factors = check_pair(codes, factors, min_samples=8, discrete=False)
    codes_test, factors_test = check_test_pair(codes, factors, codes_test, factors_test, discrete=False)
    if codes_test is None:
        raise ValueError("codes_test and factors_test are required: the held-out images' codes and factors.")
    if (decode is None) != (images is None) or (images is None) != (images_test is None):
        raise ValueError("For the decoder side give decode, images and images_test together.")
    if images is not None:
        for name, array, n in (("images", images, codes.shape[0]),
                               ("images_test", images_test, codes_test.shape[0])):
            if np.shape(array)[0] != n:
                raise ValueError(f"{name} must have shape ({n}, ...) to match the codes; "
                                 f"got {np.shape(array)}.")

    everything = np.vstack([factors, factors_test])
    if factor_ranges is None:
        low, high = everything.min(axis=0), everything.max(axis=0)
    else:
        ranges = np.asarray(factor_ranges, dtype=float)
        low, high = ranges[:, 0], ranges[:, 1]
    width = np.where(high > low, high - low, 1.0)
    varying = high > low
    y, y_test = ((factors - low) / width)[:, varying], ((factors_test - low) / width)[:, varying]

    rows = np.arange(codes.shape[0])
    fit_rows, check_rows = train_test_split(rows, test_size=holdout_fraction, random_state=random_state)
    readout = LinearRegression().fit(codes[fit_rows], y[fit_rows])
    encoder_train = float(np.mean(np.abs(readout.predict(codes[check_rows]) - y[check_rows])))
    encoder_test = float(np.mean(np.abs(readout.predict(codes_test) - y_test)))
    encoder_fails = fails(encoder_train, encoder_test, ratio, encoder_margin)

    out = {"encoder_error_train": encoder_train, "encoder_error_test": encoder_test,
           "encoder_fails": encoder_fails}
    if decode is None:
        out.update(decoder_nll_train=float("nan"), decoder_nll_test=float("nan"), decoder_fails=float("nan"))
        out["diagnosis"] = ("encoder fails (decoder not tested)" if encoder_fails
                            else "encoder generalises (decoder not tested)")
        return out

    inverse = LinearRegression().fit(y[fit_rows], codes[fit_rows])
    images = np.asarray(images)
    expected_train = inverse.predict(y[check_rows])
    expected_test = inverse.predict(y_test)
    decoder_train = float(nll_per_image(images[check_rows], np.asarray(decode(expected_train)),
                                        likelihood=likelihood).mean())
    decoder_test = float(nll_per_image(images_test, np.asarray(decode(expected_test)),
                                       likelihood=likelihood).mean())
    decoder_fails = fails(decoder_train, decoder_test, ratio, decoder_margin)
    out.update(decoder_nll_train=decoder_train, decoder_nll_test=decoder_test, decoder_fails=decoder_fails)
    out["diagnosis"] = {
        (True, True): "both",
        (True, False): "encoder",
        (False, True): "decoder",
        (False, False): "neither",
    }[(bool(encoder_fails), bool(decoder_fails))]
    return out


DIAGNOSIS_KEYS = ("encoder_error_train", "encoder_error_test", "decoder_nll_train", "decoder_nll_test",
                  "encoder_fails", "decoder_fails")


def score_encoder_decoder(sample) -> dict:
    """The registry's diagnosis: the distinct training draws (two halves, no row on both sides)
    against the held-out sample, under the model's own likelihood, with the rule's parameters;
    nothing (NaN) where fewer than 8 training draws are distinct."""
    unique = np.unique(sample.rows)
    if len(unique) < 8:
        return {}
    config, dataset = sample.config, sample.dataset
    result = encoder_decoder_diagnosis(
        sample.encode(unique), dataset.classes[unique], sample.held_out_codes, sample.held_out_factors,
        decode=sample.decode, images=dataset.images[unique], images_test=sample.held_out_images,
        factor_ranges=sample.factor_ranges, ratio=config.diagnosis_ratio,
        encoder_margin=config.diagnosis_encoder_margin, decoder_margin=config.diagnosis_decoder_margin,
        likelihood=sample.likelihood, random_state=sample.seed)
    return {**{key: result[key] for key in DIAGNOSIS_KEYS}, "diagnosis_ratio": float(config.diagnosis_ratio),
            "diagnosis_encoder_margin": float(config.diagnosis_encoder_margin),
            "diagnosis_decoder_margin": float(config.diagnosis_decoder_margin)}
