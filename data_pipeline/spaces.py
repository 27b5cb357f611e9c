"""The factor space of every dataset in the studies.

Each entry gives the factor names in the papers' words, the number of classes of each factor and
the raw value of each class, in the units the real file's labels use. All grids are row-major with
the last factor fastest.

========================  ==========================================================================
dataset                   factors (classes)
========================  ==========================================================================
``dsprites``              shape 3, scale 6, orientation 40, posX 32, posY 32 (the constant colour is
                          dropped, as disentanglement_lib does)
``shapes3d``              floor_hue 10, wall_hue 10, object_hue 10, scale 8, shape 4, orientation 15
``mpi3d``                 object_color 6, object_shape 6, object_size 2, camera_height 3,
                          background_color 3, horizontal_axis 40, vertical_axis 40
``circles``               posX 32, posY 32 (sizes are our default; a real file brings its own)
``simple``                posX 32, posY 32, shape 2 (M22's README: two shapes)
``twoshapes``             posX, posY, shape, hue of object 1 then of object 2 (5, 5, 2, 5 each)
``finger``                shape 1, colour 8, size 1, joint0-2 30 each, cube_x 30, cube_y 30,
                          cube_angle 10 (D21's robot finger, :mod:`data_pipeline.robot_finger`)
========================  ==========================================================================

``finger`` has no generator: its images come only from the authors' files, prepared with
``python -m data_pipeline.prepare finger --from-file DIR/robot_finger_datasets`` (docs/datasets.md).
It is a :data:`STORED_DATASETS` entry, not one of :data:`DATASETS` (the datasets disgen renders).

Circles, Simple and TwoShapes come from the M22 code, which does not fix their grid sizes; the
sizes here are a documented default and :func:`sprite_space` builds the space for any sizes.
"""

from __future__ import annotations

import colorsys

import numpy as np

from data_pipeline import dsprites
from data_pipeline.factors import FactorSpace

# Other spellings users type, mapped to the canonical dataset name.
DATASET_ALIASES = {
    "3dshapes": "shapes3d",
    "3d_shapes": "shapes3d",
    "mpi3d_toy": "mpi3d",
    "mpi3d_realistic": "mpi3d",
    "mpi3d_real": "mpi3d",
}

SHAPES3D_SHAPES = ("cube", "cylinder", "sphere", "capsule")
MPI3D_COLOURS = ("white", "green", "red", "blue", "brown", "olive")
MPI3D_SHAPES = ("cone", "cube", "cylinder", "hexagonal", "pyramid", "sphere")
MPI3D_BACKGROUNDS = ("purple", "sea_green", "salmon")
MPI3D_CAMERA_HEIGHTS = ("top", "center", "bottom")
# M22's Simple has two shapes (its README, line 27); which two it does not say: square and circle,
# so that shape 1 (the class M22's splits hold out) is the circle of its Circles dataset
SIMPLE_SHAPES = ("square", "circle")
TWOSHAPES_SHAPES = ("square", "circle")


def dsprites_space() -> FactorSpace:
    """dSprites: shape values 1, 2, 3 (square, ellipse, heart), orientation in radians. A square
    looks the same after a quarter turn and an ellipse after a half turn: orientation is circular
    with symmetry order 4, 2, 1 by shape."""
    values = dsprites.factor_values()
    return FactorSpace(
        names=tuple(dsprites.FACTOR_NAMES),
        sizes=tuple(dsprites.FACTOR_SIZES),
        values=tuple(np.asarray(values[n], dtype=float) for n in dsprites.FACTOR_NAMES),
        kinds=("categorical", "ordinal", "circular", "ordinal", "ordinal"),
        symmetry=(("orientation", "shape", dsprites.ROTATIONAL_SYMMETRY),),
    )


def shapes3d_space() -> FactorSpace:
    """3DShapes: hues 0, 0.1 .. 0.9; scale linspace(0.75, 1.25, 8); shape 0..3; orientation in
    degrees, linspace(-30, 30, 15)."""
    hues = np.linspace(0.0, 1.0, 10, endpoint=False)
    return FactorSpace(
        names=("floor_hue", "wall_hue", "object_hue", "scale", "shape", "orientation"),
        sizes=(10, 10, 10, 8, 4, 15),
        values=(hues, hues.copy(), hues.copy(), np.linspace(0.75, 1.25, 8), np.arange(4.0),
                np.linspace(-30.0, 30.0, 15)),
        kinds=("categorical", "categorical", "categorical", "ordinal", "categorical", "ordinal"),
    )


def mpi3d_space(object_colours: int = 6, object_shapes: int = 6) -> FactorSpace:
    """MPI3D toy, realistic and real: every factor's value is its class (the file has no labels).

    The ``complex`` variant of MPI3D-real has 4 object colours and 4 shapes; pass those sizes.
    """
    sizes = (object_colours, object_shapes, 2, 3, 3, 40, 40)
    return FactorSpace(
        names=("object_color", "object_shape", "object_size", "camera_height", "background_color",
               "horizontal_axis", "vertical_axis"),
        sizes=sizes,
        values=tuple(np.arange(float(s)) for s in sizes),
        kinds=("categorical", "categorical", "ordinal", "ordinal", "categorical", "ordinal", "ordinal"),
    )


def sprite_space(names: tuple[str, ...], sizes: tuple[int, ...]) -> FactorSpace:
    """A Circles/Simple/TwoShapes space: positions are linspace(0, 1, n) (ordinal); shapes and hues
    are their class numbers (categorical)."""
    values, kinds = [], []
    for name, size in zip(names, sizes):
        if "pos" in name:
            values.append(np.linspace(0.0, 1.0, size))
            kinds.append("ordinal")
        else:
            values.append(np.arange(float(size)))
            kinds.append("categorical")
    return FactorSpace(names=tuple(names), sizes=tuple(int(s) for s in sizes), values=tuple(values),
                       kinds=tuple(kinds))


# -- D21's robot finger (data_pipeline.robot_finger reads its files) ----------------------------------

# The eight cube colours of the training set, RGB in [0, 1], in class order (the authors' loader's
# docstring, erow/disentanglement_lib robot_finger.py).
TRAINING_COLOURS = (
    (1.0, 0.0, 0.0), (1.0, 0.0, 0.5), (1.0, 0.0, 1.0), (0.5, 0.0, 1.0),
    (0.0, 0.5, 1.0), (0.0, 1.0, 1.0), (0.0, 1.0, 0.5), (0.0, 1.0, 0.0),
)


def colour_hues() -> np.ndarray:
    """The HSV hue in [0, 1) of each of :data:`TRAINING_COLOURS` (red 0, green 1/3, blue 2/3), in
    class order: 0, 0.917, 0.833, 0.75, 0.583, 0.5, 0.417, 0.333."""
    return np.array([colorsys.rgb_to_hsv(*rgb)[0] for rgb in TRAINING_COLOURS])


# (name, kind, class values) of the nine label columns, in the files' column order, with the value
# grids the authors' loader's docstring lists: joints in radians, cube position in metres, cube
# angle in radians (10 steps of π/20: a quarter turn, as the cube looks the same after one).
FINGER_FACTORS = (
    ("shape", "categorical", np.array([0.0])),  # the cube: one class
    ("colour", "categorical", np.arange(8.0)),  # a class of TRAINING_COLOURS
    ("size", "ordinal", np.array([0.065])),  # one class
    ("joint0", "ordinal", np.linspace(-0.65, 0.65, 30)),
    ("joint1", "ordinal", np.linspace(-0.5, 0.5, 30)),
    ("joint2", "ordinal", np.linspace(-0.8, 0.8, 30)),
    ("cube_x", "ordinal", np.linspace(-0.11, 0.11, 30)),
    ("cube_y", "ordinal", np.linspace(-0.11, 0.11, 30)),
    ("cube_angle", "ordinal", np.arange(10) * np.pi / 20),
)
FINGER_FACTOR_NAMES = tuple(name for name, _, _ in FINGER_FACTORS)
FINGER_FACTOR_SIZES = tuple(len(values) for _, _, values in FINGER_FACTORS)  # (1, 8, 1, 30, …, 30, 10)


def finger_space(sizes=FINGER_FACTOR_SIZES) -> FactorSpace:
    """The factor space of one set, from its ``num_factor_values``: a factor whose number of
    classes is the published one keeps the published grid; another (a set with its own colours,
    such as ``finger_heldout_colors``) has its class numbers as values."""
    values = tuple(grid if len(grid) == int(size) else np.arange(float(size))
                   for (_, _, grid), size in zip(FINGER_FACTORS, sizes))
    return FactorSpace(names=FINGER_FACTOR_NAMES, sizes=tuple(int(s) for s in sizes), values=values,
                       kinds=tuple(kind for _, kind, _ in FINGER_FACTORS))


CIRCLES_NAMES = ("posX", "posY")
SIMPLE_NAMES = ("posX", "posY", "shape")
TWOSHAPES_NAMES = ("posX_1", "posY_1", "shape_1", "hue_1", "posX_2", "posY_2", "shape_2", "hue_2")

_BUILDERS = {
    "dsprites": dsprites_space,
    "shapes3d": shapes3d_space,
    "mpi3d": mpi3d_space,
    "circles": lambda: sprite_space(CIRCLES_NAMES, (32, 32)),
    "simple": lambda: sprite_space(SIMPLE_NAMES, (32, 32, len(SIMPLE_SHAPES))),
    "twoshapes": lambda: sprite_space(TWOSHAPES_NAMES, (5, 5, 2, 5, 5, 5, 2, 5)),
}

DATASETS = tuple(_BUILDERS)  # the datasets disgen's generators render


# Datasets read only from their files (no generator): the trainable set of D21's robot finger. Its
# two evaluation sets (finger_heldout_colors, finger_real) bring their factor space in their prepared
# manifest, and are read only as a trial's OOD2 sets.
_STORED_BUILDERS = {"finger": finger_space}
STORED_DATASETS = tuple(_STORED_BUILDERS)


def canonical_name(name: str) -> str:
    """The canonical dataset name for ``name`` or one of its aliases; a clear error otherwise."""
    key = str(name).lower()
    key = DATASET_ALIASES.get(key, key)
    if key not in _BUILDERS and key not in _STORED_BUILDERS:
        raise KeyError(
            f"unknown dataset {name!r}; known: {', '.join(DATASETS + STORED_DATASETS)} "
            f"(aliases: {', '.join(sorted(DATASET_ALIASES))})"
        )
    return key


def factor_space(name: str) -> FactorSpace:
    """The default factor space of a dataset by name (aliases such as ``3dshapes`` accepted)."""
    key = canonical_name(name)
    return (_BUILDERS.get(key) or _STORED_BUILDERS[key])()


def class_order(dataset: str, factor: str) -> np.ndarray | None:
    """A key per class of ``factor`` that orders its classes where their numbers do not, or None
    (the class numbers order them). D21's robot-finger colours: their HSV hue in [0, 1), red 0, so
    that OOD1-B's "4 high hues" (D21 §5) are the hues 0.58 … 0.92 (classes 4, 3, 2, 1)."""
    if str(dataset).lower() == "finger" and factor == "colour":
        return colour_hues()
    return None


def has_generator(name: str) -> bool:
    """Whether disgen renders ``name`` (one of :data:`DATASETS`); False for a stored-only dataset."""
    return canonical_name(name) in _BUILDERS
