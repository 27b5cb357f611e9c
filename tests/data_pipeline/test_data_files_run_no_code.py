"""No code runs from a data file: crafted ``.npz`` files whose pickled payload would write a marker
file are refused (or their pickled entry is never read), and the marker is never written."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from dataset_files import dsprites_arrays

from data_pipeline import factor_space, render
from data_pipeline.labelled import load_labelled
from data_pipeline.loaders import DSPRITES_NPZ, load_circles, load_dsprites_npz, load_mpi3d


class Payload:
    """Unpickling this runs ``exec`` on code that writes ``marker``: what an attacker would ship."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('code ran')",)


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "payload-ran"
    # the payload works: unpickling it writes the marker (so its absence below means something)
    pickle.loads(pickle.dumps(Payload(tmp_path / "probe")))
    assert (tmp_path / "probe").read_text() == "code ran"
    return path


def _evil(marker):
    return np.array(Payload(marker), dtype=object)


def test_genuine_dsprites_layout_loads_and_its_pickled_metadata_is_never_read(tmp_path, marker):
    imgs, latents_classes, latents_values, classes = dsprites_arrays(30)
    np.savez(tmp_path / DSPRITES_NPZ, imgs=imgs, latents_classes=latents_classes,
             latents_values=latents_values, metadata=_evil(marker))
    data = load_dsprites_npz(data_dir=tmp_path, verify=False)
    assert np.array_equal(data.classes, classes) and np.array_equal(data.images[:, 0] // 255, imgs)
    assert not marker.exists()


@pytest.mark.parametrize("key", ["imgs", "latents_classes"])
def test_a_pickled_dsprites_array_is_refused_without_running_it(tmp_path, marker, key):
    imgs, latents_classes, latents_values, _ = dsprites_arrays(30)
    arrays = {"imgs": imgs, "latents_classes": latents_classes, "latents_values": latents_values}
    arrays[key] = _evil(marker)
    np.savez(tmp_path / "evil.npz", **arrays)
    with pytest.raises(ValueError, match=rf"{key}: holds a pickled \(object\) array.*never loads"):
        load_dsprites_npz(tmp_path / "evil.npz", verify=False)
    assert not marker.exists()


def test_a_pickle_named_npz_is_refused_without_running_it(tmp_path, marker):
    (tmp_path / DSPRITES_NPZ).write_bytes(pickle.dumps({"imgs": Payload(marker)}))
    with pytest.raises(ValueError, match="is a pickle, not an .npz archive"):
        load_dsprites_npz(data_dir=tmp_path, verify=False)
    assert not marker.exists()


def test_a_single_npy_is_refused(tmp_path):
    np.save(tmp_path / "imgs.npy", np.zeros((2, 64, 64), np.uint8))
    (tmp_path / "imgs.npy").rename(tmp_path / "imgs.npz")
    with pytest.raises(ValueError, match=r"expected an .npz archive \(numpy.savez\) holding imgs"):
        load_dsprites_npz(tmp_path / "imgs.npz", verify=False)


def test_dsprites_shapes_are_checked_against_the_factor_space(tmp_path):
    imgs, latents_classes, _, _ = dsprites_arrays(30)
    sizes = factor_space("dsprites").sizes
    np.savez(tmp_path / "five.npz", imgs=imgs, latents_classes=latents_classes[:, 1:])
    with pytest.raises(ValueError, match=r"latents_classes: expected shape \(N, 6\); got \(30, 5\)"):
        load_dsprites_npz(tmp_path / "five.npz", verify=False)
    too_big = latents_classes.copy()
    too_big[0, 4] = sizes[3]  # posX one past its last class
    np.savez(tmp_path / "big.npz", imgs=imgs, latents_classes=too_big)
    with pytest.raises(ValueError, match=rf"'posX'.*0..{sizes[3] - 1}.*factor sizes"):
        load_dsprites_npz(tmp_path / "big.npz", verify=False)
    colour = latents_classes.copy()
    colour[3, 0] = 1
    np.savez(tmp_path / "colour.npz", imgs=imgs, latents_classes=colour)
    with pytest.raises(ValueError, match="column 0 .colour, one class. to be 0"):
        load_dsprites_npz(tmp_path / "colour.npz", verify=False)


def test_circles_unique_values_is_never_read_and_pickled_images_are_refused(tmp_path, marker):
    from data_pipeline.spaces import sprite_space

    space = sprite_space(("posX", "posY"), (5, 5))
    classes = space.all_classes()
    images = render("circles", classes, space)
    common = {"factor_values": space.raw_values(classes), "factor_sizes": np.array([5, 5])}
    np.savez(tmp_path / "circles.npz", images=images, unique_values=_evil(marker), **common)
    assert np.array_equal(load_circles(tmp_path / "circles.npz").classes, classes)
    np.savez(tmp_path / "evil.npz", images=_evil(marker), **common)
    with pytest.raises(ValueError, match="images: holds a pickled"):
        load_circles(tmp_path / "evil.npz")
    assert not marker.exists()


def test_mpi3d_and_labelled_refuse_pickled_arrays(tmp_path, marker):
    np.savez(tmp_path / "mpi3d_toy.npz", images=_evil(marker))
    with pytest.raises(ValueError, match="images: holds a pickled"):
        load_mpi3d(data_dir=tmp_path)
    np.savez(tmp_path / "labelled.npz", images=np.zeros((4, 8, 8), np.uint8), factors=np.zeros((4, 1)),
             factor_names=_evil(marker))
    with pytest.raises(ValueError, match="pickled"):
        load_labelled(tmp_path / "labelled.npz")
    assert not marker.exists()


def test_a_pickle_named_labelled_npz_is_refused_without_running_it(tmp_path, marker):
    (tmp_path / "labelled.npz").write_bytes(pickle.dumps({"images": Payload(marker)}))
    with pytest.raises(ValueError, match="is a pickle, not an .npz archive"):
        load_labelled(tmp_path / "labelled.npz")
    assert not marker.exists()
