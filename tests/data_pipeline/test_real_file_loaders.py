"""Real-file loaders, each on a small file written in the real format by the test."""

from __future__ import annotations

import pickle
import warnings

import h5py
import numpy as np
import pytest
from dataset_files import dsprites_arrays

from data_pipeline import FactorSpace, factor_space, render
from data_pipeline.loaders import (
    DSPRITES_HDF5,
    DSPRITES_NPZ,
    SHAPES3D_H5,
    ChecksumWarning,
    load_circles,
    load_dsprites_hdf5,
    load_dsprites_npz,
    load_mpi3d,
    load_real,
    load_shapes3d,
    verify_checksum,
)


def test_dsprites_npz_with_py2_metadata(tmp_path):
    imgs, latents_classes, latents_values, classes = dsprites_arrays(40)
    metadata = np.array(pickle.dumps({"title": "dSprites", "latents_sizes": [1, 3, 6, 40, 32, 32]},
                                     protocol=2), dtype=object)
    np.savez(tmp_path / DSPRITES_NPZ, imgs=imgs, latents_classes=latents_classes,
             latents_values=latents_values, metadata=metadata)
    with pytest.warns(ChecksumWarning, match="md5"):
        data = load_dsprites_npz(data_dir=tmp_path)
    assert data.images.shape == (40, 1, 64, 64) and set(np.unique(data.images)) <= {0, 255}
    assert np.array_equal(data.classes, classes)
    assert np.array_equal(data.images[:, 0] // 255, imgs)


def test_dsprites_hdf5_and_the_env_variable(tmp_path, monkeypatch):
    imgs, latents_classes, latents_values, classes = dsprites_arrays(40, seed=1)
    with h5py.File(tmp_path / DSPRITES_HDF5, "w") as f:
        f["imgs"], f["latents_classes"], f["latents_values"] = imgs, latents_classes, latents_values
    monkeypatch.setenv("DISGEN_DATA", str(tmp_path))
    with pytest.warns(ChecksumWarning):
        data = load_real("dsprites")  # npz absent: falls back to the hdf5
    assert np.array_equal(data.classes, classes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_dsprites_hdf5(tmp_path / DSPRITES_HDF5, verify=False)


def test_dsprites_errors_name_what_was_expected(tmp_path):
    imgs, latents_classes, _, _ = dsprites_arrays(40)
    np.savez(tmp_path / "wrong_key.npz", images=imgs, latents_classes=latents_classes)
    with pytest.raises(ValueError, match="expected key 'imgs'"):
        load_dsprites_npz(tmp_path / "wrong_key.npz")
    np.savez(tmp_path / "wrong_shape.npz", imgs=imgs[:, :32], latents_classes=latents_classes)
    with pytest.raises(ValueError, match=r"imgs: expected shape \(N, 64, 64\)"):
        load_dsprites_npz(tmp_path / "wrong_shape.npz")
    np.savez(tmp_path / "wrong_length.npz", imgs=imgs, latents_classes=latents_classes[:-1])
    with pytest.raises(ValueError, match="expected 40 rows"):
        load_dsprites_npz(tmp_path / "wrong_length.npz")
    np.savez(tmp_path / "wrong_dtype.npz", imgs=imgs.astype(np.float32), latents_classes=latents_classes)
    with pytest.raises(ValueError, match="expected dtype"):
        load_dsprites_npz(tmp_path / "wrong_dtype.npz")
    np.savez(tmp_path / "not_binary.npz", imgs=imgs * 255, latents_classes=latents_classes)
    with pytest.raises(ValueError, match="0/1 pixels"):
        load_dsprites_npz(tmp_path / "not_binary.npz")
    with pytest.raises(FileNotFoundError, match="DISGEN_DATA"):
        load_dsprites_npz()


def _write_shapes3d(path, n=25, seed=0):
    space = factor_space("shapes3d")
    classes = space.classes_of(np.sort(np.random.default_rng(seed).choice(space.n_images, n, replace=False)))
    images = render("shapes3d", classes)
    with h5py.File(path, "w") as f:
        f["images"], f["labels"] = images, space.raw_values(classes)
    return images, classes


@pytest.mark.parametrize("chunked", [False, True])
def test_shapes3d_full_and_chunked(tmp_path, chunked):
    images, classes = _write_shapes3d(tmp_path / SHAPES3D_H5)
    with pytest.warns(ChecksumWarning, match="sha256"):
        data = load_shapes3d(data_dir=tmp_path, chunked=chunked, chunk=7)
    assert data.images.shape == (25, 3, 64, 64)
    assert np.array_equal(data.classes, classes)
    assert np.array_equal(data.images.transpose(0, 2, 3, 1), images)


def test_shapes3d_off_grid_labels_and_wrong_shape(tmp_path):
    _write_shapes3d(tmp_path / "a.h5")
    with h5py.File(tmp_path / "a.h5", "r+") as f:
        labels = f["labels"][()]
        labels[0, 3] = 2.0  # a scale far off the grid
        f["labels"][...] = labels
    with pytest.raises(ValueError, match="'scale' are off the grid"):
        load_shapes3d(tmp_path / "a.h5", verify=False)
    with h5py.File(tmp_path / "b.h5", "w") as f:
        f["images"], f["labels"] = np.zeros((3, 64, 64), np.uint8), np.zeros((3, 6))
    with pytest.raises(ValueError, match=r"images: expected shape \(N, 64, 64, 3\)"):
        load_shapes3d(tmp_path / "b.h5", verify=False)


def test_mpi3d_wrong_length_and_variant(tmp_path):
    with pytest.raises(ValueError, match="expected length"):
        np.savez(tmp_path / "mpi3d_toy.npz", images=np.zeros((10, 64, 64, 3), np.uint8))
        load_mpi3d(data_dir=tmp_path)
    with pytest.raises(ValueError, match="variant"):
        load_mpi3d(data_dir=tmp_path, variant="cartoon")


def test_mpi3d_grid_order(tmp_path, monkeypatch):
    import data_pipeline.loaders as loaders
    from data_pipeline import spaces

    # Shrink the grid so a real-format file stays small: 2 colours, 2 shapes, axes of 4.
    def small_space(colours, shapes):
        sizes = (colours, shapes, 2, 3, 3, 4, 4)
        return FactorSpace(spaces.mpi3d_space().names, sizes, tuple(np.arange(float(s)) for s in sizes))

    n = 2 * 2 * 2 * 3 * 3 * 4 * 4
    monkeypatch.setattr(loaders, "MPI3D_SIZES_BY_LENGTH", {n: (2, 2)})
    monkeypatch.setattr(loaders, "mpi3d_space", small_space)
    images = np.zeros((n, 64, 64, 3), np.uint8)
    images[:, 0, 0, 0] = np.arange(n) % 251
    np.savez(tmp_path / "mpi3d_real.npz", images=images)
    data = load_mpi3d(data_dir=tmp_path, variant="real")
    assert data.factor_space.sizes == (2, 2, 2, 3, 3, 4, 4)
    assert np.array_equal(data.factor_space.index_of(data.classes), np.arange(n))
    assert data.images[1000, 0, 0, 0] == 1000 % 251
    assert spaces.mpi3d_space().sizes[0] == 6


def test_circles_npz(tmp_path):
    from data_pipeline.spaces import sprite_space

    space = sprite_space(("posX", "posY"), (21, 21))
    classes = space.all_classes()
    images = render("circles", classes, space)
    np.savez(tmp_path / "circles.npz", images=images // 255, factor_values=space.raw_values(classes),
             factor_sizes=np.array([21, 21]),
             unique_values=np.array({"posX": space.values[0], "posY": space.values[1]}, dtype=object))
    data = load_circles(tmp_path / "circles.npz")
    assert data.factor_space.sizes == (21, 21) and np.array_equal(data.classes, classes)
    assert np.array_equal(data.images[:, 0], images)
    np.savez(tmp_path / "bad.npz", images=images, factor_values=space.raw_values(classes)[:, :1],
             factor_sizes=np.array([21, 21]))
    with pytest.raises(ValueError, match=r"factor_values: expected shape \(N, 2\)"):
        load_circles(tmp_path / "bad.npz")


def test_checksum_match_and_unknown_file(tmp_path, monkeypatch):
    import hashlib

    import data_pipeline.loaders as loaders

    path = tmp_path / "some.bin"
    path.write_bytes(b"abc")
    assert verify_checksum(path) is None
    digest = hashlib.sha256(b"abc").hexdigest()
    monkeypatch.setitem(loaders.PUBLISHED_CHECKSUMS, "some.bin", [("sha256", digest)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert verify_checksum(path) is True
