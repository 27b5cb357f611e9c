"""Image tiles: a row of originals above a row of their reconstructions, as one image array.

Only numpy, so that a training worker can draw the tiles for TensorBoard without importing
matplotlib, pandas or scipy (the figures module's imports cost seconds in every new worker).
"""

from __future__ import annotations

import numpy as np


def reconstruction_grid(originals: np.ndarray, reconstructions: np.ndarray) -> np.ndarray:
    """Originals (top row) above their reconstructions (bottom row), as one (C, H, W) float image
    in [0, 1] with a 2-pixel grey border between tiles. Inputs: (N, C, H, W), uint8 or float."""
    def as_float(a):
        a = np.asarray(a)
        return a.astype(np.float32) / 255.0 if a.dtype == np.uint8 else a.astype(np.float32)

    rows = [as_float(originals), as_float(reconstructions)]
    n, c, h, w = rows[0].shape
    pad = 2
    grid = np.full((c, 2 * h + 3 * pad, n * w + (n + 1) * pad), 0.5, np.float32)
    for r, images in enumerate(rows):
        for i, image in enumerate(images):
            top, left = pad + r * (h + pad), pad + i * (w + pad)
            grid[:, top:top + h, left:left + w] = image
    return grid
