"""Tests for analysis.metrics.reconstruction_nll: closed forms of the Bernoulli NLL."""

import math

import numpy as np
import pytest

from analysis.metrics.reconstruction_nll import bernoulli_nll_per_image, reconstruction_nll


def test_half_probabilities_cost_ln2_per_pixel():
    images = np.random.default_rng(0).integers(0, 2, (3, 1, 4, 4)).astype(np.uint8) * 255
    result = reconstruction_nll(images, np.full(images.shape, 0.5))
    assert result["nll"] == pytest.approx(16 * math.log(2))
    assert result["nll_std"] == pytest.approx(0.0) and result["n_images"] == 3.0


def test_perfect_binary_reconstruction_costs_almost_nothing():
    images = np.random.default_rng(1).integers(0, 2, (2, 1, 3, 3)).astype(float)
    assert reconstruction_nll(images, images)["nll"] < 1e-5


def test_logits_match_probabilities():
    rng = np.random.default_rng(2)
    images = rng.random((4, 1, 5, 5))
    logits = rng.standard_normal(images.shape)
    expected = bernoulli_nll_per_image(images, 1 / (1 + np.exp(-logits)))
    np.testing.assert_allclose(bernoulli_nll_per_image(images, logits=logits), expected, rtol=1e-6)


def test_uint8_images_are_scaled():
    images = np.full((1, 1, 2, 2), 255, np.uint8)
    assert reconstruction_nll(images, np.full((1, 1, 2, 2), math.exp(-1)))["nll"] == pytest.approx(4.0)


@pytest.mark.parametrize(
    ("images", "probabilities", "message"),
    [
        (np.zeros((2, 4)), np.zeros((3, 4)), r"probabilities must have the shape of images, \(2, 4\)"),
        (np.zeros((2, 4)), np.full((2, 4), 1.5), "probabilities must lie in"),
        (np.full((2, 4), np.nan), np.zeros((2, 4)), "images contains NaN"),
        (np.zeros((0, 4)), np.zeros((0, 4)), r"n_images >= 1"),
    ],
)
def test_bad_input(images, probabilities, message):
    with pytest.raises(ValueError, match=message):
        reconstruction_nll(images, probabilities)
