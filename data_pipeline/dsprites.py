"""Procedural dSprites renderer.

This module draws dSprites images from factor classes, so that the project can run without the
real ``dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz`` file. The colour factor of the real set
has a single value and is dropped, which leaves five factors:

==============  =======  =============================================
factor          classes  raw value of class ``c``
==============  =======  =============================================
shape           3        ``c + 1``: 1 square, 2 ellipse, 3 heart
scale           6        ``linspace(0.5, 1, 6)[c]``
orientation     40       ``linspace(0, 2*pi, 40)[c]`` (radians)
posX            32       ``linspace(0, 1, 32)[c]``
posY            32       ``linspace(0, 1, 32)[c]``
==============  =======  =============================================

The geometry was calibrated against real dSprites frames
(``reference/dsprites/dsprites_real_frames_open.npz``):

* The sprite centre sits at pixel coordinates ``x = 16 + 32*posX`` and ``y = 16 + 32*posY``,
  where pixel ``(row, col)`` covers ``[col, col+1) x [row, row+1)``. posX grows to the right and
  posY grows downwards.
* The outline is scaled by the scale value and turned counter-clockwise on screen by the
  orientation value about the sprite centre. Orientation ``2*pi`` (class 39) is drawn exactly
  like orientation 0.
* A pixel is on when its **centre** lies inside the outline. The real frames fit this rule
  better than an area-coverage rule: with a half-side of 9.598 at scale 1 every real square
  frame is reproduced pixel for pixel, corners included.
* Square: half-side 9.598. Ellipse: semi-axes 12.77 (horizontal at orientation 0) and 7.2125.
  Heart: a 72-sided polygon whose outline was fitted to the real heart frames; it is about 19.2
  wide and 19 tall at scale 1, with its lobes up and its tip down.

How it is fast. Position only moves the sprite, and every posX class shifts it by 32/31 pixel.
So, measured from the sprite centre, the pixel centres of every image lie on one fixed lattice
with spacing 1/31 pixel. For each (shape, scale, orientation) the renderer fills that lattice
once with a scanline polygon fill, and every image of that group is then every 31st lattice
point of some window of it, copied out with two numpy gathers. All arithmetic is plain numpy
and fully deterministic.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["FACTOR_NAMES", "FACTOR_SIZES", "ROTATIONAL_SYMMETRY", "factor_values", "render"]

FACTOR_NAMES = ("shape", "scale", "orientation", "posX", "posY")
FACTOR_SIZES = (3, 6, 40, 32, 32)
# Turns after which each shape looks the same again, per shape class: a square every quarter turn,
# an ellipse every half turn, a heart only after a whole turn.
ROTATIONAL_SYMMETRY = (4, 2, 1)

IMAGE_SIZE = 64

# --- Geometry, in pixels at scale 1 (see the module docstring) --------------------------------

SQUARE_HALF_SIDE = 9.598
ELLIPSE_SEMI_AXES = (12.77, 7.2125)
ELLIPSE_VERTICES = 512

# Heart outline as distances from the sprite centre, in pixels at scale 1, for the right half
# of the heart at angles -90, -85, ..., +90 degrees (0 = right, +90 = straight up, measured in
# the usual counter-clockwise sense with y pointing up). The left half is its mirror image.
# Fitted outside this repository to all 84 real heart frames: a linear programme on pixel-centre
# labels, then a small coordinate search on the frames' IoU.
# tests/data_pipeline/test_dsprites_renderer_matches_real_frames.py fits the radii again from two
# thirds of the frames alone and scores the held-out third (mean IoU 0.9946).
HEART_ANGLE_STEP_DEG = 5.0
# fmt: off
HEART_RADII = (
    9.657, 7.950, 7.402, 6.833, 6.552, 6.235, 6.104, 5.972, 5.914, 5.995,
    5.927, 6.048, 6.137, 6.377, 6.566, 6.908, 7.219, 7.643, 8.156, 8.654,
    9.192, 9.739, 10.177, 10.586, 10.909, 11.121, 11.244, 11.311, 11.195, 11.033,
    10.741, 10.306, 9.726, 8.929, 7.931, 6.712, 5.157,
)
# fmt: on

# --- Sample lattice ---------------------------------------------------------------------------

_SUB = 31  # lattice points per pixel: posX/posY step is 32/31 pixel = 1 + 1/31
_REACH_PX = 14  # no outline reaches further than this from the sprite centre
_HALF = _SUB * _REACH_PX  # lattice index of the sprite centre
_SIDE = 2 * _HALF  # lattice points per side; index _SIDE is an always-off sentinel
_MASK_CACHE_SIZE = 48
_FEW_IMAGES = 64  # below this many images of one group, skip the column table


def factor_values() -> dict[str, np.ndarray]:
    """Return the raw value of every class of every factor, keyed by factor name."""
    return {
        "shape": np.array([1.0, 2.0, 3.0]),
        "scale": np.linspace(0.5, 1.0, 6),
        "orientation": np.linspace(0.0, 2.0 * np.pi, 40),
        "posX": np.linspace(0.0, 1.0, 32),
        "posY": np.linspace(0.0, 1.0, 32),
    }


def _square_outline() -> np.ndarray:
    h = SQUARE_HALF_SIDE
    return np.array([[h, h], [-h, h], [-h, -h], [h, -h]])


def _ellipse_outline() -> np.ndarray:
    a, b = ELLIPSE_SEMI_AXES
    t = np.arange(ELLIPSE_VERTICES) * (2.0 * np.pi / ELLIPSE_VERTICES)
    return np.stack([a * np.cos(t), b * np.sin(t)], axis=1)


def _heart_outline() -> np.ndarray:
    radii = np.asarray(HEART_RADII)
    angles = np.deg2rad(-90.0 + HEART_ANGLE_STEP_DEG * np.arange(len(radii)))
    right = np.stack([radii * np.cos(angles), radii * np.sin(angles)], axis=1)
    right[[0, -1], 0] = 0.0  # tip and notch lie exactly on the axis of symmetry
    left = right[-2:0:-1] * np.array([-1.0, 1.0])  # mirror, top to bottom, no repeats
    return np.concatenate([right, left])


# Outlines in sprite coordinates: pixels at scale 1, x to the right, y up, centred on the sprite.
_OUTLINES = (_square_outline(), _ellipse_outline(), _heart_outline())


def _outline_on_lattice(shape: int, scale_class: int, orientation_class: int) -> np.ndarray:
    """Place an outline on the lattice: scale, turn, flip y to point down, change units.

    A vertex at lattice coordinates (col, row) = (c, r) lies at (c - _HALF + 0.5) / _SUB pixels
    right of and (r - _HALF + 0.5) / _SUB pixels below the sprite centre.
    """
    scale = factor_values()["scale"][scale_class]
    # Class 39 (2*pi) is folded onto class 0 so that both render bit-identically.
    theta = 2.0 * np.pi * (orientation_class % 39) / 39.0
    cos, sin = np.cos(theta), np.sin(theta)
    x, y = _OUTLINES[shape].T * scale
    screen_x = x * cos - y * sin
    screen_down = -(x * sin + y * cos)
    offset = _HALF - 0.5
    return np.stack([screen_x * _SUB + offset, screen_down * _SUB + offset], axis=1)


@functools.lru_cache(maxsize=_MASK_CACHE_SIZE)
def _lattice_mask(shape: int, scale_class: int, orientation_class: int) -> np.ndarray:
    """Fill the outline on the lattice with the even-odd scanline rule.

    Returns a read-only (_SIDE + 1, _SIDE + 1) uint8 array, 1 inside the outline; the last row
    and the last column are the always-off sentinel. A lattice point is inside when an odd number
    of outline edges cross its row at or to the left of it. Each edge covers the rows from
    ceil(lower end) to ceil(upper end) - 1, so a vertex is never counted twice.
    """
    vertices = _outline_on_lattice(shape, scale_class, orientation_class)
    x0, y0 = vertices.T
    x1, y1 = np.roll(vertices, -1, axis=0).T
    first_row = np.ceil(np.minimum(y0, y1)).astype(np.int64)
    n_rows = np.ceil(np.maximum(y0, y1)).astype(np.int64) - first_row
    edge = np.repeat(np.arange(len(vertices)), n_rows)
    row = first_row[edge] + np.arange(edge.size) - np.repeat(np.cumsum(n_rows) - n_rows, n_rows)
    x_cross = x0[edge] + (row - y0[edge]) * (x1[edge] - x0[edge]) / (y1[edge] - y0[edge])
    first_inside_col = np.ceil(x_cross).astype(np.int64)
    # Every row is crossed an even number of times, so in row-major order the sorted crossing
    # points alternate between switching on and switching off.
    switches = np.sort(row * (_SIDE + 1) + first_inside_col)
    bounds = np.concatenate([[0], switches, [(_SIDE + 1) ** 2]])
    on_off = (np.arange(bounds.size - 1) % 2).astype(np.uint8)
    mask = np.repeat(on_off, np.diff(bounds)).reshape(_SIDE + 1, _SIDE + 1)
    mask.flags.writeable = False
    return mask


@functools.lru_cache(maxsize=1)
def _lattice_index() -> np.ndarray:
    """Lattice index of each pixel centre, by position class: shape (32, 64).

    Pixel ``i`` of an image with position class ``p`` has its centre at
    ``i + 0.5 - 16 - 32 * p / 31 = (31 * i + 15.5 - 496 - 32 * p) / 31`` pixels from the sprite
    centre, which is lattice index ``31 * i + 15 - 496 - 32 * p + _HALF``. Indices off the
    lattice point at the sentinel.
    """
    p = np.arange(32)[:, None]
    i = np.arange(IMAGE_SIZE)[None, :]
    idx = _SUB * i + 15 - 496 - 32 * p + _HALF
    idx = np.where((idx >= 0) & (idx < _SIDE), idx, _SIDE).astype(np.intp)
    idx.flags.writeable = False
    return idx


def _check_outlines_fit() -> None:
    """The scanline fill assumes every outline stays well inside the lattice."""
    for outline in _OUTLINES:
        reach = np.hypot(*outline.T).max() * factor_values()["scale"].max()
        if reach > _REACH_PX - 0.1:
            raise AssertionError(f"outline reaches {reach:.2f} px, lattice only {_REACH_PX} px")


_check_outlines_fit()


def _validate(classes) -> np.ndarray:
    arr = np.asarray(classes)
    if arr.ndim != 2 or arr.shape[1] != len(FACTOR_NAMES):
        raise ValueError(
            f"classes must have shape (N, {len(FACTOR_NAMES)}) with columns {FACTOR_NAMES}, "
            f"got shape {arr.shape}"
        )
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"classes must hold integer factor classes, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    for col, (name, size) in enumerate(zip(FACTOR_NAMES, FACTOR_SIZES, strict=True)):
        values = arr[:, col]
        bad = (values < 0) | (values >= size)
        if bad.any():
            raise ValueError(
                f"column {col} ({name}) must hold classes 0..{size - 1}, "
                f"got {values[bad][0]} at row {int(np.argmax(bad))}"
            )
    return arr


def render(classes: np.ndarray, *, chunk: int = 4096) -> np.ndarray:
    """Render dSprites images from factor classes.

    ``classes`` is an (N, 5) integer array with the columns of ``FACTOR_NAMES``. The result is
    an (N, 64, 64) uint8 array holding 0 and 1, like ``imgs`` in the real file. The same input
    always gives the same bytes. ``chunk`` caps how many images share one temporary index array
    (about 16 KiB per image).

    Raises ValueError when the array has the wrong shape or dtype, or a class is out of range.
    """
    arr = _validate(classes)
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1, got {chunk}")
    n = arr.shape[0]
    out = np.empty((n, IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint8)
    if n == 0:
        return out

    shape, scale, orient, pos_x, pos_y = arr.T
    group = (shape * 6 + scale) * 39 + orient % 39
    order = np.argsort(group, kind="stable")
    starts = np.flatnonzero(np.diff(group[order], prepend=-1))
    ends = np.append(starts[1:], n)
    lat = _lattice_index()

    for start, end in zip(starts, ends, strict=True):
        items = order[start:end]
        first = items[0]
        mask = _lattice_mask(int(shape[first]), int(scale[first]), int(orient[first]) % 39)
        if len(items) < _FEW_IMAGES:
            # Few images: pick every pixel straight from the lattice.
            out[items] = mask[lat[pos_y[items]][:, :, None], lat[pos_x[items]][:, None, :]]
            continue
        # Many images: first take the 64 columns of every posX class, then for each image
        # copy whole 64-pixel rows from that table.
        by_column = np.take(mask, lat.reshape(-1), axis=1).reshape(_SIDE + 1, 32, IMAGE_SIZE)
        for lo in range(0, len(items), chunk):
            part = items[lo : lo + chunk]
            out[part] = by_column[lat[pos_y[part]], pos_x[part][:, None], :]
    return out
