"""The procedural generators."""

from __future__ import annotations

import numpy as np
import pytest

from data_pipeline import DATASETS, factor_space, load_procedural, render
from data_pipeline.mpi3d import reduced_classes


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


def test_procedural_subset_is_seeded_sorted_and_stored_0_255():
    data = load_procedural("dsprites", n_images=50, seed=1)
    again = load_procedural("dsprites", n_images=50, seed=1)
    other = load_procedural("dsprites", n_images=50, seed=2)
    assert data.images.shape == (50, 1, 64, 64) and data.images.dtype == np.uint8
    assert set(np.unique(data.images)) == {0, 255}
    assert np.array_equal(data.images, again.images) and np.array_equal(data.classes, again.classes)
    assert not np.array_equal(data.classes, other.classes)
    index = data.factor_space.index_of(data.classes)
    assert (np.diff(index) > 0).all()
    # the images are the renderer's, for the classes stored beside them
    assert np.array_equal(data.images[:, 0] // 255, render("dsprites", data.classes))


def test_shapes3d_uint8_tables_give_the_bytes_of_float_composition():
    from data_pipeline import shapes3d

    space = factor_space("shapes3d")
    classes = space.classes_of(np.random.default_rng(5).choice(space.n_images, 600, replace=False))
    direct = shapes3d._render_directly(classes)  # rounds each composed float image
    shapes3d._tables()  # once built, render() always goes through the tables
    assert np.array_equal(shapes3d.render(classes, chunk=64), direct)
