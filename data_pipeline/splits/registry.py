"""The split registry: every held-out split of M21, M22 and D21 as data.

Each rule is written on factor classes. The comment beside it gives the authors' value-based
definition it reproduces; ``tests/data_pipeline/test_splits.py`` checks every one against that definition
on the full grid. Names follow the papers (docs/data.md lists them); where an M22 name misleads,
disgen's name says what the split holds out and the authors' name stays as an alias.
"""

from __future__ import annotations

from data_pipeline.factors import FactorSpace
from data_pipeline.spaces import DATASET_ALIASES, DATASETS, canonical_name, factor_space
from data_pipeline.splits.generic import NAME_FORMS, generic_split
from data_pipeline.splits.rules import CONDITION_ALIASES, Modifier, Range, Split


def _c(first: int, last: int) -> tuple[int, ...]:
    """Classes first..last inclusive."""
    return tuple(range(first, last + 1))


_ABOVE_HALF = Range("1/2", None, include_low=False)
_MIDDLE = Range("7/20", "13/20")  # 0.35 <= position <= 0.65

# ---------------------------------------------------------------------------------------------
# dSprites. shape 0 square / 1 ellipse / 2 heart; scale 0..5 = 0.5..1.0;
# orientation 0..39 = linspace(0, 2π, 40); posX, posY 0..31 = linspace(0, 1, 32) = c / 31.
# ---------------------------------------------------------------------------------------------
_DSPRITES = [
    Split("blank_side", "dsprites", "extrapolation", {"posX": _c(16, 31)},
          "posX > 0.5 never seen in training (M21, M22)", aliases=("blank_side_050",), source="M21"),
    Split("blank_side_016", "dsprites", "extrapolation", {"posX": _c(5, 31)},
          "posX > 0.16 never seen in training (M21's extrapolation cut-offs)", source="M21"),
    Split("blank_side_025", "dsprites", "extrapolation", {"posX": _c(8, 31)},
          "posX > 0.25 never seen in training", source="M21"),
    Split("blank_side_075", "dsprites", "extrapolation", {"posX": _c(24, 31)},
          "posX > 0.75 never seen in training", source="M21"),
    Split("shape2tx", "dsprites", "recombination_to_range", {"shape": (0,), "posX": _c(16, 31)},
          "squares on the right half (square & posX > 0.5) held out", aliases=("sqr2tx",),
          source="M21, M22"),
    Split("ell2tx", "dsprites", "recombination_to_range", {"shape": (1,), "posX": _c(16, 31)},
          "ellipses on the right half (ellipse & posX > 0.5) held out", source="M22"),
    Split("sqr2scl", "dsprites", "recombination_to_range", {"shape": (0,), "scale": _c(3, 5)},
          "large squares (square & scale > 0.75) held out", source="M22"),
    # M22's sqr2tx_cent (0.25 < posX < 0.75) and sqr2tx_flnk (not posX < 0.25 or > 0.75) select
    # the same images: neither 0.25 nor 0.75 is on the posX grid.
    Split("square_to_central_posX", "dsprites", "recombination_to_range",
          {"shape": (0,), "posX": _c(8, 23)},
          "squares in the central band 0.25 < posX < 0.75 held out",
          aliases=("sqr2tx_cent", "sqr2tx_flnk"), source="M22"),
    Split("square_to_right_shifted_posX", "dsprites", "recombination_to_range",
          {"shape": (0,), "posX": _c(13, 27)},
          "squares with 0.4 < posX < 0.9 held out", aliases=("sqr2tx_rs",), source="M22"),
    # M22's sqr2tx_ls trains ellipses only at 0.1 < posX < 0.6: it holds out *ellipses*.
    Split("ellipse_to_posX_sides", "dsprites", "recombination_to_range",
          ({"shape": (1,), "posX": _c(0, 3)}, {"shape": (1,), "posX": _c(19, 31)}),
          "ellipses with posX <= 0.1 or posX >= 0.6 held out", aliases=("sqr2tx_ls",), source="M22"),
    Split("leave1out", "dsprites", "recombination_to_element",
          {"shape": (1,), "scale": _c(2, 5), "orientation": _c(14, 25), "posX": _c(21, 31),
           "posY": _c(21, 31)},
          "ellipse & scale > 0.6 & 2π/3 < orientation < 4π/3 & posX > 0.66 & posY > 0.66 (code)",
          source="M21, M22 code"),
    Split("leave1out_text", "dsprites", "recombination_to_element",
          {"shape": (1,), "scale": (0,), "orientation": _c(13, 26), "posX": _c(19, 31),
           "posY": _c(19, 31)},
          "ellipse & scale < 0.6 & 120° <= orientation <= 240° & posX >= 0.6 & posY >= 0.6 "
          "(M21 §2.1 text)", source="M21 text"),
]
_DSPRITES_MODIFIERS = [
    Modifier("sparse_posX", "dsprites", {"posX": (0, 7, 15, 23, 31)},
             description="keeps posX classes 0, 7, 15, 23, 31 only (M22)"),
]

# ---------------------------------------------------------------------------------------------
# 3DShapes. hues 0..9 = 0, 0.1 .. 0.9; scale 0..7 = linspace(0.75, 1.25, 8);
# shape 0 cube / 1 cylinder / 2 sphere / 3 capsule; orientation 0..14 = linspace(-30, 30, 15).
# ---------------------------------------------------------------------------------------------
# D21 protocol on object hue: the encoder never sees hues 2 and 7 (OOD2-A); the
# downstream regressors' OOD1 subsets live inside the other eight.
D21_ENCODER_HELD_OUT_HUES = (2, 7)
D21_ENCODER_HUES = (0, 1, 3, 4, 5, 6, 8, 9)
_D21_KEEP = Modifier("d21_encoder_hues", "shapes3d", {"object_hue": D21_ENCODER_HUES},
                     description="keeps the 8 object hues the D21-style encoder trains on")

_SHAPES3D = [
    Split("fhue_gt50", "shapes3d", "extrapolation", {"floor_hue": _c(5, 9)},
          "floor hue >= 0.5 never seen in training", aliases=("missing_fh",), source="M21, M22"),
    Split("shape2ohue", "shapes3d", "recombination_to_range",
          {"shape": (3,), "object_hue": _c(5, 9)},
          "capsules with object hue >= 0.5 held out", source="M21, M22"),
    Split("shape2fhue", "shapes3d", "recombination_to_range",
          {"shape": (3,), "floor_hue": _c(5, 9)},
          "capsules on floor hue >= 0.5 held out", source="M21, M22"),
    Split("ohue_whue2fhue", "shapes3d", "recombination_to_range",
          {"object_hue": _c(8, 9), "wall_hue": _c(0, 2)},
          "object hue >= 0.8 with wall hue <= 0.2 held out over every floor hue",
          aliases=("ohue+whue2fhue",), source="M21"),
    Split("ohue2whue", "shapes3d", "recombination_to_range",
          {"object_hue": _c(8, 9), "wall_hue": _c(0, 5)},
          "object hue >= 0.75 with wall hue <= 0.5 held out", source="M22"),
    Split("fhue2whue", "shapes3d", "recombination_to_range",
          {"floor_hue": _c(8, 9), "wall_hue": _c(0, 5)},
          "floor hue >= 0.75 with wall hue <= 0.5 held out", source="M22"),
    Split("shape2ohueq", "shapes3d", "recombination_to_range",
          {"shape": (3,), "object_hue": _c(0, 2)},
          "capsules with object hue <= 0.25 held out", source="M22"),
    Split("shape2ohue_flnk", "shapes3d", "recombination_to_range",
          {"shape": (3,), "object_hue": _c(3, 7)},
          "capsules with 0.25 < object hue < 0.75 held out", source="M22"),
    Split("shape2orient", "shapes3d", "recombination_to_range",
          {"shape": (3,), "orientation": _c(7, 14)},
          "capsules at orientation >= 0 held out", source="M22"),
    Split("leave1out", "shapes3d", "recombination_to_element",
          {"object_hue": _c(8, 9), "wall_hue": _c(8, 9), "floor_hue": _c(8, 9), "scale": _c(5, 7),
           "shape": (1,), "orientation": _c(12, 14)},
          "object, wall, floor hue >= 0.8 & scale >= 1.1 & cylinder & orientation > 20 (code)",
          source="M21, M22 code"),
    # The text's scale = 1 is not on the grid (0.964, 1.036 are its neighbours): both are held out.
    Split("leave1out_text", "shapes3d", "recombination_to_element",
          {"floor_hue": _c(6, 9), "wall_hue": _c(6, 9), "object_hue": _c(6, 9), "shape": (1,),
           "scale": (3, 4), "orientation": (7,)},
          "floor, wall, object hue > 0.5 & cylinder & scale ~ 1 (classes 3, 4) & orientation = 0 "
          "(M21 text)", source="M21 text"),
    # M22 files this under recomb2element with the same name as the range split above.
    Split("shape2ohue_element", "shapes3d", "recombination_to_element",
          {"shape": (3,), "object_hue": (2,)},
          "capsules with object hue class 2 held out", aliases=("shape2ohue",), source="M22"),
    Split("odd_ohue", "shapes3d", "interpolation", {"object_hue": (1, 3, 5, 7, 9)},
          "odd object-hue classes never seen in training", source="M22"),
    Split("odd_wnf_hue", "shapes3d", "interpolation",
          ({"wall_hue": (1, 3, 5, 7, 9)}, {"floor_hue": (1, 3, 5, 7, 9)}),
          "an odd wall-hue or floor-hue class never seen in training", source="M22"),
    # D21's OOD protocol run on object hue.
    Split("d21_ood2a", "shapes3d", "interpolation", {"object_hue": D21_ENCODER_HELD_OUT_HUES},
          "OOD2-A: the encoder never sees object hues 2 and 7", source="D21 (on 3DShapes)"),
    Split("d21_ood1a", "shapes3d", "extrapolation", {"object_hue": D21_ENCODER_HUES[1:]},
          "OOD1-A: regressors train on 1 hue (red, class 0) and test on the other 7 encoder hues",
          modifiers=(_D21_KEEP,), source="D21 (on 3DShapes)"),
    Split("d21_ood1b", "shapes3d", "extrapolation", {"object_hue": D21_ENCODER_HUES[:4]},
          "OOD1-B: regressors train on the 4 high encoder hues and test on the 4 low ones",
          modifiers=(_D21_KEEP,), source="D21 (on 3DShapes)"),
    Split("d21_ood1c", "shapes3d", "interpolation", {"object_hue": D21_ENCODER_HUES[1::2]},
          "OOD1-C: regressors train and test on alternating encoder hues",
          modifiers=(_D21_KEEP,), source="D21 (on 3DShapes)"),
]
_SHAPES3D_MODIFIERS = [
    Modifier("even_object_hues", "shapes3d", {"object_hue": (0, 2, 4, 6, 8)},
             description="keeps even object-hue classes (M22 even_ohues)", aliases=("even_ohues",)),
    Modifier("object_hue_lt05", "shapes3d", {"object_hue": _c(0, 4)},
             description="keeps object hue < 0.5 (M22 half_ohues)", aliases=("half_ohues",)),
    Modifier("even_wall_floor_hues", "shapes3d",
             {"wall_hue": (0, 2, 4, 6, 8), "floor_hue": (0, 2, 4, 6, 8)},
             description="keeps even wall- and floor-hue classes (M22 even_wnf_hues)",
             aliases=("even_wnf_hues",)),
    _D21_KEEP,
]

# ---------------------------------------------------------------------------------------------
# MPI3D (values are classes). colour 0 white .. 5 olive; shape 0 cone, 1 cube, 2 cylinder,
# 3 hexagonal, 4 pyramid, 5 sphere; axes 0..39.
# ---------------------------------------------------------------------------------------------
_MPI3D = [
    # The authors' code trains on < 20 and tests on > 20, so class 20 is in neither set; here it
    # trains.
    Split("horz_gt20", "mpi3d", "extrapolation", {"horizontal_axis": _c(21, 39)},
          "horizontal axis > 20 never seen in training (class 20 trains)", source="M21, M22"),
    Split("objc_gt3", "mpi3d", "extrapolation", {"object_color": _c(4, 5)},
          "object colours 4, 5 (brown, olive) never seen in training", source="M22"),
    Split("cyl2horz", "mpi3d", "recombination_to_range",
          {"horizontal_axis": _c(0, 19), "object_shape": (2,)},
          "cylinders at horizontal axis < 20 held out", aliases=("cyl2hx",), source="M21, M22"),
    Split("cyl2vert", "mpi3d", "recombination_to_range",
          {"vertical_axis": _c(0, 19), "object_shape": (2,)},
          "cylinders at vertical axis < 20 held out", aliases=("cyl2vx",), source="M22"),
    Split("objc2horz", "mpi3d", "recombination_to_range",
          {"horizontal_axis": _c(0, 19), "object_color": (2,)},
          "red objects at horizontal axis < 20 held out", aliases=("redoc2hx",), source="M21, M22"),
    # M22's bkg2cyl holds out pyramids and spheres (shape >= 4) on the salmon background.
    Split("pyramid_sphere_to_background", "mpi3d", "recombination_to_range",
          {"object_shape": (4, 5), "background_color": (2,)},
          "pyramids and spheres on background 2 (salmon) held out", aliases=("bkg2cyl",),
          source="M22"),
    Split("leave1out", "mpi3d", "recombination_to_element",
          {"object_color": (5,), "object_shape": (2,), "object_size": (1,), "camera_height": (1,),
           "background_color": (1,), "horizontal_axis": _c(36, 39), "vertical_axis": _c(36, 39)},
          "colour 5 & cylinder & large & camera 1 & background 1 & both axes > 35", source="M21, M22"),
]
_MPI3D_MODIFIERS = [
    Modifier("four_shapes", "mpi3d", {"object_shape": (1, 2, 4, 5)},
             description="drops cones and hexagonal objects (M22)"),
    # M22 calls this even_vx, but it keeps the odd classes.
    Modifier("odd_vertical_axis", "mpi3d", {"vertical_axis": tuple(range(1, 40, 2))},
             description="keeps odd vertical-axis classes", aliases=("even_vx",)),
    Modifier("horizontal_axis_0", "mpi3d", {"horizontal_axis": (0,)},
             description="keeps horizontal axis class 0", aliases=("fix_hx",)),
    Modifier("horizontal_axis_lt20", "mpi3d", {"horizontal_axis": _c(0, 19)},
             description="keeps horizontal axis < 20", aliases=("lhalf_hx",)),
]

# ---------------------------------------------------------------------------------------------
# Circles, Simple, TwoShapes (M22). Positions are linspace(0, 1, n); grid sizes come from the
# file, so position bounds are exact fractions of the range.
# ---------------------------------------------------------------------------------------------
_SPRITES = [
    Split("shape2px", "circles", "recombination_to_range", {"posX": _ABOVE_HALF, "posY": _ABOVE_HALF},
          "circles in the bottom-right quadrant (posX > 0.5 & posY > 0.5) held out", source="M22"),
    Split("midpos", "circles", "recombination_to_range", {"posX": _MIDDLE, "posY": _MIDDLE},
          "circles with posX and posY both in [0.35, 0.65] held out (M22 files it under range)",
          source="M22"),
    Split("shape2px", "simple", "recombination_to_range",
          {"shape": (1,), "posX": _ABOVE_HALF, "posY": _ABOVE_HALF},
          "shape 1 with posX > 0.5 & posY > 0.5 held out", source="M22"),
    Split("midpos", "simple", "recombination_to_range",
          {"shape": (1,), "posX": _MIDDLE, "posY": _MIDDLE},
          "shape 1 with posX and posY both in [0.35, 0.65] held out", source="M22"),
    Split("huecomb", "twoshapes", "recombination_to_range",
          {"hue_1": Range(None, 1, unit="class"), "hue_2": Range(3, None, unit="class")},
          "object-1 hue class < 2 with object-2 hue class > 2 held out", source="M22"),
]
_SPRITES_MODIFIERS = [
    Modifier("non_overlapping", "twoshapes",
             apart=(("posX_1", "posX_2", "1/5"), ("posY_1", "posY_2", "1/5")),
             description="keeps scenes whose objects differ by > 0.2 in both posX and posY",
             aliases=("noverlap",)),
]

_SPLITS = _DSPRITES + _SHAPES3D + _MPI3D + _SPRITES
_MODIFIERS = _DSPRITES_MODIFIERS + _SHAPES3D_MODIFIERS + _MPI3D_MODIFIERS + _SPRITES_MODIFIERS

SPLITS: dict[tuple[str, str], Split] = {(s.dataset, s.name): s for s in _SPLITS}
MODIFIERS: dict[tuple[str, str], Modifier] = {(m.dataset, m.name): m for m in _MODIFIERS}
if len(SPLITS) != len(_SPLITS) or len(MODIFIERS) != len(_MODIFIERS):
    raise RuntimeError("split registry: two entries share a (dataset, name)")


def _lookup(entries, dataset: str, name: str):
    exact = [e for e in entries if e.dataset == dataset and e.name == name]
    return exact or [e for e in entries if e.dataset == dataset and name in e.aliases]


def get_modifier(dataset: str, name: str) -> Modifier:
    """The registered modifier ``name`` (or alias) of ``dataset``."""
    dataset = canonical_name(dataset)
    found = _lookup(_MODIFIERS, dataset, name)
    if not found:
        known = sorted(m.name for m in _MODIFIERS if m.dataset == dataset)
        raise KeyError(f"no modifier {name!r} for dataset {dataset!r}; known: {', '.join(known) or 'none'}")
    return found[0]


def get_split(dataset: str, name: str, condition: str | None = None,
              space: FactorSpace | None = None) -> Split:
    """The registered split ``name`` of ``dataset``; ``+modifier`` suffixes AND modifiers on.

    ``name`` may be disgen's name or an author's alias. ``condition`` (ours or M22's spelling)
    picks between entries that share an alias, e.g. M22's two ``shape2ohue`` splits on 3DShapes.
    A name that is not registered may be a generic split (:mod:`data_pipeline.splits.generic`:
    ``<factor>_gt050``, ``random_combinations``…), built on ``space`` (default: the dataset's).
    A dataset that is not registered, such as a generic labelled dataset, needs ``space`` and
    has only the generic splits. The error lists the known names.
    """
    if space is not None and str(dataset).lower() not in DATASETS + tuple(DATASET_ALIASES):
        return generic_split(str(dataset), space, str(name))
    dataset = canonical_name(dataset)
    name = str(name)
    base, modifier_names = name, []
    if "+" in name and not _lookup(_SPLITS, dataset, name):
        base, *modifier_names = name.split("+")
    found = _lookup(_SPLITS, dataset, base)
    if condition is not None:
        wanted = CONDITION_ALIASES.get(condition, condition)
        found = [s for s in found if s.condition == wanted] or [
            s for s in _SPLITS if s.dataset == dataset and base in s.aliases and s.condition == wanted]
    if not found and condition is None:
        try:
            found = [generic_split(dataset, space or factor_space(dataset), base)]
        except KeyError:
            pass
    if not found:
        known = sorted(s.name for s in _SPLITS if s.dataset == dataset)
        raise KeyError(f"no split {name!r} for dataset {dataset!r}; known: {', '.join(known) or 'none'}; "
                       f"generic: {NAME_FORMS}")
    split = found[0]
    if modifier_names:
        split = split.with_modifiers(*(get_modifier(dataset, m) for m in modifier_names))
    return split


def splits_of(dataset: str) -> list[Split]:
    """Every registered split of ``dataset``, in registry order."""
    dataset = canonical_name(dataset)
    return [s for s in _SPLITS if s.dataset == dataset]


def modifiers_of(dataset: str) -> list[Modifier]:
    """Every registered modifier of ``dataset``."""
    dataset = canonical_name(dataset)
    return [m for m in _MODIFIERS if m.dataset == dataset]
