"""Random binary images for the models' tests that train on noise (the trainer interface, packs)."""

import numpy as np


def random_images(n_images: int) -> tuple[np.ndarray, np.ndarray]:
    """(images, factors): ``n_images`` random binary 64×64 images, one channel, and 4 factor classes
    (0-2) for each; the same draw (seed 0) every time."""
    rng = np.random.default_rng(0)
    images = ((rng.random((n_images, 1, 64, 64)) > 0.7) * 255).astype(np.uint8)
    factors = rng.integers(0, 3, (n_images, 4))
    return images, factors
