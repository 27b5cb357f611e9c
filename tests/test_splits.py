import numpy as np
import pytest

from data_pipeline import factor_space, get_split


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
