"""Tests of the procedural dSprites renderer against real frames and its own contract.

The real frames live in ``shared/reference/dsprites/dsprites_real_frames_open.npz`` (outside the
package). Set DISGEN_DSPRITES_FRAMES to point elsewhere; tests that need them skip if absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from data_pipeline import dsprites
from data_pipeline.dsprites import FACTOR_NAMES, FACTOR_SIZES, factor_values, render

_FRAMES_NAME = Path("reference/dsprites/dsprites_real_frames_open.npz")
_REPO = Path(__file__).resolve().parents[2]


def _frames_path() -> Path | None:
    candidates = [os.environ.get("DISGEN_DSPRITES_FRAMES")]
    candidates += [str(base / "shared" / _FRAMES_NAME) for base in (_REPO, _REPO.parent)]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


@pytest.fixture(scope="module")
def real():
    path = _frames_path()
    if path is None:
        pytest.skip("real dSprites frames not found; set DISGEN_DSPRITES_FRAMES")
    data = np.load(path)
    imgs, classes = data["imgs"], data["latents_classes"]
    return imgs, classes, render(classes)


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(bool), b.astype(bool)
    return (a & b).sum(axis=(1, 2)) / (a | b).sum(axis=(1, 2))


def _grid_sample(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, size, n) for size in FACTOR_SIZES], axis=1)


# --- Calibration against real frames --------------------------------------------------------


def _held_out(classes: np.ndarray, shape: int) -> tuple[np.ndarray, np.ndarray]:
    """A shape's frames, split in two: every third (in file order) held out, the rest to fit on."""
    rows = np.flatnonzero(classes[:, 0] == shape)
    held = rows[2::3]
    return np.setdiff1d(rows, held), held


def _outline_iou(real, shape, outline, rows, monkeypatch) -> float:
    """Mean IoU of the given rows' frames of ``shape`` drawn with another outline."""
    imgs, classes, _ = real
    outlines = list(dsprites._OUTLINES)
    outlines[shape] = outline
    monkeypatch.setattr(dsprites, "_OUTLINES", tuple(outlines))
    dsprites._lattice_mask.cache_clear()
    try:
        return float(_iou(render(classes[rows]), imgs[rows]).mean())
    finally:
        monkeypatch.undo()
        dsprites._lattice_mask.cache_clear()


def _ellipse_iou(real, semi_axes, rows, monkeypatch) -> float:
    """Mean IoU of the given rows' ellipse frames drawn with other semi-axes."""
    t = np.arange(dsprites.ELLIPSE_VERTICES) * (2.0 * np.pi / dsprites.ELLIPSE_VERTICES)
    outline = np.stack([semi_axes[0] * np.cos(t), semi_axes[1] * np.sin(t)], axis=1)
    return _outline_iou(real, 1, outline, rows, monkeypatch)


def test_ellipse_fitted_without_the_held_out_frames_scores_iou_0999_on_them(real, monkeypatch):
    """The ellipse's two semi-axes, fitted (coordinate search on IoU, from a 10 px circle) to two
    thirds of the real ellipse frames, give the constants the renderer ships, and on the held-out
    third a mean IoU of 0.99901 (README: "0.999 on held-out frames")."""
    fit, held = _held_out(real[1], shape=1)
    assert len(fit) >= 15 and len(held) >= 7
    axes, step = [10.0, 10.0], 2.0
    score = _ellipse_iou(real, axes, fit, monkeypatch)
    while step > 0.01:
        improved = False
        for i in range(2):
            for move in (step, -step):
                candidate = list(axes)
                candidate[i] += move
                candidate_score = _ellipse_iou(real, candidate, fit, monkeypatch)
                if candidate_score > score:
                    axes, score, improved = candidate, candidate_score, True
        step = step if improved else step / 2
    np.testing.assert_allclose(axes, dsprites.ELLIPSE_SEMI_AXES, atol=0.02)
    held_iou = _ellipse_iou(real, axes, held, monkeypatch)
    assert held_iou >= 0.999, f"ellipse, held-out frames: mean IoU {held_iou:.5f}"
    # the shipped constants score the same on the frames the fit never saw
    assert _iou(real[2][held], real[0][held]).mean() >= 0.999


def test_heart_iou_on_the_frames_its_outline_was_fitted_to(real):
    """The shipped 37 radii were fitted (outside this repository) to all 84 real heart frames, so
    this is that fit's own score, and README says so; the held-out score is the test below's."""
    imgs, classes, ours = real
    heart = classes[:, 0] == 2
    iou = _iou(ours[heart], imgs[heart]).mean()
    assert iou >= 0.999, f"heart: mean IoU {iou:.5f}"


def _heart_iou(real, radii, rows, monkeypatch) -> float:
    """Mean IoU of the given rows' heart frames drawn with other radii."""
    monkeypatch.setattr(dsprites, "HEART_RADII", tuple(radii))
    outline = dsprites._heart_outline()
    monkeypatch.undo()
    return _outline_iou(real, 2, outline, rows, monkeypatch)


def _heart_radii_from_pixels(real, rows) -> np.ndarray:
    """A first estimate of the 37 radii from the frames alone: each pixel centre of each frame,
    taken back to sprite coordinates (position, turn and scale undone) and folded onto the right
    half, votes in the 5-degree bin of its angle; a bin's radius is the one that misclassifies
    the fewest of its pixels (inside below it, outside beyond)."""
    imgs, classes, _ = real
    scales = factor_values()["scale"]
    radius, angle, inside = [], [], []
    for k in rows:
        _, scale, orientation, pos_x, pos_y = classes[k]
        theta = 2.0 * np.pi * (orientation % 39) / 39.0
        right = np.arange(64)[None, :] + 0.5 - 16 - 32 * pos_x / 31 + np.zeros((64, 1))
        up = -(np.arange(64)[:, None] + 0.5 - 16 - 32 * pos_y / 31) + np.zeros((1, 64))
        x = (right * np.cos(theta) + up * np.sin(theta)) / scales[scale]
        y = (-right * np.sin(theta) + up * np.cos(theta)) / scales[scale]
        near = np.hypot(x, y) < 14
        radius.append(np.hypot(x, y)[near])
        angle.append(np.degrees(np.arctan2(y, np.abs(x)))[near])
        inside.append(imgs[k][near] > 0)
    radius, angle, inside = map(np.concatenate, (radius, angle, inside))
    n_radii = len(dsprites.HEART_RADII)
    radii = np.zeros(n_radii)
    for b in range(n_radii):
        in_bin = np.abs(angle - (-90.0 + dsprites.HEART_ANGLE_STEP_DEG * b)) <= 2.5
        order = np.argsort(radius[in_bin])
        r, on = radius[in_bin][order], inside[in_bin][order]
        errors = np.concatenate([[0], np.cumsum(~on)]) + np.concatenate([np.cumsum(on[::-1])[::-1], [0]])
        m = int(np.argmin(errors))  # the radius between r[m - 1] and r[m]
        radii[b] = (r[m - 1] + r[m]) / 2 if 0 < m < len(r) else (r[0] if m == 0 else r[-1])
    return radii


@pytest.mark.slow
def test_heart_fitted_without_the_held_out_frames_scores_iou_0994_on_them(real, monkeypatch):
    """Frames never used for fitting: the 37 radii are estimated from two thirds of the real heart
    frames only (pixel votes, then a coordinate search on their IoU; the shipped radii are not
    read), and score a mean IoU of 0.9946 on the held-out third (README: "0.995 on held-out
    frames"). The shipped outline was fitted outside this repository to all 84 frames, so its
    score on any of them (below) is not a held-out figure."""
    fit, held = _held_out(real[1], shape=2)
    assert len(fit) == 56 and len(held) == 28
    radii = _heart_radii_from_pixels(real, fit)
    score, step = _heart_iou(real, radii, fit, monkeypatch), 0.25
    while step > 0.01:
        improved = False
        for b in range(len(radii)):
            for move in (step, -step):
                candidate = radii.copy()
                candidate[b] += move
                candidate_score = _heart_iou(real, candidate, fit, monkeypatch)
                if candidate_score > score:
                    radii, score, improved = candidate, candidate_score, True
        step = step if improved else step / 2
    held_iou = _heart_iou(real, radii, held, monkeypatch)
    assert held_iou >= 0.994, f"heart, held-out frames: mean IoU {held_iou:.5f}"
    # and it lands near the shipped outline on its own: within 1 px at every angle (the sharp tip is
    # the least certain, 0.9 px off), a median 0.1 px
    apart = np.abs(radii - np.asarray(dsprites.HEART_RADII))
    assert apart.max() < 1.0 and np.median(apart) < 0.1, apart.round(3)


def test_square_scale_sweep_is_pixel_exact(real):
    imgs, classes, ours = real
    sweep = (classes[:, 0] == 0) & (classes[:, 2:] == 0).all(axis=1)
    assert sorted(classes[sweep, 1]) == [1, 3, 5]
    np.testing.assert_array_equal(ours[sweep], imgs[sweep])


def test_every_real_square_frame_is_pixel_exact(real):
    imgs, classes, ours = real
    square = classes[:, 0] == 0
    np.testing.assert_array_equal(ours[square], imgs[square])


# --- Output contract ------------------------------------------------------------------------


def test_output_dtype_shape_and_values():
    classes = _grid_sample(50, seed=0)
    out = render(classes)
    assert out.dtype == np.uint8
    assert out.shape == (50, 64, 64)
    assert set(np.unique(out)) <= {0, 1}
    assert (out.sum(axis=(1, 2)) > 0).all()


def test_empty_input():
    out = render(np.zeros((0, 5), dtype=np.int64))
    assert out.shape == (0, 64, 64) and out.dtype == np.uint8


def test_deterministic_bytes():
    classes = _grid_sample(300, seed=1)
    first = render(classes).tobytes()
    dsprites._lattice_mask.cache_clear()
    assert render(classes).tobytes() == first


def test_order_and_chunking_do_not_change_images():
    # One whole group in grid order (the fast table path), then shuffled and in small chunks.
    pos = np.stack(np.unravel_index(np.arange(32 * 32), (32, 32)), axis=1)
    classes = np.concatenate([np.tile([2, 3, 7], (len(pos), 1)), pos], axis=1)
    reference = render(classes)
    perm = np.random.default_rng(2).permutation(len(classes))
    np.testing.assert_array_equal(render(classes[perm], chunk=7), reference[perm])
    # A handful of images goes through the per-pixel path and must agree too.
    few = perm[:5]
    np.testing.assert_array_equal(render(classes[few]), reference[few])


def _render_slow(one: np.ndarray) -> np.ndarray:
    """Plain per-pixel even-odd test of each pixel centre against the placed outline."""
    shape, scale_class, orient_class, px, py = (int(v) for v in one)
    scale = factor_values()["scale"][scale_class]
    theta = factor_values()["orientation"][orient_class]
    x, y = dsprites._OUTLINES[shape].T * scale
    vx = 16 + 32 * px / 31 + x * np.cos(theta) - y * np.sin(theta)
    vy = 16 + 32 * py / 31 - (x * np.sin(theta) + y * np.cos(theta))
    ex0, ey0, ex1, ey1 = vx, vy, np.roll(vx, -1), np.roll(vy, -1)
    centres = np.arange(64) + 0.5
    cy, cx = centres[:, None, None], centres[None, :, None]
    spans = (np.minimum(ey0, ey1) <= cy) & (cy < np.maximum(ey0, ey1))
    with np.errstate(divide="ignore", invalid="ignore"):
        x_cross = ex0 + (cy - ey0) * (ex1 - ex0) / (ey1 - ey0)
    crossings = (spans & (x_cross <= cx)).sum(axis=2)
    return (crossings % 2).astype(np.uint8)


def test_fast_renderer_matches_per_pixel_reference():
    classes = _grid_sample(24, seed=3)
    classes[:3, 0] = [0, 1, 2]
    ours = render(classes)
    for one, image in zip(classes, ours, strict=True):
        np.testing.assert_array_equal(image, _render_slow(one), err_msg=str(one))


# --- Geometry -------------------------------------------------------------------------------


def test_orientation_0_and_39_render_the_same():
    base = _grid_sample(40, seed=4)
    base[:, 0] = np.arange(40) % 3
    at_0, at_39 = base.copy(), base.copy()
    at_0[:, 2], at_39[:, 2] = 0, 39
    np.testing.assert_array_equal(render(at_0), render(at_39))


def _centroid(images: np.ndarray) -> np.ndarray:
    rows, cols = np.indices((64, 64)) + 0.5  # pixel centres
    mass = images.sum(axis=(1, 2))
    return np.stack([(images * cols).sum(axis=(1, 2)) / mass, (images * rows).sum(axis=(1, 2)) / mass], 1)


@pytest.mark.parametrize("shape", [0, 1, 2])
def test_posx_moves_right_and_posy_moves_down(shape):
    steps = np.arange(0, 32, 5)
    along_x = np.array([[shape, 5, 0, p, 10] for p in steps])
    along_y = np.array([[shape, 5, 0, 10, p] for p in steps])
    cx = _centroid(render(along_x))
    cy = _centroid(render(along_y))
    assert (np.diff(cx[:, 0]) > 4).all() and np.allclose(cx[:, 1], cx[0, 1], atol=0.5)
    assert (np.diff(cy[:, 1]) > 4).all() and np.allclose(cy[:, 0], cy[0, 0], atol=0.5)
    # The centre moves 32/31 pixel per class and starts at pixel 16.
    square = _centroid(render(np.array([[0, 5, 0, 0, 0], [0, 5, 0, 31, 31]])))
    np.testing.assert_allclose(square, [[16, 16], [48, 48]], atol=1e-9)


def test_heart_lobes_up_and_rotation_counter_clockwise():
    upright, quarter = render(np.array([[2, 5, 0, 15, 15], [2, 5, 10, 15, 15]]))
    rows = np.flatnonzero(upright.any(axis=1))
    # Lobes up: the top row is wider than the bottom (tip) row.
    assert upright[rows[0]].sum() > upright[rows[-1]].sum()
    # Orientation class 10 is ~92 degrees: counter-clockwise puts the lobes on the left.
    cols = np.flatnonzero(quarter.any(axis=0))
    assert quarter[:, cols[0]].sum() > quarter[:, cols[-1]].sum()


def test_factor_values():
    values = factor_values()
    assert tuple(values) == FACTOR_NAMES
    assert tuple(len(v) for v in values.values()) == FACTOR_SIZES
    np.testing.assert_allclose(values["scale"], [0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    assert values["orientation"][-1] == pytest.approx(2 * np.pi)
    np.testing.assert_array_equal(values["shape"], [1, 2, 3])


# --- Input validation -----------------------------------------------------------------------


@pytest.mark.parametrize("bad", [np.zeros(5, int), np.zeros((2, 4), int), np.zeros((2, 6), int)])
def test_wrong_shape_raises(bad):
    with pytest.raises(ValueError, match=r"shape \(N, 5\)"):
        render(bad)


def test_float_classes_raise():
    with pytest.raises(ValueError, match="integer"):
        render(np.zeros((2, 5), dtype=float))


@pytest.mark.parametrize("column", range(5))
@pytest.mark.parametrize("offset", [0, -1])
def test_out_of_range_class_names_column_and_range(column, offset):
    classes = np.zeros((3, 5), dtype=np.int64)
    size = FACTOR_SIZES[column]
    classes[1, column] = size if offset == 0 else -1
    pattern = rf"column {column} \({FACTOR_NAMES[column]}\) must hold classes 0\.\.{size - 1}"
    with pytest.raises(ValueError, match=pattern):
        render(classes)
