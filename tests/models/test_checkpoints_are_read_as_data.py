"""trainer.pt is read as data only: a crafted file cannot run code, and an old pickled one is
refused with the command that converts it."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from models import ModelConfig, build
from models.checkpoint import CheckpointError, convert, load, save_final, save_training


class Payload:
    """Unpickling this calls exec, which writes a marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('pwned')",)


def test_the_payload_really_writes_its_marker_when_unpickled(tmp_path):
    marker = tmp_path / "marker"
    pickle.loads(pickle.dumps(Payload(marker)))
    assert marker.exists()  # so the refusals below are not vacuous


def test_a_crafted_checkpoint_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "marker"
    path = tmp_path / "trainer.pt"
    torch.save({"format": 2, "final": True, "config": Payload(marker)}, path)
    with pytest.raises(CheckpointError, match="needs pickle"):
        load(str(path))
    assert not marker.exists()

    from analysis.trained_models import count_models

    with pytest.raises(CheckpointError, match="needs pickle"):
        count_models(str(path))
    assert not marker.exists()


def test_a_written_checkpoint_loads_as_data(tmp_path):
    model = build(ModelConfig(latent_dim=3))
    config = {"members": [{"dataset": "dsprites", "trial_key": "k", "lr_milestones": [10, 20]}]}
    history = [[{"step": 7, "loss": 1.5}]]
    save_final(str(tmp_path), [model.state_dict()], [7], {1: "diverged"}, history, config)
    state = load(str(tmp_path))  # a folder or the file
    assert state["final"] and state["steps"] == [7] and state["errors"] == {1: "diverged"}
    assert state["config"] == config and state["histories"] == history
    assert all(torch.equal(a, b) for a, b in zip(state["models"][0].values(), model.state_dict().values()))
    save_training(str(tmp_path), {"members": [{"step": 3, "batch_rng": {"state": {"state": 2**100}}}]}, [[]])
    assert load(str(tmp_path / "trainer.pt"))["trainer"]["members"][0]["step"] == 3


def test_an_old_pickled_checkpoint_is_refused_with_the_convert_command_and_converts(tmp_path):
    import numpy as np

    model = build(ModelConfig(latent_dim=3))
    old = {"final": True, "models": [model.state_dict()], "steps": [np.int64(4)], "errors": {},
           "histories": [[{"step": np.int64(4), "loss": np.float64(2.0)}]],
           "config": {"pack": [{"dataset": "dsprites", "trial_key": "k"}]}}
    path = tmp_path / "trainer.pt"
    torch.save(old, path)
    with pytest.raises(CheckpointError, match=f"python -m models.checkpoint --convert {path}"):
        load(str(path))
    convert(str(path))
    state = load(str(path))
    assert state["config"] == {"members": [{"dataset": "dsprites", "trial_key": "k"}]}
    assert state["steps"] == [4] and state["histories"][0][0]["loss"] == 2.0


def test_an_old_checkpoint_written_under_numpy_1_converts(tmp_path):
    import zipfile

    import numpy as np

    path = tmp_path / "trainer.pt"
    torch.save({"final": True, "models": [{}], "steps": [np.int64(4)], "errors": {}, "histories": [[]],
                "config": {"dataset": "dsprites"}}, path)
    with zipfile.ZipFile(path) as z:  # name numpy's scalar as numpy 1.x did
        files = {name: z.read(name) for name in z.namelist()}
    pickled = next(name for name in files if name.endswith("data.pkl"))
    files[pickled] = files[pickled].replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    assert "numpy.core.multiarray.scalar" in torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
    convert(str(path))
    assert load(str(path))["steps"] == [4]


def test_converting_a_crafted_old_checkpoint_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "marker"
    path = tmp_path / "trainer.pt"
    torch.save({"final": True, "models": [], "config": Payload(marker)}, path)
    before = path.read_bytes()
    with pytest.raises(CheckpointError, match="refused, not converted: it needs builtins.exec"):
        convert(str(path))
    assert not marker.exists() and path.read_bytes() == before
    from models.checkpoint import main

    assert main(["--convert", str(path)]) == 2
    assert not marker.exists()


@pytest.mark.parametrize("content", [b"", b"not a checkpoint", b"PK\x03\x04truncated"])
def test_a_truncated_or_foreign_file_is_a_clear_error(tmp_path, content):
    path = tmp_path / "trainer.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match="trainer.pt"):
        load(str(path))
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load(str(tmp_path / "missing.pt"))
    assert os.path.exists(path)
