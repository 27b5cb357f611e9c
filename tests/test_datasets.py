import numpy as np

from data_pipeline import load_procedural, render


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
