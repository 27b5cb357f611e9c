"""In-training checkpoints off the training path (``sweeps.checkpoints.CheckpointWriter``): ``save``
returns once the state is copied, the files are written in the background (one per model), the
next checkpoint waits for the previous, the newest two are kept, a failed write surfaces and
publishes nothing; and an evaluation reads only its own member's file of a final checkpoint."""

from __future__ import annotations

import os
import threading

import pyarrow.fs
import pytest
import torch

from models import checkpoint as trainer_file
from sweeps import checkpoints
from sweeps.checkpoints import SEAL, TRAINING_PREFIX, CheckpointWriter, newest_checkpoint
from sweeps.trials import TrialConfig

LOCAL = pyarrow.fs.LocalFileSystem()


def trials(n):
    return [TrialConfig.complete({"dataset": "dsprites", "split": "blank_side", "n_images": 100,
                                  "data_seed": 0, "report_every": 5, "n_nll": 10, "n_metric": 10,
                                  "architecture": "burgess", "objective": "beta_vae", "steps": 40,
                                  "beta": float(b + 1), "seed": 0}) for b in range(n)]


def pack_state(step, members):
    """A pack's state_dict as a trainer hands it over: live tensors, changed in place later."""
    return {"members": [{"step": step, "model": {"w": torch.full((1000,), float(step + k))}}
                        for k in range(members)], "errors": {}}


def histories(step, members):
    return [[{"step": s, "loss": 1.0} for s in range(5, step + 1, 5)] for _ in range(members)]


def folders(path):
    return sorted(p for p in os.listdir(path) if p.startswith(TRAINING_PREFIX))


@pytest.fixture
def slow_write(monkeypatch):
    """Writes wait until the returned event is set."""
    release = threading.Event()
    save_training = trainer_file.save_training

    def waiting(*args, **kwargs):
        assert release.wait(30), "the test never released the write"
        return save_training(*args, **kwargs)

    monkeypatch.setattr(checkpoints.trainer_file, "save_training", waiting)
    return release


def test_save_returns_before_the_write_and_the_checkpoint_holds_the_state_at_save(tmp_path, slow_write):
    members = trials(3)
    writer = CheckpointWriter(LOCAL, str(tmp_path), members)
    state = pack_state(10, 3)
    writer.save(state, histories(10, 3))
    assert newest_checkpoint(members, LOCAL, [str(tmp_path)]) is None  # returned while the write waits
    for member in state["members"]:  # training goes on, changing the live tensors in place
        member["model"]["w"].add_(100.0)
    slow_write.set()
    writer.close()
    folder = tmp_path / f"{TRAINING_PREFIX}{10:010d}"
    assert sorted(os.listdir(folder)) == [SEAL, "member_0000.pt", "member_0001.pt", "member_0002.pt",
                                          trainer_file.CHECKPOINT_FILE]
    checkpoint, loaded = newest_checkpoint(members, LOCAL, [str(tmp_path)])
    assert checkpoint == str(folder)
    assert [float(m["model"]["w"][0]) for m in loaded["trainer"]["members"]] == [10.0, 11.0, 12.0]


def test_the_next_checkpoint_waits_for_the_previous_one(tmp_path, slow_write):
    writer = CheckpointWriter(LOCAL, str(tmp_path), trials(1))
    writer.save(pack_state(10, 1), histories(10, 1))
    second = threading.Thread(target=writer.save, args=(pack_state(20, 1), histories(20, 1)))
    second.start()
    second.join(0.5)
    assert second.is_alive()  # still waiting for the first write
    slow_write.set()
    second.join(30)
    writer.close()
    assert folders(tmp_path) == [f"{TRAINING_PREFIX}{10:010d}", f"{TRAINING_PREFIX}{20:010d}"]


def test_the_newest_two_are_kept_the_one_resumed_from_until_two_newer(tmp_path):
    members = trials(2)
    stale = tmp_path / f"{TRAINING_PREFIX}{90:010d}"  # an unreadable one from an earlier worker
    stale.mkdir()
    first = CheckpointWriter(LOCAL, str(tmp_path), members)
    first.save(pack_state(10, 2), histories(10, 2))
    first.close()
    resumed_from = str(tmp_path / f"{TRAINING_PREFIX}{10:010d}")
    # the unsealed one stays while the trial trains (it may be a zombie worker's, being written)
    assert folders(tmp_path) == [f"{TRAINING_PREFIX}{s:010d}" for s in (10, 90)]

    writer = CheckpointWriter(LOCAL, str(tmp_path), members, resumed_from=resumed_from)
    writer.save(pack_state(20, 2), histories(20, 2))
    writer.wait()
    assert folders(tmp_path) == [f"{TRAINING_PREFIX}{s:010d}" for s in (10, 20, 90)]
    writer.save(pack_state(30, 2), histories(30, 2))
    writer.close()
    assert folders(tmp_path) == [f"{TRAINING_PREFIX}{s:010d}" for s in (20, 30, 90)]
    checkpoints.remove_training_checkpoints(LOCAL, str(tmp_path), members)
    assert folders(tmp_path) == [f"{TRAINING_PREFIX}{90:010d}"]
    checkpoints.remove_training_checkpoints(LOCAL, str(tmp_path), members, unsealed=True)  # the end
    assert folders(tmp_path) == []


def test_a_failed_write_raises_at_the_next_checkpoint_and_publishes_nothing(tmp_path, monkeypatch):
    members = trials(2)
    writer = CheckpointWriter(LOCAL, str(tmp_path), members)
    writer.save(pack_state(10, 2), histories(10, 2))
    writer.wait()

    real_save = torch.save

    def disk_full(value, path, *args, **kwargs):
        if str(path).endswith("member_0001.pt"):
            raise OSError(28, "No space left on device")
        return real_save(value, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", disk_full)
    writer.save(pack_state(20, 2), histories(20, 2))
    with pytest.raises(OSError, match="No space left"):
        writer.save(pack_state(30, 2), histories(30, 2))  # the error of the write before
    writer.save(pack_state(30, 2), histories(30, 2))
    writer.close(raise_error=False)  # as when training has failed with its own error: not this one
    writer.close()  # closed: nothing pending, nothing raised
    checkpoint, state = newest_checkpoint(members, LOCAL, [str(tmp_path)])
    assert os.path.basename(checkpoint) == f"{TRAINING_PREFIX}{10:010d}"  # the step-20 one has no seal
    assert not (tmp_path / f"{TRAINING_PREFIX}{20:010d}" / SEAL).exists()


def test_on_s3_the_writer_publishes_a_checkpoint_a_resume_finds(s3_server):
    from analysis import storage

    s3, folder = storage.resolve("s3://disgen-test/exp/pack-trial")
    members = trials(2)
    writer = CheckpointWriter(s3, folder, members)
    for step in (10, 20, 30):
        writer.save(pack_state(step, 2), histories(step, 2))
    writer.close()
    names = sorted(i.base_name for i in s3.get_file_info(pyarrow.fs.FileSelector(folder)))
    assert names == [f"{TRAINING_PREFIX}{s:010d}" for s in (20, 30)]
    checkpoint, state = newest_checkpoint(members, s3, [folder])
    assert checkpoint.endswith(f"{TRAINING_PREFIX}{30:010d}")
    assert [float(m["model"]["w"][0]) for m in state["trainer"]["members"]] == [30.0, 31.0]


def test_an_evaluation_reads_only_its_members_file(tmp_path, s3_server):
    from analysis import storage
    from sweeps.evaluation import _final_member

    weights = [{"w": torch.full((4,), float(k))} for k in range(3)]
    save = lambda folder: trainer_file.save_final(str(folder), weights, [7, 8, 9], {}, histories(10, 3),
                                                  {"members": [t.to_dict() for t in trials(3)]})
    local = tmp_path / "checkpoint_000000"
    local.mkdir()
    save(local)
    for k in (0, 2):  # the other members' files are not needed
        (local / trainer_file.member_file(k)).unlink()
    with pytest.raises(trainer_file.CheckpointError, match="member_0000.pt"):
        trainer_file.load(str(local))  # the whole pack is not readable now
    read, history, step = _final_member(str(local), 1)
    assert torch.equal(read["w"], weights[1]["w"]) and step == 8 and history == histories(10, 3)[1]

    remote = "s3://disgen-test/exp/pack/checkpoint_000000"
    for name in os.listdir(local):
        storage.upload(str(local / name), storage.join(remote, name))
    read, _, step = _final_member(remote, 1)  # its folder on S3 holds member 1's file only
    assert torch.equal(read["w"], weights[1]["w"]) and step == 8
