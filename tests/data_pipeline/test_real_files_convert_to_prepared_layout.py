"""`prepare --from-file`: a real file converted once into the prepared layout, streamed, resumable
and checksummed, with its labels read without its images. The sources are small files in the real
formats, the 3DShapes one chunked like the real file (many images per chunk, 4×4×1 pixels, gzip)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import h5py
import numpy as np
import pytest

from data_pipeline import conversion, factor_space, prepared, render
from data_pipeline.labelled import load_labelled, write_labelled
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


def test_shapes3d_converts_to_the_same_images_and_classes_memory_mapped(tmp_path, shapes3d_file, monkeypatch):
    source = shapes3d_file
    header = conversion.RealFile(source, "shapes3d")  # labels and header only: no image is read
    expected = load_shapes3d(source, verify=False)
    assert (header.n, header.image_shape, header.chunk) == (N_SHAPES, (3, 64, 64), CHUNK)
    assert np.array_equal(header.classes, expected.classes)
    manifest = conversion.convert(source, tmp_path / "ra", rows_per_block=300, progress=False)
    assert [b["count"] for b in manifest["blocks"]] == [250, 250, 200]  # rounded down to whole chunks
    assert manifest["source"]["kind"] == "file" and manifest["dataset"] == "shapes3d"
    data = prepared.open_dataset(tmp_path / "ra")
    assert np.array_equal(np.asarray(data.images), expected.images)
    assert np.array_equal(data.classes, expected.classes)
    files = sorted(p.name for p in (tmp_path / "ra").iterdir())
    assert files == ["classes.npy", "images-000000000.npy", "images-000000250.npy", "images-000000500.npy",
                     "manifest.json"]
    rows = np.sort(np.random.default_rng(5).choice(N_SHAPES, 64, replace=False))
    assert np.array_equal(data.images[rows], expected.images[rows])
    written = (tmp_path / "ra" / "images-000000000.npy").stat().st_mtime_ns
    monkeypatch.setattr(conversion.RealFile, "pieces", None)  # done once: nothing is read again
    assert conversion.convert(source, tmp_path / "ra", rows_per_block=300, progress=False) == manifest
    assert (tmp_path / "ra" / "images-000000000.npy").stat().st_mtime_ns == written


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
        out = tmp_path / name.replace(".", "_")
        conversion.convert(tmp_path / name, out, rows_per_block=step, progress=False)
        data = prepared.open_dataset(out)
        assert data.images.shape == (300, 1, 64, 64)
        assert np.array_equal(np.asarray(data.images), expected.images)
        assert np.array_equal(data.classes, expected.classes)
    np.savez(tmp_path / "two.npz", imgs=imgs * 2, latents_classes=latents_classes)
    with pytest.raises(ValueError, match="expected 0/1 pixels"):  # the pixels are checked as they stream
        conversion.convert(tmp_path / "two.npz", tmp_path / "two", dataset="dsprites", progress=False)


def test_an_interrupted_conversion_resumes_after_its_last_checked_block(tmp_path, monkeypatch, shapes3d_file):
    source = shapes3d_file
    expected = load_shapes3d(source, verify=False).images
    real_pieces = conversion.RealFile.pieces
    starts, fail_at = [], [None]

    def pieces(self, start=0, step=None):
        starts.append(start)
        for k, piece in enumerate(real_pieces(self, start, step)):
            if k == fail_at[0]:
                raise KeyboardInterrupt
            yield piece

    monkeypatch.setattr(conversion.RealFile, "pieces", pieces)
    options = dict(rows_per_block=250, progress=False)
    fail_at[0] = 2
    with pytest.raises(KeyboardInterrupt):
        conversion.convert(source, tmp_path / "ra", **options)
    assert not (tmp_path / "ra" / "manifest.json").exists()  # unfinished: no manifest yet
    with pytest.raises(FileNotFoundError, match="unfinished"):
        prepared.open_dataset(tmp_path / "ra")
    fail_at[0] = None
    conversion.convert(source, tmp_path / "ra", **options)
    assert starts == [0, 500]  # resumed after the two finished blocks
    assert np.array_equal(np.asarray(prepared.open_dataset(tmp_path / "ra").images), expected)
    assert not (tmp_path / "ra" / "progress.json").exists()
    # A block damaged while the run was stopped is found on resume and written again.
    fail_at[0] = 2
    with pytest.raises(KeyboardInterrupt):
        conversion.convert(source, tmp_path / "rb", **options)
    block = tmp_path / "rb" / "images-000000250.npy"
    block.write_bytes(block.read_bytes()[:-1] + b"\x07")
    fail_at[0] = None
    conversion.convert(source, tmp_path / "rb", **options)
    assert starts[2:] == [0, 250]
    prepared.verify(tmp_path / "rb")
    assert np.array_equal(np.asarray(prepared.open_dataset(tmp_path / "rb").images), expected)


def test_prepare_from_file_on_the_command_line(tmp_path, capsys, shapes3d_file):
    source = shapes3d_file
    import ray

    was_up = ray.is_initialized()  # depends on which tests ran before in this process: either works
    prepare_main(["shapes3d", "--from-file", str(source), "--out", str(tmp_path / "ra")])
    assert f"700 images of {source} in 1 blocks" in capsys.readouterr().out
    assert ray.is_initialized() == was_up  # Ray left as the command found it
    manifest = json.loads((tmp_path / "ra" / "manifest.json").read_text())
    assert manifest["dataset"] == "shapes3d" and manifest["n_images"] == 700
    for argv, expected in [(["dsprites", "--from-file", str(tmp_path / "none.npz")], "no such file"),
                           (["circles", "--from-file", str(source)], "expected key 'factor_sizes'")]:
        with pytest.raises(SystemExit) as code:
            prepare_main(argv + ["--out", str(tmp_path / "x")])
        assert code.value.code == 2 and expected in capsys.readouterr().err


@pytest.mark.slow
def test_prepare_stops_the_ray_it_started(tmp_path, shapes3d_file):
    """In a process not connected to Ray, ``prepare`` starts one of its own and stops it when the
    build ends, so the process's next ``ray.init`` works. Its own even where another Ray runs on the
    machine (another test's: a multi-node test's head has no CPU, and a build that joined it waited
    for one): without --address or $RAY_ADDRESS, a fresh local Ray. A fresh process: this test's own
    process may already be connected, depending on which tests ran before it."""
    script = (
        "import sys, ray\n"
        "from data_pipeline.prepare import main\n"
        "assert not ray.is_initialized()\n"
        "init, asked = ray.init, []\n"
        "ray.init = lambda **options: asked.append(options['address']) or init(**options)\n"
        "main(['shapes3d', '--from-file', sys.argv[1], '--out', sys.argv[2]])\n"
        "print('after the build, Ray is', 'up' if ray.is_initialized() else 'down')\n"
        "print('Ray asked for:', asked)\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", script, str(shapes3d_file), str(tmp_path / "ra")],
                          capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "after the build, Ray is down" in done.stdout
    assert "Ray asked for: ['local']" in done.stdout, done.stdout
    assert json.loads((tmp_path / "ra" / "manifest.json").read_text())["n_images"] == N_SHAPES


@pytest.mark.slow
def test_prepare_leaves_a_connected_ray_running(tmp_path, shapes3d_file, ray_session):
    """In a process already connected to Ray, ``prepare`` runs its pipeline there and leaves that
    connection up: the session's other tests still use it."""
    node = ray_session.get_runtime_context().get_node_id()
    prepare_main(["shapes3d", "--from-file", str(shapes3d_file), "--out", str(tmp_path / "ra")])
    assert ray_session.is_initialized() and ray_session.get_runtime_context().get_node_id() == node
    assert json.loads((tmp_path / "ra" / "manifest.json").read_text())["n_images"] == N_SHAPES


def test_labelled_and_m22_files_convert_to_the_same_layout(tmp_path):
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (40, 16, 16, 3), dtype=np.uint8)
    factors = np.stack([rng.integers(0, 3, 40), rng.normal(size=40)], axis=1)
    write_labelled(tmp_path / "labelled.h5", images, factors, ["arm", "angle"], [0, 4])
    conversion.convert(tmp_path / "labelled.h5", tmp_path / "lab", dataset="labelled", rows_per_block=15,
                       progress=False)
    data, expected = prepared.open_dataset(tmp_path / "lab"), load_labelled(tmp_path / "labelled.h5")
    assert data.name == "labelled" and data.factor_space.names == ("arm", "angle")
    assert np.array_equal(np.asarray(data.images), expected.images) and data.images.shape == (40, 3, 16, 16)
    assert np.array_equal(data.classes, expected.classes) and data.observe is None
    # M22's files may hold 0/1 pixels: the whole file is read once to tell, then stored as 0/255
    space = factor_space("circles")
    np.savez(tmp_path / "circles.npz", images=render("circles", space.all_classes()) // 255,
             factor_values=space.raw_values(space.all_classes()), factor_sizes=np.array(space.sizes))
    conversion.convert(tmp_path / "circles.npz", tmp_path / "circles", dataset="circles", progress=False)
    circles = prepared.open_dataset(tmp_path / "circles")
    assert np.array_equal(circles.images[:, 0], render("circles", space.all_classes()))
    assert circles.observe is not None  # the whole grid: any grid point by index


def test_mpi3d_npz_is_streamed_in_grid_order(tmp_path, monkeypatch):
    """The MPI3D path on a stand-in grid: the real lengths (460,800 or 1,036,800 images) are too
    big for the suite, so a 3 × 4 space stands in for the factor space the length implies."""
    from data_pipeline import loaders
    from data_pipeline.spaces import sprite_space

    monkeypatch.setattr(loaders, "MPI3D_SIZES_BY_LENGTH", {12: (3, 4)})
    monkeypatch.setattr(conversion, "mpi3d_space", lambda c, s: sprite_space(("colour", "shape"), (c, s)))
    images = np.random.default_rng(0).integers(0, 256, (12, 64, 64, 3), dtype=np.uint8)
    np.savez(tmp_path / "mpi3d_toy.npz", images=images)  # stored, as np.savez writes it
    conversion.convert(tmp_path / "mpi3d_toy.npz", tmp_path / "ra", rows_per_block=5, progress=False)
    data = prepared.open_dataset(tmp_path / "ra")
    assert np.array_equal(np.asarray(data.images), images.transpose(0, 3, 1, 2))
    assert data.name == "mpi3d" and data.classes.tolist() == [[c, s] for c in range(3) for s in range(4)]
    np.savez(tmp_path / "mpi3d_real.npz", images=images[:7])
    with pytest.raises(ValueError, match="expected length 12; got 7"):
        conversion.convert(tmp_path / "mpi3d_real.npz", tmp_path / "rb", progress=False)
