"""Tests for analysis.metrics.encoder_decoder_diagnosis with synthetic encoders and decoders."""

import itertools

import numpy as np
import pytest

from analysis.metrics.encoder_decoder_diagnosis import encoder_decoder_diagnosis

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
