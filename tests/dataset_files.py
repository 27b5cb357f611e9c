"""Arrays for the small real-format files that the loader tests write, and the tiny image set that
the training tests train on, with the settings each objective trains on it with."""

from __future__ import annotations

import numpy as np

from data_pipeline import factor_space, render


def dsprites_arrays(n: int, seed: int = 0):
    """``n`` distinct dSprites grid points, rendered, as the published npz holds them: (imgs,
    latents_classes, latents_values, classes), the latents with the constant colour column first."""
    space = factor_space("dsprites")
    classes = space.classes_of(np.sort(np.random.default_rng(seed).choice(space.n_images, n, replace=False)))
    latents_classes = np.concatenate([np.zeros((n, 1), np.int64), classes], axis=1)
    latents_values = np.concatenate([np.ones((n, 1)), space.raw_values(classes)], axis=1)
    return render("dsprites", classes), latents_classes, latents_values, classes


def blobs(n=256, seed=0, channels=1):
    """Tiny binary images: a 12×12 square at one of 4×4 positions; factors are the (x, y) classes."""
    rng = np.random.default_rng(seed)
    factors = rng.integers(0, 4, size=(n, 2))
    images = np.zeros((n, channels, 64, 64), np.uint8)
    for i, (x, y) in enumerate(factors * 12 + 4):
        images[i, :, y : y + 12, x : x + 12] = 255
    return images, factors


# The settings each registered objective trains on ``blobs`` with (objective-specific ones only).
OBJECTIVE_SETTINGS = {
    "vae": {},
    "beta_vae": {"beta": 4.0},
    "annealed_vae": {"gamma": 5.0, "capacity_max": 10.0, "capacity_steps": 40},
    "factor_vae": {"gamma": 10.0},
    "beta_tcvae": {"beta": 4.0},
    "wae_mmd": {},
    "ada_gvae": {"beta": 2.0},
    "wae_gan": {"adversary_width": 64},
    "cascade_vae": {"latent_dim": 6, "cascade_steps": 10, "discrete_categories": 2},
    "lie_group_vae": {},
    "dip_vae": {"gamma": 2.0},
}
