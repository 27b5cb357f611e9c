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
========================  ==========================================================================

Circles, Simple and TwoShapes come from the M22 code, which does not fix their grid sizes; the
sizes here are a documented default and :func:`sprite_space` builds the space for any sizes.
"""

from __future__ import annotations

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

DATASETS = tuple(_BUILDERS)


def canonical_name(name: str) -> str:
    """The canonical dataset name for ``name`` or one of its aliases; a clear error otherwise."""
    key = str(name).lower()
    key = DATASET_ALIASES.get(key, key)
    if key not in _BUILDERS:
        raise KeyError(
            f"unknown dataset {name!r}; known: {', '.join(DATASETS)} "
            f"(aliases: {', '.join(sorted(DATASET_ALIASES))})"
        )
    return key


def factor_space(name: str) -> FactorSpace:
    """The default factor space of a dataset by name (aliases such as ``3dshapes`` accepted)."""
    return _BUILDERS[canonical_name(name)]()
