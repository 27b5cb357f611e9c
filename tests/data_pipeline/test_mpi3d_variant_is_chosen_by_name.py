"""MPI3D's three sets (toy, realistic, real) share one factor grid; the dataset's name chooses the
file: ``mpi3d_real`` reads mpi3d_real.npz (M22's MPI3D conditions), plain ``mpi3d`` the toy set."""

import numpy as np
import pytest

from data_pipeline import conversion
from data_pipeline.conversion import mpi3d_variant, real_file_path


@pytest.fixture
def small_grid(monkeypatch):
    """A 3 × 4 stand-in grid: the real lengths (1,036,800 images) are too big for the suite."""
    from data_pipeline import loaders
    from data_pipeline.spaces import sprite_space

    monkeypatch.setattr(loaders, "MPI3D_SIZES_BY_LENGTH", {12: (3, 4)})
    monkeypatch.setattr(conversion, "mpi3d_space", lambda c, s: sprite_space(("colour", "shape"), (c, s)))


def test_the_name_chooses_the_set():
    assert [mpi3d_variant(n) for n in ("mpi3d", "MPI3D_toy", "mpi3d_realistic", "mpi3d_real")] == \
        ["toy", "toy", "realistic", "real"]
    with pytest.raises(KeyError, match="mpi3d_real"):
        mpi3d_variant("mpi3d_cartoon")


def test_a_real_trial_reads_the_real_set_and_a_plain_one_the_toy_set(tmp_path, small_grid):
    from sweeps.data import real_file

    toy, real = (np.full((12, 64, 64, 3), v, np.uint8) for v in (10, 200))
    np.savez(tmp_path / "mpi3d_toy.npz", images=toy)
    np.savez(tmp_path / "mpi3d_real.npz", images=real)
    assert real_file_path("mpi3d_real", tmp_path).name == "mpi3d_real.npz"
    assert real_file_path("mpi3d", tmp_path).name == "mpi3d_toy.npz"
    reference, labels = real_file("mpi3d_real", str(tmp_path))
    assert reference.uri.endswith("mpi3d_real.npz") and labels.image_shape == (3, 64, 64)
    toy_reference = real_file("mpi3d", str(tmp_path))[0]
    assert toy_reference.uri.endswith("mpi3d_toy.npz") and toy_reference.content_id != reference.content_id
    # the images the trial trains on are the real set's
    source = conversion.RealFile(real_file_path("mpi3d_real", tmp_path), "mpi3d_real")
    first, images = next(iter(source.pieces(0, 4)))
    assert first == 0 and images.shape == (4, 3, 64, 64) and set(np.unique(images)) == {200}


def test_a_missing_real_set_names_its_file_and_its_download(tmp_path, small_grid):
    from sweeps.data import MissingData, real_file

    np.savez(tmp_path / "mpi3d_toy.npz", images=np.zeros((12, 64, 64, 3), np.uint8))  # the toy set only
    with pytest.raises(MissingData) as raised:
        real_file("mpi3d_real", str(tmp_path))
    assert "mpi3d_real.npz" in str(raised.value)
    assert raised.value.command == f"python -m data_pipeline.download mpi3d_real --to {tmp_path}"


def test_m22s_mpi3d_conditions_read_mpi3d_real():
    from sweeps.grid import get_spec, trial_configs

    trials = trial_configs(get_spec("montero2022"), "montero2022", "full", [0])
    mpi3d = {t.data.dataset for t in trials if t.data.dataset.startswith("mpi3d")}
    assert mpi3d == {"mpi3d_real"}
