"""A small robot-finger dataset written in exactly the layout D21's authors distributed
(data_pipeline/robot_finger.py, docs/datasets.md): per simulated set an info npz, a labels npz and
a tar of ``<index>.png``; the real set's images in an npz.

The images are a procedural stand-in, cheap to draw and faithful to the factors: a three-link
finger whose links turn by the three joint classes, and a square cube of the colour class at the
cube's (x, y) class, turned by its angle class. The real set is drawn on a darker, noisy, lit
background (a sim-to-real shift), the held-out colours set with four colours of its own.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

from data_pipeline.robot_finger import FACTOR_SIZES, ROOT, TRAINING_COLOURS

HELDOUT_COLOURS = ((1.0, 0.5, 0.0), (1.0, 1.0, 0.0), (0.5, 1.0, 0.0), (0.0, 0.0, 1.0))  # the fixture's own
HELDOUT_SIZES = (1, len(HELDOUT_COLOURS), *FACTOR_SIZES[2:])

_Y, _X = np.mgrid[0:128, 0:128].astype(np.float32)


def random_classes(n: int, sizes=FACTOR_SIZES, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, s, n) for s in sizes], axis=1).astype(np.int64)


def paired_classes(n: int, sizes=FACTOR_SIZES, seed: int = 0) -> np.ndarray:
    """``n`` rows as D21's ``finger`` set holds them, pairs of images that differ in one factor (D21
    §4: "500k pairs of images that differ in only one FoV", for the weakly supervised models): rows
    2i and 2i+1, the factor changed taking each varying factor in turn; an odd last row alone."""
    rng = np.random.default_rng(seed)
    base = random_classes((n + 1) // 2, sizes, seed)
    twin = base.copy()
    varying = [j for j, size in enumerate(sizes) if size > 1]
    for i, row in enumerate(twin):
        j = varying[i % len(varying)]
        row[j] = (row[j] + rng.integers(1, sizes[j])) % sizes[j]
    return np.stack([base, twin], axis=1).reshape(-1, len(sizes))[:n]


def _segment_distance(ax, ay, bx, by):
    dx, dy = bx - ax, by - ay
    t = np.clip(((_X - ax) * dx + (_Y - ay) * dy) / (dx * dx + dy * dy), 0.0, 1.0)
    return np.hypot(_X - ax - t * dx, _Y - ay - t * dy)


def draw(classes, colours=TRAINING_COLOURS, real: bool = False, seed: int = 0) -> np.ndarray:
    """(N, 128, 128, 3) uint8 images of the classes (N, 9)."""
    rng = np.random.default_rng(seed)
    images = np.empty((len(classes), 128, 128, 3), np.uint8)
    for i, (_, colour, _, j0, j1, j2, x, y, angle) in enumerate(np.asarray(classes)):
        if real:
            light = 0.25 + 0.35 * (_X + _Y)[..., None] / 256.0
            image = np.clip(light + rng.normal(0, 0.04, (128, 128, 3)), 0, 1)
        else:
            image = np.full((128, 128, 3), 0.8, np.float32)
        bowl = np.hypot(_X - 64, _Y - 72) < 56
        image[bowl] *= 0.8
        # the cube: a square of side 16 turned by its angle (a quarter turn over the 10 classes)
        cx, cy = 34 + 2 * x, 42 + 2 * y
        theta = angle * np.pi / 20
        u = np.cos(theta) * (_X - cx) + np.sin(theta) * (_Y - cy)
        v = -np.sin(theta) * (_X - cx) + np.cos(theta) * (_Y - cy)
        image[(np.abs(u) < 8) & (np.abs(v) < 8)] = colours[colour]
        # the finger: three links from the top centre, each joint turning the rest of the finger
        px, py, heading = 64.0, 4.0, np.pi / 2
        for joint, length, width in ((j0, 36, 5.0), (j1, 30, 4.0), (j2, 24, 3.0)):
            heading += (joint - 14.5) * np.pi / 60
            qx, qy = px + length * np.cos(heading), py + length * np.sin(heading)
            image[_segment_distance(px, py, qx, qy) < width] = (0.15, 0.15, 0.2)
            px, py = qx, qy
        images[i] = np.round(np.clip(image, 0, 1) * 255)
    return images


def _png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def _add(archive: tarfile.TarFile, name: str, payload: bytes) -> None:
    member = tarfile.TarInfo(name)
    member.size = len(payload)
    archive.addfile(member, io.BytesIO(payload))


def write_tar(path, images, folder: str = "images", inner: int = 0, order_seed: int | None = None) -> Path:
    """The PNGs as ``<folder>/<index>.png`` in an uncompressed tar at ``path``; with ``inner`` > 0
    in that many inner tar files instead (as the authors' archive may unpack); ``order_seed``
    shuffles the members' order."""
    path = Path(path)
    order = np.arange(len(images))
    if order_seed is not None:
        order = np.random.default_rng(order_seed).permutation(order)
    with tarfile.open(path, "w") as archive:
        if inner:
            for part, rows in enumerate(np.array_split(order, inner)):
                buffer = io.BytesIO()
                with tarfile.open(fileobj=buffer, mode="w") as nested:
                    for row in rows:
                        _add(nested, f"{folder}/{row}.png", _png(images[row]))
                _add(archive, f"part{part}.tar", buffer.getvalue())
        else:
            _add(archive, "README", b"the robot-finger fixture of disgen's tests\n")
            for row in order:
                _add(archive, f"{folder}/{row}.png", _png(images[row]))
    return path


def write_set(root, name: str, classes: np.ndarray, images: np.ndarray, sizes, inner: int = 0,
              values: bool = False) -> Path:
    """One set under ``root/robot_finger_datasets/name/``; ``values``: the labels as the factors'
    grid values instead of class numbers."""
    from data_pipeline.robot_finger import finger_space

    folder = Path(root) / ROOT / name
    folder.mkdir(parents=True, exist_ok=True)
    labels = classes.astype(np.float64)
    if values:
        labels = finger_space(sizes).raw_values(classes)
    np.savez(folder / f"{name}_info.npz", num_factor_values=np.asarray(sizes, np.int64),
             dataset_size=np.asarray(len(classes)))
    np.savez(folder / f"{name}_labels.npz", labels=labels)
    if name == "finger_real":
        np.savez(folder / f"{name}_images.npz", images=images)
    else:
        write_tar(folder / f"{name}_images.tar", images, inner=inner, order_seed=len(classes))
    return folder


def write_finger_datasets(root, n: int = 300, n_heldout: int = 100, n_real: int = 60, seed: int = 0,
                          inner: int = 0) -> Path:
    """The three sets under ``root/robot_finger_datasets``; that folder. Their classes are drawn
    uniformly from each set's grid with ``seed``, the ``finger`` set's in pairs that differ in one
    factor (:func:`paired_classes`), as D21's."""
    sim = paired_classes(n, FACTOR_SIZES, seed)
    heldout = random_classes(n_heldout, HELDOUT_SIZES, seed + 1)
    real = random_classes(n_real, FACTOR_SIZES, seed + 2)
    write_set(root, "finger", sim, draw(sim, seed=seed), FACTOR_SIZES, inner=inner)
    write_set(root, "finger_heldout_colors", heldout, draw(heldout, HELDOUT_COLOURS, seed=seed),
              HELDOUT_SIZES)
    write_set(root, "finger_real", real, draw(real, real=True, seed=seed), FACTOR_SIZES)
    return Path(root) / ROOT
