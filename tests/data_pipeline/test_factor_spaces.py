import numpy as np
import pytest

from data_pipeline import FactorSpace, factor_space


def small_space():
    return FactorSpace(names=("a", "b", "c"), sizes=(2, 3, 4),
                       values=(np.array([0.0, 1.0]), np.array([10.0, 20.0, 30.0]), np.linspace(0, 1, 4)))


def test_flat_index_is_row_major_with_last_factor_fastest():
    space = small_space()
    assert space.index_of(np.array([[0, 0, 1], [0, 1, 0], [1, 0, 0], [1, 2, 3]])).tolist() == [1, 4, 12, 23]
    every = space.all_classes()
    assert every.shape == (24, 3)
    assert (space.index_of(every) == np.arange(24)).all()


def test_values_and_normalised_values():
    space = small_space()
    classes = np.array([[1, 2, 0]])
    assert space.raw_values(classes).tolist() == [[1.0, 30.0, 0.0]]
    assert space.normalised(classes).tolist() == [[1.0, 1.0, 0.0]]


def test_out_of_range_classes_name_the_factor():
    with pytest.raises(ValueError, match="factor 'b'.*0..2"):
        small_space().index_of(np.array([[0, 3, 0]]))
    with pytest.raises(ValueError, match=r"shape \(N, 3\)"):
        small_space().index_of(np.array([0, 1, 2]))


def test_dsprites_factor_space_matches_the_real_file():
    space = factor_space("dsprites")
    assert space.names == ("shape", "scale", "orientation", "posX", "posY")
    assert space.sizes == (3, 6, 40, 32, 32)
    assert space.n_images == 737280
    assert np.allclose(space.values[1], np.linspace(0.5, 1.0, 6))
    assert np.allclose(space.values[2], np.linspace(0, 2 * np.pi, 40))
