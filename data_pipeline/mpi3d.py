"""An MPI3D-like generator: a robot arm holding an object, 64×64×3, at the real factor sizes.

Same idea as the 3DShapes-like scene (SPEC §1), not photorealism: a background wall in the
background colour (purple, sea green, salmon) above a darker table, a grey arm from the top of
the frame to the object, and the object (cone, cube, cylinder, hexagonal prism, pyramid, sphere)
in its colour (white, green, red, blue, brown, olive), small or large. The two arm axes move the
object horizontally and vertically over 40 positions each; the camera height moves the whole
scene up or down and flattens or stretches the object slightly.

:func:`reduced_classes` gives a small sub-grid that keeps the real class numbers (every colour,
shape, size, height and background, four positions per axis), for tests and quick runs.
"""

from __future__ import annotations

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


def reduced_classes() -> np.ndarray:
    """A sub-grid with the real class numbers: every value of the five discrete factors, and
    horizontal/vertical axis classes 0, 13, 26, 39 (10,368 images)."""
    space = mpi3d_space()
    axes = [np.arange(s) for s in space.sizes[:5]] + [np.array(REDUCED_AXIS_CLASSES)] * 2
    grid = np.meshgrid(*axes, indexing="ij")
    return np.stack([g.ravel() for g in grid], axis=1).astype(np.int64)


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


def render(classes: np.ndarray, *, chunk: int = 512) -> np.ndarray:
    """Images (N, 64, 64, 3) uint8 of an (N, 7) class array, as the MPI3D npz stores them."""
    space = mpi3d_space()
    classes = space.check_classes(classes)
    out = np.empty((len(classes), IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    centres = np.arange(IMAGE_SIZE) + 0.5
    x, y = np.meshgrid(centres, centres)
    table = y >= 46.0
    for start in range(0, len(classes), chunk):
        part = classes[start:start + chunk]
        colour, shape, size, height, background, horizontal, vertical = part.T
        shift = np.asarray(_CAMERA_SHIFT)[height]
        cx = 10.0 + horizontal * (44.0 / 39.0)
        cy = 12.0 + vertical * (30.0 / 39.0) + shift
        images = BACKGROUND_RGB[background][:, None, None, :] * np.ones((1, IMAGE_SIZE, IMAGE_SIZE, 1))
        images[:, table] *= 0.6
        # the arm: a band from the top centre of the frame to the object
        ax, ay = 32.0, 0.0
        px, py = x[None] - ax, y[None] - ay
        dx_arm, dy_arm = (cx - ax)[:, None, None], (cy - ay)[:, None, None]
        t = np.clip((px * dx_arm + py * dy_arm) / (dx_arm ** 2 + dy_arm ** 2 + 1e-9), 0, 1)
        arm = (px - t * dx_arm) ** 2 + (py - t * dy_arm) ** 2 <= 2.0 ** 2
        images[arm] = ARM_RGB
        r = np.asarray(_RADIUS)[size]
        squash = np.asarray(_CAMERA_SQUASH)[height]
        for row in range(len(part)):
            dx = x - cx[row]
            dy = (y - cy[row]) / squash[row]
            mask, shade = _silhouette(int(shape[row]), dx, dy, float(r[row]))
            images[row][mask] = shade[mask][:, None] * OBJECT_RGB[colour[row]]
        out[start:start + len(part)] = to_uint8(images)
    return out
