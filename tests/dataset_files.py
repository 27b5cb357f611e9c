"""Arrays for the small real-format files that the loader tests write."""

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
