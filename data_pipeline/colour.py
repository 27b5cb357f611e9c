"""Colour helpers shared by the RGB generators."""

from __future__ import annotations

import numpy as np


def hsv_to_rgb(hue: np.ndarray, saturation: float = 1.0, value: float = 1.0) -> np.ndarray:
    """RGB in [0, 1] of hues in [0, 1) at the given saturation and value; shape (..., 3)."""
    hue = np.asarray(hue, dtype=np.float64) % 1.0
    h6 = hue * 6.0
    sector = np.floor(h6).astype(np.int64) % 6
    f = h6 - np.floor(h6)
    p = value * (1.0 - saturation)
    q = value * (1.0 - saturation * f)
    t = value * (1.0 - saturation * (1.0 - f))
    v = np.full_like(hue, value)
    p = np.full_like(hue, p)
    table = np.stack([
        np.stack([v, t, p], -1), np.stack([q, v, p], -1), np.stack([p, v, t], -1),
        np.stack([p, q, v], -1), np.stack([t, p, v], -1), np.stack([v, p, q], -1),
    ], axis=0)
    return np.take_along_axis(table, sector[None, ..., None].repeat(3, -1), axis=0)[0]


def to_uint8(image: np.ndarray) -> np.ndarray:
    """Float image in [0, 1] to uint8 0..255, rounding half up (deterministic)."""
    return np.floor(np.clip(image, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
