"""`prepare --from-file`: a real file converted once into a memory-mappable layout, resumable and
checksummed. The sources are small files in the real formats, the 3DShapes one chunked like the
real file (many images per chunk, 4×4×1 pixels, gzip)."""

from __future__ import annotations

import json
import pickle

import h5py
import numpy as np
import pytest

from data_pipeline import factor_space, random_access, render
from data_pipeline.loaders import DSPRITES_HDF5, DSPRITES_NPZ, SHAPES3D_H5, load_dsprites_npz, load_shapes3d
from data_pipeline.prepare import main as prepare_main

N_SHAPES, CHUNK = 700, 250


def _shapes3d_file(folder, n=N_SHAPES, chunk=CHUNK):
    space = factor_space("shapes3d")
    index = np.sort(np.random.default_rng(0).choice(space.n_images, n, replace=False))
    classes = space.classes_of(index)
    with h5py.File(folder / SHAPES3D_H5, "w") as f:
        f.create_dataset("images", data=render("shapes3d", classes), chunks=(chunk, 4, 4, 1),
                         compression="gzip")
        f.create_dataset("labels", data=space.raw_values(classes), chunks=(chunk, 1), compression="gzip")
    return folder / SHAPES3D_H5


@pytest.fixture(scope="module")
def shapes3d_file(tmp_path_factory):
    return _shapes3d_file(tmp_path_factory.mktemp("source"))


def _dsprites_arrays(n=300):
    space = factor_space("dsprites")
    classes = space.classes_of(np.sort(np.random.default_rng(1).choice(space.n_images, n, replace=False)))
    return render("dsprites", classes), np.concatenate([np.zeros((n, 1), np.int64), classes], axis=1)


def test_shapes3d_converts_to_the_same_images_and_classes_memory_mapped(tmp_path, shapes3d_file):
    source = shapes3d_file
    manifest = random_access.convert(source, tmp_path / "ra", progress=False)
    assert [p["count"] for p in manifest["pieces"]] == [250, 250, 200]  # aligned to the chunks
    data = random_access.load(tmp_path / "ra")
    expected = load_shapes3d(source, verify=False)
    assert isinstance(data.images, np.memmap) and not data.images.flags.writeable
    assert np.array_equal(data.images, expected.images) and np.array_equal(data.classes, expected.classes)
    files = sorted(p.name for p in (tmp_path / "ra").iterdir())
    assert files == ["classes.npy", "images.npy", "manifest.json"]
    rows = np.sort(np.random.default_rng(5).choice(N_SHAPES, 64, replace=False))
    assert np.array_equal(data.images[rows], expected.images[rows])
    written = (tmp_path / "ra" / "images.npy").stat().st_mtime_ns
    assert random_access.convert(source, tmp_path / "ra", progress=False) == manifest  # done once
    assert (tmp_path / "ra" / "images.npy").stat().st_mtime_ns == written


def test_dsprites_npz_is_streamed_and_hdf5_read(tmp_path):
    imgs, latents_classes = _dsprites_arrays()
    metadata = np.array(pickle.dumps({"title": "dSprites"}, protocol=2), dtype=object)
    np.savez_compressed(tmp_path / DSPRITES_NPZ, imgs=imgs, latents_classes=latents_classes,
                        metadata=metadata)
    with h5py.File(tmp_path / DSPRITES_HDF5, "w") as f:
        f.create_dataset("imgs", data=imgs, chunks=(100, 2, 4), compression="gzip")
        f["latents_classes"] = latents_classes
    expected = load_dsprites_npz(tmp_path / DSPRITES_NPZ, verify=False)
    for name, step in [(DSPRITES_NPZ, 70), (DSPRITES_HDF5, None)]:
        random_access.convert(tmp_path / name, tmp_path / name.replace(".", "_"), step=step, progress=False)
        data = random_access.load(tmp_path / name.replace(".", "_"))
        assert data.images.shape == (300, 1, 64, 64)
        assert np.array_equal(data.images, expected.images) and np.array_equal(data.classes, expected.classes)


def test_an_interrupted_conversion_resumes_after_its_last_checked_piece(tmp_path, monkeypatch, shapes3d_file):
    source = shapes3d_file
    expected = load_shapes3d(source, verify=False).images
    real_pieces = random_access._Source.pieces
    starts, fail_at = [], [None]

    def pieces(self, start, step):
        starts.append(start)
        for k, piece in enumerate(real_pieces(self, start, step)):
            if k == fail_at[0]:
                raise KeyboardInterrupt
            yield piece

    monkeypatch.setattr(random_access._Source, "pieces", pieces)
    fail_at[0] = 2
    with pytest.raises(KeyboardInterrupt):
        random_access.convert(source, tmp_path / "ra", progress=False)
    assert not (tmp_path / "ra" / "images.npy").exists()  # nothing under the final name yet
    with pytest.raises(FileNotFoundError, match="interrupted: run it again to resume"):
        random_access.load(tmp_path / "ra")
    fail_at[0] = None
    random_access.convert(source, tmp_path / "ra", progress=False)
    assert starts == [0, 500]  # resumed after the two finished pieces
    assert np.array_equal(random_access.load(tmp_path / "ra").images, expected)
    # A piece damaged while the run was stopped is found on resume and written again.
    fail_at[0] = 2
    with pytest.raises(KeyboardInterrupt):
        random_access.convert(source, tmp_path / "rb", progress=False)
    part = np.load(tmp_path / "rb" / "images.npy.part", mmap_mode="r+")
    part[300] = 0  # inside the second piece (250..499)
    part.flush()
    del part
    fail_at[0] = None
    random_access.convert(source, tmp_path / "rb", progress=False)
    assert starts[2:] == [0, 250]
    assert np.array_equal(random_access.load(tmp_path / "rb").images, expected)


def test_a_damaged_conversion_is_refused_on_load(tmp_path, shapes3d_file):
    random_access.convert(shapes3d_file, tmp_path / "ra", progress=False)
    images = np.load(tmp_path / "ra" / "images.npy", mmap_mode="r+")
    images[600, 0, 0, 0] ^= 1
    images.flush()
    del images
    with pytest.raises(ValueError, match="images 500..699 differ from the manifest's sha256"):
        random_access.load(tmp_path / "ra")
    assert random_access.load(tmp_path / "ra", verify=False).images.shape == (N_SHAPES, 3, 64, 64)


def test_prepare_from_file_on_the_command_line(tmp_path, capsys, shapes3d_file):
    source = shapes3d_file
    prepare_main(["shapes3d", "--from-file", str(source), "--out", str(tmp_path / "ra")])
    assert f"700 images of {source}" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "ra" / "manifest.json").read_text())
    assert manifest["dataset"] == "shapes3d" and manifest["n_images"] == 700
    for argv, expected in [(["dsprites", "--from-file", str(tmp_path / "none.npz")], "no such file"),
                           (["circles", "--from-file", str(source)], "no random-access conversion")]:
        with pytest.raises(SystemExit) as code:
            prepare_main(argv + ["--out", str(tmp_path / "x")])
        assert code.value.code == 2 and expected in capsys.readouterr().err


def test_mpi3d_npz_is_streamed_in_grid_order(tmp_path, monkeypatch):
    """The MPI3D path on a stand-in grid: the real lengths (460,800 or 1,036,800 images) are too
    big for the suite, so a 3 × 4 space stands in for the factor space the length implies."""
    from data_pipeline import loaders
    from data_pipeline.spaces import sprite_space

    monkeypatch.setattr(loaders, "MPI3D_SIZES_BY_LENGTH", {12: (3, 4)})
    monkeypatch.setattr(random_access, "mpi3d_space", lambda c, s: sprite_space(("colour", "shape"), (c, s)))
    images = np.random.default_rng(0).integers(0, 256, (12, 64, 64, 3), dtype=np.uint8)
    np.savez(tmp_path / "mpi3d_toy.npz", images=images)  # stored, as np.savez writes it
    random_access.convert(tmp_path / "mpi3d_toy.npz", tmp_path / "ra", step=5, progress=False)
    data = random_access.load(tmp_path / "ra")
    assert np.array_equal(data.images, images.transpose(0, 3, 1, 2))
    assert data.name == "mpi3d" and data.classes.tolist() == [[c, s] for c in range(3) for s in range(4)]
    np.savez(tmp_path / "mpi3d_real.npz", images=images[:7])
    with pytest.raises(ValueError, match="expected length 12; got 7"):
        random_access.convert(tmp_path / "mpi3d_real.npz", tmp_path / "rb", progress=False)
