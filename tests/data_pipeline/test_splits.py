"""The split registry: every split against the authors' value-based definition on the full grid,
boundaries, aliases, modifiers, and property-based guarantees (disjoint, covering)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_pipeline import factor_space, get_modifier, get_split
from data_pipeline.splits import SPLITS, Range, Split, splits_of
from data_pipeline.splits.__main__ import split_table

PI = np.pi

# The authors' definitions on raw values (M21/M22 code; the papers' text for the text variants).
# dSprites columns: shape (1 square, 2 ellipse, 3 heart), scale, orientation (rad), posX, posY.
DSPRITES_RULES = {
    "blank_side": lambda v: v[:, 3] > 0.5,
    "blank_side_016": lambda v: v[:, 3] > 0.16,
    "blank_side_025": lambda v: v[:, 3] > 0.25,
    "blank_side_075": lambda v: v[:, 3] > 0.75,
    "shape2tx": lambda v: (v[:, 0] == 1) & (v[:, 3] > 0.5),
    "ell2tx": lambda v: (v[:, 0] == 2) & (v[:, 3] > 0.5),
    "sqr2scl": lambda v: (v[:, 0] == 1) & (v[:, 1] > 0.75),
    "sqr2tx_cent": lambda v: (v[:, 0] == 1) & (v[:, 3] > 0.25) & (v[:, 3] < 0.75),
    "sqr2tx_flnk": lambda v: ~((v[:, 0] != 1) | (v[:, 3] < 0.25) | (v[:, 3] > 0.75)),
    "sqr2tx_rs": lambda v: (v[:, 0] == 1) & (v[:, 3] > 0.40) & (v[:, 3] < 0.90),
    "sqr2tx_ls": lambda v: ~((v[:, 0] != 2) | ((v[:, 3] > 0.10) & (v[:, 3] < 0.60))),
    "leave1out": lambda v: ((v[:, 0] == 2) & (v[:, 1] > 0.6) & (v[:, 2] > 2 * PI / 3)
                            & (v[:, 2] < 4 * PI / 3) & (v[:, 3] > 0.66) & (v[:, 4] > 0.66)),
    "leave1out_text": lambda v: ((v[:, 0] == 2) & (v[:, 1] < 0.6) & (v[:, 2] >= 2 * PI / 3 - 1e-9)
                                 & (v[:, 2] <= 4 * PI / 3 + 1e-9) & (v[:, 3] >= 0.6) & (v[:, 4] >= 0.6)),
}
# 3DShapes columns: floor_hue, wall_hue, object_hue, scale, shape, orientation (degrees).
# Hue thresholds compare against the hue grid (0.1 * class), with a margin where a threshold
# sits on a grid point and the code's >= or <= includes it.
E = 1e-9
SHAPES3D_RULES = {
    "fhue_gt50": lambda v: v[:, 0] >= 0.5 - E,
    "shape2ohue": lambda v: (v[:, 4] == 3) & (v[:, 2] >= 0.5 - E),
    "shape2fhue": lambda v: (v[:, 4] == 3) & (v[:, 0] >= 0.5 - E),
    "ohue_whue2fhue": lambda v: (v[:, 2] >= 0.8 - E) & (v[:, 1] <= 0.2 + E),
    "ohue2whue": lambda v: (v[:, 2] >= 0.75) & (v[:, 1] <= 0.5 + E),
    "fhue2whue": lambda v: (v[:, 0] >= 0.75) & (v[:, 1] <= 0.5 + E),
    "shape2ohueq": lambda v: (v[:, 4] == 3) & (v[:, 2] <= 0.25),
    "shape2ohue_flnk": lambda v: (v[:, 4] == 3) & (v[:, 2] > 0.25) & (v[:, 2] < 0.75),
    "shape2orient": lambda v: (v[:, 4] == 3) & (v[:, 5] >= 0 - E),
    "leave1out": lambda v: ((v[:, 2] >= 0.8 - E) & (v[:, 1] >= 0.8 - E) & (v[:, 0] >= 0.8 - E)
                            & (v[:, 3] >= 1.1) & (v[:, 4] == 1) & (v[:, 5] > 20)),
    "leave1out_text": lambda v: ((v[:, 0] > 0.5 + E) & (v[:, 1] > 0.5 + E) & (v[:, 2] > 0.5 + E)
                                 & (v[:, 4] == 1) & (np.abs(v[:, 3] - 1) < 0.05) & (np.abs(v[:, 5]) < E)),
    "shape2ohue_element": lambda v: (v[:, 4] == 3) & (np.round(v[:, 2] * 10) == 2),
    "odd_ohue": lambda v: np.round(v[:, 2] * 10) % 2 == 1,
    "odd_wnf_hue": lambda v: ~((np.round(v[:, 1] * 10) % 2 == 0) & (np.round(v[:, 0] * 10) % 2 == 0)),
    "d21_ood2a": lambda v: np.isin(np.round(v[:, 2] * 10), [2, 7]),
}
# MPI3D values are classes: color, shape, size, camera, background, horizontal, vertical.
MPI3D_RULES = {
    "horz_gt20": lambda v: v[:, 5] > 20,
    "objc_gt3": lambda v: v[:, 0] > 3,
    "cyl2hx": lambda v: (v[:, 5] < 20) & (v[:, 1] == 2),
    "cyl2vx": lambda v: (v[:, 6] < 20) & (v[:, 1] == 2),
    "redoc2hx": lambda v: (v[:, 5] < 20) & (v[:, 0] == 2),
    "bkg2cyl": lambda v: (v[:, 1] >= 4) & (v[:, 4] == 2),
    "leave1out": lambda v: ((v[:, 0] == 5) & (v[:, 1] == 2) & (v[:, 2] == 1) & (v[:, 3] == 1)
                            & (v[:, 4] == 1) & (v[:, 5] > 35) & (v[:, 6] > 35)),
}
CASES = ([("dsprites", n) for n in DSPRITES_RULES] + [("shapes3d", n) for n in SHAPES3D_RULES]
         + [("mpi3d", n) for n in MPI3D_RULES])
RULES = {"dsprites": DSPRITES_RULES, "shapes3d": SHAPES3D_RULES, "mpi3d": MPI3D_RULES}


@pytest.fixture(scope="module")
def grids():
    out = {}
    for dataset in ("dsprites", "shapes3d", "mpi3d"):
        space = factor_space(dataset)
        classes = space.all_classes()
        out[dataset] = (space, classes, space.raw_values(classes))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("dataset,name", CASES)
def test_class_rule_equals_the_value_rule_on_the_full_grid(grids, dataset, name):
    space, classes, values = grids[dataset]
    split = get_split(dataset, name)
    test = split.test_mask(classes, space)
    train = split.train_mask(classes, space)
    assert (test == RULES[dataset][name](values)).all()
    assert not (train & test).any() and (train | test).all()


def test_every_registered_split_of_a_fixed_grid_has_a_value_definition():
    names = {get_split(d, n).name for d, n in CASES}
    registered = {s.name for d in ("dsprites", "shapes3d", "mpi3d") for s in splits_of(d)
                  if not s.modifiers}
    assert registered == names


def test_boundaries_follow_the_spec(grids):
    space, classes, _ = grids["dsprites"]
    posx = classes[:, 3]
    test = get_split("dsprites", "blank_side").test_mask(classes, space)
    assert not test[posx == 15].any() and test[posx == 16].all()  # 15/31 < 0.5 < 16/31
    space, classes, _ = grids["mpi3d"]
    train, test = get_split("mpi3d", "horz_gt20").train_test_indices(classes, space)
    horizontal = classes[:, 5]
    assert (horizontal[test] > 20).all() and (horizontal[train] <= 20).all()
    assert (horizontal[train] == 20).sum() == space.n_images // 40  # class 20 trains, not lost
    space, classes, _ = grids["shapes3d"]
    test = get_split("shapes3d", "fhue_gt50").test_mask(classes, space)
    assert test[classes[:, 0] == 5].all() and not test[classes[:, 0] == 4].any()  # hue 0.5 held out


def test_spec_class_definition_of_dsprites_leave1out():
    split = get_split("dsprites", "leave1out")
    assert split.test_when == {"shape": (1,), "scale": (2, 3, 4, 5), "orientation": tuple(range(14, 26)),
                               "posX": tuple(range(21, 32)), "posY": tuple(range(21, 32))}


def test_authors_names_are_aliases_and_conditions_pick_between_them():
    assert get_split("dsprites", "sqr2tx_ls").name == "ellipse_to_posX_sides"
    assert get_split("dsprites", "sqr2tx_cent") is get_split("dsprites", "sqr2tx_flnk")
    assert get_split("mpi3d", "bkg2cyl").name == "pyramid_sphere_to_background"
    assert get_split("3dshapes", "missing_fh").name == "fhue_gt50"
    assert get_split("shapes3d", "ohue+whue2fhue").name == "ohue_whue2fhue"
    assert get_split("shapes3d", "shape2ohue").condition == "recombination_to_range"
    element = get_split("shapes3d", "shape2ohue", condition="recomb2element")
    assert element.name == "shape2ohue_element" and element.condition == "recombination_to_element"
    assert get_modifier("mpi3d", "even_vx").name == "odd_vertical_axis"


def test_modifiers_and_onto_both_sides(grids):
    space, classes, _ = grids["mpi3d"]
    split = get_split("mpi3d", "horz_gt20+four_shapes+even_vx")
    assert split.name == "horz_gt20+four_shapes+odd_vertical_axis"
    train, test = split.train_test_indices(classes, space)
    for side in (train, test):
        assert not np.isin(classes[side, 1], [0, 3]).any()  # cones and hexagonal dropped
        assert (classes[side, 6] % 2 == 1).all()  # "even_vx" keeps odd classes
    assert len(train) + len(test) == space.n_images * 4 // 6 // 2
    space, classes, _ = grids["dsprites"]
    train, test = get_split("dsprites", "blank_side+sparse_posX").train_test_indices(classes, space)
    assert set(np.unique(classes[train, 3])) == {0, 7, 15} and set(np.unique(classes[test, 3])) == {23, 31}


def test_twoshapes_huecomb_and_noverlap():
    space = factor_space("twoshapes")
    classes = space.all_classes()
    values = space.raw_values(classes)
    split = get_split("twoshapes", "huecomb")
    assert (split.test_mask(classes, space) == ((classes[:, 3] < 2) & (classes[:, 7] > 2))).all()
    keep = get_modifier("twoshapes", "noverlap").keep_mask(classes, space)
    dx, dy = np.abs(values[:, 0] - values[:, 4]), np.abs(values[:, 1] - values[:, 5])
    assert (keep == ((dx > 0.2) & (dy > 0.2))).all()


@pytest.mark.parametrize("dataset", ["circles", "simple"])
@pytest.mark.parametrize("n", [5, 21, 32, 42])
def test_circles_family_splits_follow_values_for_any_grid_size(dataset, n):
    from data_pipeline.spaces import CIRCLES_NAMES, SIMPLE_NAMES, sprite_space

    names = CIRCLES_NAMES if dataset == "circles" else SIMPLE_NAMES
    space = sprite_space(names, (n, n) if dataset == "circles" else (n, n, 3))
    classes = space.all_classes()
    v = space.raw_values(classes)
    shape_ok = np.ones(len(v), bool) if dataset == "circles" else classes[:, 2] == 1
    expected = {
        "shape2px": shape_ok & (v[:, 0] > 0.5) & (v[:, 1] > 0.5),
        "midpos": shape_ok & (v[:, 0] >= 0.35 - E) & (v[:, 0] <= 0.65 + E) & (v[:, 1] >= 0.35 - E)
        & (v[:, 1] <= 0.65 + E),
    }
    for name, mask in expected.items():
        assert (get_split(dataset, name).test_mask(classes, space) == mask).all()


def test_a_split_that_empties_a_side_names_the_split():
    space = factor_space("mpi3d")
    left = np.array([[0, 0, 0, 0, 0, 3, 3], [1, 2, 1, 1, 1, 20, 39]])
    with pytest.raises(ValueError, match="horz_gt20.*test set empty"):
        get_split("mpi3d", "horz_gt20").train_test_indices(left, space)
    everything_held_out = np.array([[0, 0, 0, 0, 0, 30, 3]])
    with pytest.raises(ValueError, match="horz_gt20.*training set empty"):
        get_split("mpi3d", "horz_gt20").train_test_indices(everything_held_out, space)


def test_bad_rules_and_names_fail_clearly():
    with pytest.raises(ValueError, match="condition must be one of"):
        Split("x", "dsprites", "sideways", {"posX": (1,)})
    with pytest.raises(ValueError, match="tuple of classes or a Range"):
        Split("x", "dsprites", "extrapolation", {"posX": [1, 2]})
    with pytest.raises(KeyError, match="sparse_posX"):
        get_split("dsprites", "blank_side+nope")
    with pytest.raises(KeyError, match="unknown dataset"):
        get_split("cifar", "blank_side")


def test_exact_fraction_range_bounds():
    assert Range("1/2", None, include_low=False).classes(32) == tuple(range(16, 32))
    assert Range("1/2", None, include_low=False).classes(3) == (2,)
    assert Range("1/2", None).classes(3) == (1, 2)
    assert Range(None, 1, unit="class").classes(5) == (0, 1)


@pytest.mark.slow
def test_listing_counts_add_up():
    rows = split_table()
    assert {(r["dataset"], r["name"]) for r in rows} == set(SPLITS)
    for r in rows:
        if not r["modifiers"]:
            assert r["train"] + r["test"] == r["grid"] and r["train"] > 0 and r["test"] > 0


# Property-based: any registered split, on any sample of its grid, gives disjoint sides that
# cover the sample (modifiers aside), and each side obeys the rule.
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_sides_are_disjoint_and_cover_any_sample(data):
    key = data.draw(st.sampled_from(sorted(SPLITS)))
    split = SPLITS[key]
    space = factor_space(split.dataset)
    index = np.asarray(data.draw(st.lists(st.integers(0, space.n_images - 1), min_size=1, max_size=300)))
    classes = space.classes_of(index)
    test = split.test_mask(classes, space)
    train = split.train_mask(classes, space)
    assert not (train & test).any()
    if not split.modifiers:
        assert (train | test).all()
    held = split.held_out_mask(classes, space)
    assert (held[test]).all() and not held[train].any()
    if train.any() and test.any():
        tr, te = split.train_test_indices(classes, space)
        assert np.array_equal(tr, np.flatnonzero(train)) and np.array_equal(te, np.flatnonzero(test))
    else:
        with pytest.raises(ValueError, match=split.name):
            split.train_test_indices(classes, space)


@pytest.fixture(scope="module")
def dsprites_grid():
    space = factor_space("dsprites")
    classes = space.all_classes()
    return space, classes, space.raw_values(classes)


def test_leave1out_holds_out_one_combination_of_the_expected_size(dsprites_grid):
    space, classes, _ = dsprites_grid
    train, test = get_split("dsprites", "leave1out").train_test_indices(classes, space)
    assert len(test) == 1 * 4 * 12 * 11 * 11
    assert len(train) + len(test) == space.n_images
    assert not set(train.tolist()) & set(test.tolist())


def test_a_dsprites_split_that_empties_a_side_names_the_split():
    space = factor_space("dsprites")
    only_left = np.array([[0, 0, 0, 0, 0], [1, 2, 3, 4, 5]])  # posX classes < 16: nothing held out
    with pytest.raises(ValueError, match="blank_side.*test set empty"):
        get_split("dsprites", "blank_side").train_test_indices(only_left, space)


def test_unknown_split_lists_the_known_ones():
    with pytest.raises(KeyError, match="blank_side"):
        get_split("dsprites", "nope")


@pytest.mark.parametrize("dataset, split, count", [
    ("dsprites", "leave1out", 1 * 4 * 12 * 11 * 11),  # shape 1, scale 2-5, orientation 14-25, posX/posY 21-31
    ("dsprites", "blank_side", 3 * 6 * 40 * 16 * 32),  # posX classes 16-31
    ("circles", "shape2px", 16 * 16),  # posX and posY above one half
    ("circles", "midpos", 10 * 10),  # posX and posY in [0.35, 0.65]: classes 11-20
    ("dsprites", "shape2tx+sparse_posX", 1 * 6 * 40 * 2 * 32),  # squares at posX 23 and 31 only
])
def test_the_whole_grids_held_out_combinations_are_counted_in_closed_form(dataset, split, count):
    space = factor_space(dataset)
    indices = get_split(dataset, split).test_grid_indices(space)
    assert len(indices) == count and (np.diff(indices) > 0).all()
    held_out = space.classes_of(indices)
    assert get_split(dataset, split).test_mask(held_out, space).all()
