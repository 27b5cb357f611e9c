"""Fixtures of the models' tests."""

import numpy as np
import pytest


@pytest.fixture(scope="module")
def data(request):
    """(images, factors): the test module's ``N_IMAGES`` random binary 64×64 images, one channel,
    and 4 factor classes (0-2) for each; the same draw (seed 0) in every module."""
    rng = np.random.default_rng(0)
    n_images = request.module.N_IMAGES
    images = ((rng.random((n_images, 1, 64, 64)) > 0.7) * 255).astype(np.uint8)
    factors = rng.integers(0, 3, (n_images, 4))
    return images, factors
