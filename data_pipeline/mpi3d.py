"""An MPI3D-like generator: a robot arm holding an object, 64×64×3, at the real factor sizes.

Same idea as the 3DShapes-like scene (docs/data.md), not photorealism: a background wall in the
background colour (purple, sea green, salmon) above a darker table, a grey arm from the top of
the frame to the object, and the object (cone, cube, cylinder, hexagonal prism, pyramid, sphere)
in its colour (white, green, red, blue, brown, olive), small or large. The two arm axes move the
object horizontally and vertically over 40 positions each; the camera height moves the whole
scene up or down and flattens or stretches the object slightly.

:func:`reduced_classes` gives a small sub-grid that keeps the real class numbers (every colour,
shape, size, height and background, four positions per axis), for tests and quick runs.

How it is fast (about 10× the first, per-image renderer, with the same bytes): the background
depends only on its colour, so it is a uint8 table; the arm depends only on the camera height and
the axis pair (4,800 cases), so its pixels are listed once and painted with one scatter; and the
object, at most 6.5 × 1.15 px from its centre, is shaded in float64 and rounded only inside a
17×17 window around it, for all images of one shape at once. Each pixel still gets exactly the
float64 arithmetic and the rounding of a whole-image render, so the images did not change
(``tests/data_pipeline/test_mpi3d_renderer.py`` pins them by sha256).
"""

from __future__ import annotations

import functools

import numpy as np

from data_pipeline.colour import to_uint8
from data_pipeline.spaces import mpi3d_space

GENERATOR_VERSION = 1
IMAGE_SIZE = 64
OBJECT_RGB = np.array([
    [0.95, 0.95, 0.95], [0.15, 0.6, 0.2], [0.8, 0.12, 0.1], [0.12, 0.25, 0.8], [0.5, 0.3, 0.12],
    [0.5, 0.5, 0.12]])
BACKGROUND_RGB = np.array([[0.45, 0.3, 0.6], [0.2, 0.6, 0.5], [0.95, 0.55, 0.45]])
ARM_RGB = np.array([0.55, 0.55, 0.58])
_CAMERA_SHIFT = (-6.0, 0.0, 6.0)  # rows, for camera top / center / bottom
_CAMERA_SQUASH = (0.8, 1.0, 1.15)
_RADIUS = (4.0, 6.5)  # object half-size in pixels, small / large
REDUCED_AXIS_CLASSES = (0, 13, 26, 39)
_TABLE_TOP = 46.0  # the table fills the rows below this
_WINDOW = 17  # the object is drawn inside a window this many pixels wide and high


def reduced_classes() -> np.ndarray:
    """A sub-grid with the real class numbers: every value of the five discrete factors, and
    horizontal/vertical axis classes 0, 13, 26, 39 (10,368 images)."""
    space = mpi3d_space()
    axes = [np.arange(s) for s in space.sizes[:5]] + [np.array(REDUCED_AXIS_CLASSES)] * 2
    grid = np.meshgrid(*axes, indexing="ij")
    return np.stack([g.ravel() for g in grid], axis=1).astype(np.int64)


def _pixel_grid():
    centres = np.arange(IMAGE_SIZE) + 0.5
    return np.meshgrid(centres, centres)  # x (columns), y (rows)


def _silhouette(shape: int, dx: np.ndarray, dy: np.ndarray, r: float):
    """(mask, shade) of one shape centred at the origin; dy grows downwards."""
    u, v = dx / r, dy / r
    if shape == 0:  # cone: a triangle with its apex up, shaded across
        mask = (v <= 1) & (v >= -1) & (np.abs(u) <= (v + 1) / 2)
        shade = 0.75 + 0.25 * np.clip(-u, -1, 1)
    elif shape == 1:  # cube: a square with a lighter top band
        mask = (np.abs(u) <= 0.9) & (np.abs(v) <= 0.9)
        shade = np.where(v < -0.4, 1.0, 0.75)
    elif shape == 2:  # cylinder: an upright rectangle, shaded across
        mask = (np.abs(u) <= 0.6) & (np.abs(v) <= 1)
        shade = 0.6 + 0.4 * np.sqrt(np.clip(1 - (u / 0.6) ** 2, 0, 1))
    elif shape == 3:  # hexagonal prism seen end on: a regular hexagon
        au, av = np.abs(u), np.abs(v)
        mask = (av <= 0.866) & (au * 0.866 + av * 0.5 <= 0.866)
        shade = np.where(u < 0, 0.8, 1.0)
    elif shape == 4:  # pyramid: a triangle with two shaded faces
        mask = (v <= 0.8) & (v >= -1) & (np.abs(u) <= (v + 1) * 0.6)
        shade = np.where(u < 0, 0.7, 1.0)
    else:  # sphere
        rr = u ** 2 + v ** 2
        mask = rr <= 1
        shade = 0.45 + 0.55 * np.sqrt(np.clip(1 - rr, 0, 1)) * np.clip(1 - 0.3 * (u + v), 0, 1.3)
    return mask, np.broadcast_to(shade, mask.shape)


@functools.cache
def _background_images() -> np.ndarray:
    """(3, 64, 64, 3) uint8: each background colour, darker on the table, with no arm or object."""
    _, y = _pixel_grid()
    images = BACKGROUND_RGB[:, None, None, :] * np.ones((1, IMAGE_SIZE, IMAGE_SIZE, 1))
    images[:, y >= _TABLE_TOP] *= 0.6
    return to_uint8(images)


def _object_centre(height, horizontal, vertical):
    """Object centre (cx, cy) in pixels; dy grows downwards."""
    shift = np.asarray(_CAMERA_SHIFT)[height]
    cx = 10.0 + horizontal * (44.0 / 39.0)
    cy = 12.0 + vertical * (30.0 / 39.0) + shift
    return cx, cy


@functools.cache
def _arm_pixels() -> np.ndarray:
    """(3, 40, 40, L) flat pixel indices (row * 64 + column) of the arm by camera height,
    horizontal and vertical axis: a band of half-width 2 px from the top centre of the frame to the
    object centre. Shorter lists repeat their first pixel up to the longest one's length L."""
    space = mpi3d_space()
    height, horizontal, vertical = np.meshgrid(
        np.arange(space.sizes[3]), np.arange(space.sizes[5]), np.arange(space.sizes[6]), indexing="ij")
    cx, cy = _object_centre(height.ravel(), horizontal.ravel(), vertical.ravel())
    x, y = _pixel_grid()
    ax, ay = 32.0, 0.0
    px, py = x[None] - ax, y[None] - ay
    dx_arm, dy_arm = (cx - ax)[:, None, None], (cy - ay)[:, None, None]
    t = np.clip((px * dx_arm + py * dy_arm) / (dx_arm ** 2 + dy_arm ** 2 + 1e-9), 0, 1)
    arm = ((px - t * dx_arm) ** 2 + (py - t * dy_arm) ** 2 <= 2.0 ** 2).reshape(len(cx), -1)
    pixels = np.empty((len(cx), arm.sum(axis=1).max()), dtype=np.intp)
    for row, mask in enumerate(arm):
        on = np.flatnonzero(mask)
        pixels[row, :len(on)], pixels[row, len(on):] = on, on[0]
    return pixels.reshape(*height.shape, -1)


def _window_start(centre: np.ndarray) -> np.ndarray:
    """First pixel of the _WINDOW-pixel span that holds every pixel an object centred at
    ``centre`` can cover (its reach is at most 6.5 × 1.15 < 7.5 px), kept inside the frame."""
    return np.clip(np.floor(centre).astype(np.int64) - _WINDOW // 2, 0, IMAGE_SIZE - _WINDOW)


def render(classes: np.ndarray, *, chunk: int = 4096) -> np.ndarray:
    """Images (N, 64, 64, 3) uint8 of an (N, 7) class array, as the MPI3D npz stores them.

    An image is its background (a uint8 table by background colour), the arm (a table of its
    pixels by camera height and axis pair) in the arm colour, and the object, drawn in float64
    only inside a 17×17 window around its centre and rounded there. Every pixel gets the same
    float64 arithmetic and rounding as a whole-image float render (the tests pin the bytes).
    """
    space = mpi3d_space()
    classes = space.check_classes(classes)
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1; got {chunk}")
    out = np.empty((len(classes), IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    backgrounds, arms = _background_images(), _arm_pixels()
    arm_u8 = to_uint8(ARM_RGB)
    span = np.arange(_WINDOW)
    centres = span + 0.5
    for start in range(0, len(classes), chunk):
        part = classes[start:start + chunk]
        colour, shape, size, height, background, horizontal, vertical = part.T
        images = out[start:start + len(part)]
        np.take(backgrounds, background, axis=0, out=images)
        flat = images.reshape(len(part), IMAGE_SIZE * IMAGE_SIZE, 3)
        flat[np.arange(len(part))[:, None], arms[height, horizontal, vertical]] = arm_u8
        cx, cy = _object_centre(height, horizontal, vertical)
        col0, row0 = _window_start(cx), _window_start(cy)
        r = np.asarray(_RADIUS)[size]
        squash = np.asarray(_CAMERA_SQUASH)[height]
        for k in np.unique(shape):
            rows = np.flatnonzero(shape == k)
            dx = (col0[rows, None] + centres)[:, None, :] - cx[rows, None, None]
            dy = ((row0[rows, None] + centres)[:, :, None] - cy[rows, None, None]) / squash[rows, None, None]
            mask, shade = _silhouette(int(k), dx, dy, r[rows, None, None])
            drawn = to_uint8(shade[..., None] * OBJECT_RGB[colour[rows]][:, None, None, :])
            window_rows, window_cols = row0[rows, None] + span, col0[rows, None] + span
            at = (rows[:, None, None], window_rows[:, :, None], window_cols[:, None, :])
            images[at] = np.where(mask[..., None], drawn, images[at])
    return out
