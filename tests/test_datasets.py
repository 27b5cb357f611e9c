import numpy as np

from data_pipeline import factor_space, load_procedural, render


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
