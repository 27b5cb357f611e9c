"""Arrays for the small real-format files that the loader tests write, the tiny image set that the
training tests train on, with the settings each objective trains on it with, and a real Circles
file with a grid that trains on it."""

from __future__ import annotations

import numpy as np

from data_pipeline import factor_space, render
from data_pipeline.spaces import sprite_space


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


# A real Circles file (M22's npz format) on a 6 × 6 grid: 36 images, of which midpos holds out the
# 2 × 2 centre; and a one-trial grid that trains on it (the tests of real files, planned and swept).
CIRCLES_SIZES = (6, 6)
CIRCLES_GRID = """
description: Circles from its real file
fixed: {dataset: circles, architecture: burgess, objective: beta_vae, n_images: null, data_seed: 0,
        batch_size: 8, report_every: 2, n_nll: 16, n_metric: 32, dci_estimator: none}
axes:
  beta: [1.0]
  split: [midpos]
scales:
  tiny: {steps: 4, lr: 0.001}
"""


def write_circles(folder, order_seed=0):
    """circles.npz in M22's format, its rows shuffled (a real file need not be in grid order)."""
    space = sprite_space(("posX", "posY"), CIRCLES_SIZES)
    classes = space.all_classes()[np.random.default_rng(order_seed).permutation(space.n_images)]
    images = render("circles", classes, space)
    np.savez(folder / "circles.npz", images=images // 255, factor_values=space.raw_values(classes),
             factor_sizes=np.array(CIRCLES_SIZES))
    return space, classes
