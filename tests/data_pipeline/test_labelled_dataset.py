"""The generic labelled dataset: a user's images with factor values, in .npz and .h5, and the
splits that fit any factor space."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from data_pipeline import factor_space, get_split, load_labelled
from data_pipeline.labelled import DEFAULT_BINS, discretise, write_labelled
from data_pipeline.loaders import load_real
from data_pipeline.splits import generic_splits, random_combinations_split


def d21_like(n=60, seed=0):
    """Correlated, non-factorial labels: a joint angle (continuous), a cube hue (6 discrete
    values) and a cube height that follows the joint; RGB images channels last."""
    rng = np.random.default_rng(seed)
    joint = rng.uniform(-1.0, 1.0, n)
    hue = rng.integers(0, 6, n) / 6
    height = np.round(np.clip(joint + rng.normal(0, 0.1, n), -1, 1), 1)  # ≤ 21 distinct values
    images = rng.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8)
    return images, np.stack([joint, hue, height], axis=1)


def test_npz_file_loads_with_values_discretised_as_documented(tmp_path):
    images, factors = d21_like()
    path = tmp_path / "robot.npz"
    np.savez(path, images=images, factors=factors, factor_names=np.array(["joint", "hue", "height"]))
    data = load_labelled(path)
    assert data.images.shape == (60, 3, 8, 8) and data.images.dtype == np.uint8
    assert np.array_equal(data.images, images.transpose(0, 3, 1, 2))
    space = data.factor_space
    assert space.names == ("joint", "hue", "height")
    # joint: 60 distinct values, at most MAX_DISTINCT_CLASSES (64): each value is its own class
    assert space.sizes[0] == 60
    assert np.array_equal(space.values[0][data.classes[:, 0]], factors[:, 0])
    assert np.array_equal(space.values[1], np.arange(6) / 6)
    assert np.array_equal(data.classes[:, 1], np.round(factors[:, 1] * 6).astype(int))
    assert data.observe is None  # not a grid: metrics that render grid points cannot run


def test_bins_cut_the_range_into_equal_widths_with_the_maximum_in_the_last():
    values = np.array([0.0, 0.24, 0.25, 0.5, 0.99, 1.0])
    classes, centres = discretise(values, 4)
    assert classes.tolist() == [0, 0, 1, 2, 3, 3]
    assert np.allclose(centres, [0.125, 0.375, 0.625, 0.875])
    many = np.linspace(0, 1, 65)  # more distinct values than MAX_DISTINCT_CLASSES: default bins
    classes, centres = discretise(many)
    assert len(centres) == DEFAULT_BINS and classes.max() == DEFAULT_BINS - 1
    assert discretise(np.full(5, 3.0), 4)[1].tolist() == [3.0]  # a constant factor: one class


def test_hdf5_file_with_factor_bins_and_bytes_names(tmp_path):
    images, factors = d21_like()
    path = tmp_path / "robot.h5"
    with h5py.File(path, "w") as f:
        f["images"] = images[..., 0]  # greyscale (N, H, W)
        f["factors"] = factors
        f["factor_names"] = np.array([b"joint", b"hue", b"height"])
        f["factor_bins"] = np.array([4, 0, 0])
    data = load_labelled(path)
    assert data.images.shape == (60, 1, 8, 8)
    assert data.factor_space.sizes[0] == 4
    expected = np.clip(np.floor((factors[:, 0] - factors[:, 0].min()) / np.ptp(factors[:, 0]) * 4), 0, 3)
    assert np.array_equal(data.classes[:, 0], expected)
    # the bins argument overrides the file, by factor name
    assert load_labelled(path, bins={"joint": 2}).factor_space.sizes[0] == 2


def test_writer_round_trips_and_load_real_finds_it_by_name(tmp_path):
    images, factors = d21_like(n=12)
    write_labelled(tmp_path / "labelled.npz", images > 127, factors, ["joint", "hue", "height"], [3, 0, 0])
    data = load_real("labelled", data_dir=tmp_path)
    assert set(np.unique(data.images)) == {0, 255}  # bool pixels become 0/255
    assert data.factor_space.sizes[0] == 3
    same = load_real("labelled", path=tmp_path / "labelled.npz")
    assert np.array_equal(same.classes, data.classes)


def test_factor_kinds_are_read_from_the_file_and_ordinal_by_default(tmp_path):
    images, factors = d21_like(n=12)
    for name in ("labelled.npz", "labelled.h5"):
        write_labelled(tmp_path / name, images, factors, ["joint", "hue", "height"],
                       factor_kinds=["ordinal", "categorical", "ordinal"])
        space = load_labelled(tmp_path / name).factor_space
        assert space.kinds == ("ordinal", "categorical", "ordinal") and space.kind("hue") == "categorical"
    write_labelled(tmp_path / "plain.npz", images, factors)
    assert load_labelled(tmp_path / "plain.npz").factor_space.kinds == ("ordinal",) * 3


@pytest.mark.parametrize("arrays, message", [
    (dict(images=np.zeros((4, 8, 8), np.uint8), factors=np.zeros((4, 2)), factor_kinds=np.array(["ordinal"])),
     "factor_kinds: kinds: expected one of categorical, ordinal, circular for each of the 2 factors"),
    (dict(images=np.zeros((4, 8, 8), np.uint8), factors=np.zeros((4, 1)), factor_kinds=np.array(["round"])),
     "factor_kinds: kinds: expected one of"),
    (dict(images=np.zeros((4, 8, 8), np.uint8)), "missing factors"),
    (dict(images=np.zeros((4, 8, 8), np.float32), factors=np.zeros((4, 1))), "expected dtype uint8"),
    (dict(images=np.zeros((4, 3, 8, 8), np.uint8), factors=np.zeros((4, 1))),
     r"\(N, H, W, C\) with C = 1 or 3"),
    (dict(images=np.zeros((4, 8, 8), np.uint8), factors=np.zeros((3, 1))), "one row per image"),
    (dict(images=np.zeros((4, 8, 8), np.uint8), factors=np.zeros(4)), r"expected shape \(N, F\)"),
    (dict(images=np.zeros((4, 8, 8), np.uint8), factors=np.array([[0.0], [np.nan], [1], [2]])),
     "row 1, column 0 is nan"),
    (dict(images=np.zeros((4, 8, 8), np.uint8), factors=np.zeros((4, 2)), factor_names=np.array(["a"])),
     "expected 2 names"),
    (dict(images=np.zeros((4, 8, 8), np.uint8), factors=np.zeros((4, 2)), factor_bins=np.array([1.5, 2])),
     "factor_bins: expected an integer array"),
    (dict(images=np.zeros((4, 8, 8), np.uint8), factors=np.zeros((4, 1)), factor_bins=np.array([-1])),
     "factor 'factor_0': bins must be 0"),
])
def test_bad_files_say_what_was_expected(tmp_path, arrays, message):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=message):
        load_labelled(path)


def test_unknown_suffix_and_pickled_names_are_refused_clearly(tmp_path):
    with pytest.raises(ValueError, match="expected a .npz, .h5 or .hdf5"):
        (tmp_path / "x.csv").write_text("1")
        load_labelled(tmp_path / "x.csv")
    path = tmp_path / "pickled.npz"
    np.savez(path, images=np.zeros((2, 4, 4), np.uint8), factors=np.zeros((2, 1)),
             factor_names=np.array(["a"], dtype=object))
    with pytest.raises(ValueError, match="string array"):
        load_labelled(path)


def test_extrapolation_cutoffs_on_a_named_factor(tmp_path):
    images, factors = d21_like(n=200)
    path = tmp_path / "robot.npz"
    np.savez(path, images=images, factors=factors, factor_names=np.array(["joint", "hue", "height"]),
             factor_bins=np.array([8, 0, 0]))
    data = load_labelled(path)
    for cutoff, held_out_bins in (("016", range(2, 8)), ("025", range(2, 8)), ("050", range(4, 8)),
                                  ("075", range(6, 8))):
        # bin centres sit at positions c / 7: 1/7 = 0.143, 2/7 = 0.286; 0.5 lies between 3/7 and 4/7
        split = get_split("labelled", f"joint_gt{cutoff}", space=data.factor_space)
        assert split.condition == "extrapolation"
        train, test = split.train_test_indices(data.classes, data.factor_space)
        assert np.array_equal(np.sort(np.concatenate([train, test])), np.arange(200))
        assert set(data.classes[test, 0]) <= set(held_out_bins)
        assert not set(data.classes[train, 0]) & set(held_out_bins)
    # hue values 0, 1/6 .. 5/6: positions c / 5, so above 0.5 are classes 3, 4, 5 (0.6, 0.8, 1)
    hue = get_split("labelled", "hue_gt050", space=data.factor_space)
    assert hue.test_when["hue"] == (3, 4, 5)


def test_generic_cutoffs_equal_the_registered_dsprites_ones():
    space = factor_space("dsprites")
    for cutoff in ("016", "025", "075"):
        assert get_split("dsprites", f"posX_gt{cutoff}").test_when == \
            get_split("dsprites", f"blank_side_{cutoff}").test_when
    assert get_split("dsprites", "posX_gt050").test_when == get_split("dsprites", "blank_side").test_when
    assert len(generic_splits("dsprites", space, ("posX",))) == 5


def test_random_combinations_hold_out_whole_combinations_reproducibly(tmp_path):
    rng = np.random.default_rng(1)
    # a non-factorial dataset with repeated combinations: 400 images over 3 × 4 × 5 = 60 combinations
    factors = np.stack([rng.integers(0, 3, 400), rng.integers(0, 4, 400), rng.integers(0, 5, 400)], 1)
    path = write_labelled(tmp_path / "combos.npz", np.zeros((400, 4, 4), np.uint8), factors.astype(float))
    data = load_labelled(path)
    split = get_split("labelled", "random_combinations_25_seed3", space=data.factor_space)
    assert split.condition == "recombination_to_element"
    train, test = split.train_test_indices(data.classes, data.factor_space)
    assert len(train) + len(test) == 400 and not set(train) & set(test)
    train_combos = {tuple(c) for c in data.classes[train]}
    test_combos = {tuple(c) for c in data.classes[test]}
    assert not train_combos & test_combos  # no held-out combination is ever seen in training
    # the decision depends on the combination only: any row subset agrees with the whole
    subset = data.classes[::7]
    assert np.array_equal(split.test_mask(subset, data.factor_space), split.test_mask(data.classes,
                                                                                      data.factor_space)[::7])
    # about 25 % of a large grid's combinations, and another seed holds out others
    grid = factor_space("shapes3d")
    share = random_combinations_split("x", grid, 25, seed=3).test_mask(grid.all_classes(), grid).mean()
    assert abs(share - 0.25) < 0.01
    other = random_combinations_split("x", grid, 25, seed=4).test_mask(grid.all_classes(), grid)
    assert (other != random_combinations_split("x", grid, 25, seed=3).test_mask(grid.all_classes(),
                                                                                grid)).mean() > 0.3


def test_a_split_emptying_a_side_and_unknown_names_are_errors(tmp_path):
    factors = np.array([[0.0], [0.0], [1.0]])
    data = load_labelled(write_labelled(tmp_path / "two.npz", np.zeros((3, 4, 4), np.uint8), factors))
    with pytest.raises(KeyError, match="generic names are"):
        get_split("labelled", "blank_side", space=data.factor_space)
    with pytest.raises(KeyError, match="with factors factor_0"):
        get_split("labelled", "hue_gt050", space=data.factor_space)  # no factor called hue
    one_class = load_labelled(write_labelled(tmp_path / "one.npz", np.zeros((2, 4, 4), np.uint8),
                                             np.zeros((2, 1))))
    with pytest.raises(ValueError, match="one class"):
        get_split("labelled", "factor_0_gt050", space=one_class.factor_space)
    split = get_split("labelled", "random_combinations_1", space=data.factor_space)
    with pytest.raises(ValueError, match="random_combinations_1.*leaves the test set empty"):
        split.train_test_indices(data.classes, data.factor_space)


def test_class_based_metrics_run_on_labelled_data(tmp_path):
    from analysis.metrics import mig

    # a factorial 3 × 4 labelled set: codes equal to the factor values give MIG 1 (closed form)
    grid = np.stack(np.meshgrid(np.arange(3.0), np.arange(4.0), indexing="ij"), -1).reshape(-1, 2)
    factors = np.repeat(grid, 5, axis=0)
    data = load_labelled(write_labelled(tmp_path / "g.npz", np.zeros((60, 4, 4), np.uint8), factors))
    assert mig(factors, data.classes)["mig"] == pytest.approx(1.0)
