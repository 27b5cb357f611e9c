"""Generators for M22's Circles, Simple and TwoShapes: flat sprites on black, 64×64.

* Circles: one white disc at (posX, posY); greyscale (N, 64, 64), 0 or 255.
* Simple: one white square or circle (shape 0, 1; M22's two shapes) at (posX, posY); greyscale.
* TwoShapes: two objects, each a square or circle (shape 0, 1) in hue ``class / n_hues``, at its
  own position; RGB (N, 64, 64, 3). Object 2 is drawn over object 1.

A position class ``c`` of ``n`` maps to the pixel centre ``10 + 44 * c / (n - 1)``, so every grid
size fits in the frame. A pixel is on when its centre lies inside the outline.
"""

from __future__ import annotations

import numpy as np

from data_pipeline.colour import hsv_to_rgb, to_uint8
from data_pipeline.factors import FactorSpace

GENERATOR_VERSION = 1
IMAGE_SIZE = 64
_HALF = 6.0  # half-size of a sprite in pixels


def _centre(classes: np.ndarray, size: int) -> np.ndarray:
    return 10.0 + 44.0 * classes / max(size - 1, 1)


def _inside(shape: np.ndarray, dx: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """(N, H, W) mask of shapes 0 square / 1 circle / 2 triangle centred at the origin."""
    shape = shape[:, None, None]
    square = (np.abs(dx) <= _HALF - 1) & (np.abs(dy) <= _HALF - 1)
    circle = dx ** 2 + dy ** 2 <= _HALF ** 2
    triangle = (dy <= _HALF - 1) & (dy >= -_HALF) & (np.abs(dx) <= (dy + _HALF) * 0.55)
    return np.where(shape == 0, square, np.where(shape == 1, circle, triangle))


def _grid():
    centres = np.arange(IMAGE_SIZE) + 0.5
    x, y = np.meshgrid(centres, centres)
    return x[None], y[None]


def render_circles(classes: np.ndarray, space: FactorSpace) -> np.ndarray:
    """Circles: (N, 64, 64) uint8, 0 or 255."""
    classes = space.check_classes(classes)
    x, y = _grid()
    cx = _centre(classes[:, 0], space.sizes[0])[:, None, None]
    cy = _centre(classes[:, 1], space.sizes[1])[:, None, None]
    on = _inside(np.ones(len(classes), dtype=np.int64), x - cx, y - cy)
    return on.astype(np.uint8) * np.uint8(255)


def render_simple(classes: np.ndarray, space: FactorSpace) -> np.ndarray:
    """Simple: (N, 64, 64) uint8, 0 or 255."""
    classes = space.check_classes(classes)
    x, y = _grid()
    cx = _centre(classes[:, 0], space.sizes[0])[:, None, None]
    cy = _centre(classes[:, 1], space.sizes[1])[:, None, None]
    on = _inside(classes[:, 2], x - cx, y - cy)
    return on.astype(np.uint8) * np.uint8(255)


def render_twoshapes(classes: np.ndarray, space: FactorSpace) -> np.ndarray:
    """TwoShapes: (N, 64, 64, 3) uint8."""
    classes = space.check_classes(classes)
    x, y = _grid()
    image = np.zeros((len(classes), IMAGE_SIZE, IMAGE_SIZE, 3))
    for offset in (0, 4):
        px, py, shape, hue = (classes[:, offset + k] for k in range(4))
        cx = _centre(px, space.sizes[offset])[:, None, None]
        cy = _centre(py, space.sizes[offset + 1])[:, None, None]
        on = _inside(shape, x - cx, y - cy)
        rgb = hsv_to_rgb(hue / space.sizes[offset + 3])
        image = np.where(on[..., None], rgb[:, None, None, :], image)
    return to_uint8(image)
