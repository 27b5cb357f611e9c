"""Samplers (weak pairs, composition triplets, D21 subsets) and the procedural generators."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_pipeline import DATASETS, factor_space, get_split, load_procedural, render
from data_pipeline.cache import cache_path
from data_pipeline.mpi3d import reduced_classes
from data_pipeline.samplers import composition_triplets, d21_ood_subsets, weak_pairs


@settings(max_examples=25, deadline=None)
@given(k=st.integers(1, 5), seed=st.integers(0, 10_000))
def test_weak_pairs_differ_in_exactly_k_factors(k, seed):
    space = factor_space("dsprites")
    a, b, ks = weak_pairs(space, 200, k=k, seed=seed)
    differ = (space.classes_of(a) != space.classes_of(b)).sum(axis=1)
    assert (differ == k).all() and (ks == k).all()


def test_weak_pairs_random_k_and_allowed_and_seed():
    space = factor_space("shapes3d")
    train, _ = get_split("shapes3d", "fhue_gt50").train_test_indices(space.all_classes(), space)
    a, b, ks = weak_pairs(space, 2000, k=None, seed=3, allowed=train)
    differ = (space.classes_of(a) != space.classes_of(b)).sum(axis=1)
    assert np.array_equal(differ, ks) and ks.min() == 1 and ks.max() == space.n_factors - 1
    assert np.isin(a, train).all() and np.isin(b, train).all()
    again = weak_pairs(space, 2000, k=None, seed=3, allowed=train)
    assert all(np.array_equal(x, y) for x, y in zip((a, b, ks), again))
    with pytest.raises(ValueError, match="k: expected 1..5"):
        weak_pairs(factor_space("dsprites"), 10, k=6)


def test_composition_triplets_never_touch_held_out_images():
    space = factor_space("dsprites")
    train, test = get_split("dsprites", "shape2tx").train_test_indices(space.all_classes(), space)
    ref, tra, action, target = composition_triplets(space, 3000, seed=0, allowed=train)
    for side in (ref, tra, target):
        assert np.isin(side, train).all() and not np.isin(side, test).any()
    cr, ct, cg = space.classes_of(ref), space.classes_of(tra), space.classes_of(target)
    rows = np.arange(len(ref))
    assert np.array_equal(cg[rows, action], ct[rows, action])
    keep = np.ones_like(cr, bool)
    keep[rows, action] = False
    assert np.array_equal(cg[keep], cr[keep])


def test_d21_subsets_match_the_registered_splits():
    space = factor_space("shapes3d")
    classes = space.all_classes()
    subsets = d21_ood_subsets(classes, space)
    hue = classes[:, 2]
    assert set(np.unique(hue[subsets["OOD2-A"][1]])) == {2, 7}
    assert set(np.unique(hue[subsets["OOD1-A"][0]])) == {0}
    assert set(np.unique(hue[subsets["OOD1-B"][0]])) == {5, 6, 8, 9}
    for scenario, name in (("OOD1-A", "d21_ood1a"), ("OOD1-B", "d21_ood1b"), ("OOD1-C", "d21_ood1c"),
                           ("OOD2-A", "d21_ood2a")):
        train, test = get_split("shapes3d", name).train_test_indices(classes, space)
        assert np.array_equal(train, subsets[scenario][0]) and np.array_equal(test, subsets[scenario][1])
        assert not np.isin(hue[train], [2, 7]).any() or scenario == "OOD2-A"


@pytest.mark.parametrize("dataset", DATASETS)
def test_generators_are_deterministic_uint8_with_the_stored_layout(dataset):
    space = factor_space(dataset)
    index = np.random.default_rng(0).choice(space.n_images, 24, replace=False)
    classes = space.classes_of(index)
    images = render(dataset, classes)
    assert images.dtype == np.uint8 and len(images) == 24 and images.shape[1:3] == (64, 64)
    assert np.array_equal(images, render(dataset, classes))
    assert np.array_equal(images[5:9], render(dataset, classes[5:9]))  # batch-independent
    assert len({images[i].tobytes() for i in range(24)}) == 24  # distinct classes, distinct images


def test_rgb_generators_respond_to_each_factor():
    for dataset in ("shapes3d", "mpi3d", "twoshapes"):
        space = factor_space(dataset)
        base = np.zeros((1, space.n_factors), np.int64)
        if dataset == "twoshapes":
            base[0, 4:6] = 3  # the two objects apart, so neither hides the other
        image = render(dataset, base)
        for f, size in enumerate(space.sizes):
            other = base.copy()
            other[0, f] = (base[0, f] + 1) % size
            assert not np.array_equal(render(dataset, other), image), (dataset, space.names[f])


def test_mpi3d_reduced_keeps_real_class_numbers():
    classes = reduced_classes()
    space = factor_space("mpi3d")
    assert len(classes) == 6 * 6 * 2 * 3 * 3 * 4 * 4
    assert set(np.unique(classes[:, 5])) == {0, 13, 26, 39}
    space.check_classes(classes)


def test_procedural_cache_roundtrip_and_checksum(tmp_path):
    first = load_procedural("simple", n_images=30, seed=2, cache_dir=tmp_path)
    path = cache_path("simple", first.classes, tmp_path)
    assert path.is_file()
    again = load_procedural("simple", n_images=30, seed=2, cache_dir=tmp_path)
    assert np.array_equal(first.images, again.images)
    spoiled = np.load(path)
    spoiled[0, 0, 0, 0] ^= 1
    np.save(path, spoiled)
    with pytest.warns(UserWarning, match="checksum"):
        third = load_procedural("simple", n_images=30, seed=2, cache_dir=tmp_path)
    assert np.array_equal(third.images, first.images)
