"""A trial's checkpoints are its own by its whole key (``sweeps.checkpoints``): the folder of its
in-training checkpoints is named by the whole trial key, so two trials whose names collide on the
old 6-character short key each resume their own step and lose nothing; pruning and clean-up touch
only checkpoints whose seal names the trial; a checkpoint in the trial's Tune folder (named by the
short key) counts only where its seal is the trial's; every file's SHA-256 in the seal is checked
on a resume and by a deferred evaluation's read of its member."""

from __future__ import annotations

import os
import pathlib

import pyarrow.fs
import pytest
import torch

from models import checkpoint as trainer_file
from sweeps.checkpoints import (
    TRAINING_PREFIX,
    CheckpointMismatch,
    CheckpointWriter,
    checkpoint_folder,
    newest_checkpoint,
    remove_training_checkpoints,
    seal,
    trial_folder,
)
from sweeps.evaluation import _final_member
from sweeps.packing import dirname
from sweeps.trials import TrialConfig

LOCAL = pyarrow.fs.LocalFileSystem()


def trial(steps=40, key=None):
    config = TrialConfig.complete({"dataset": "dsprites", "split": "blank_side", "n_images": 100,
                                   "data_seed": 0, "report_every": 5, "n_nll": 10, "n_metric": 10,
                                   "architecture": "burgess", "objective": "beta_vae", "steps": steps,
                                   "beta": 1.0, "seed": 0})
    return config if key is None else TrialConfig({**config.to_dict(), "trial_key": key})


def colliding():
    """Two distinct trials whose keys share their first 6 characters: the same short folder name."""
    a = trial(40)
    b = trial(80, key=a.trial_key[:6] + ("0000" if a.trial_key[6:] != "0000" else "1111"))
    assert a.trial_key != b.trial_key and a.dirname == b.dirname
    return [a], [b]


def state(step, value):
    return {"members": [{"step": step, "model": {"w": torch.full((64,), float(value))}}], "errors": {}}


def histories(step):
    return [[{"step": s, "loss": 1.0} for s in range(5, step + 1, 5)]]


def storage(tmp_path):
    """An experiment's folder."""
    return str(tmp_path / "exp")


def folder_of(where, members) -> str:
    return checkpoint_folder(where, members)[1]


def resumed(members, where):
    """(step, weight) of the checkpoint the trial goes on from, reading both of its folders."""
    found = newest_checkpoint(members, LOCAL, [folder_of(where, members), trial_folder(where, members)])
    if found is None:
        return None
    return found[1]["histories"][0][-1]["step"], float(found[1]["trainer"]["members"][0]["model"]["w"][0])


def old_checkpoint(folder, members, step, value):
    os.makedirs(folder)
    trainer_file.save_training(str(folder), state(step, value), histories(step))
    seal(str(folder), members, histories(step), final=False)


def test_two_trials_that_collide_on_the_short_name_each_resume_their_own_step(tmp_path):
    a, b = colliding()
    where = storage(tmp_path)
    assert folder_of(where, a) != folder_of(where, b)
    assert folder_of(where, a).endswith("/checkpoints/" + dirname(a, full=True))
    writers = {id(m): CheckpointWriter(LOCAL, folder_of(where, m), m) for m in (a, b)}
    for step in (10, 20, 30):  # written turn about, as two trials on two workers would
        for members, value in ((a, 1.0), (b, 2.0)):
            writers[id(members)].save(state(step, value + step), histories(step))
            writers[id(members)].wait()
    for writer in writers.values():
        writer.close()
    assert resumed(a, where) == (30, 31.0)
    assert resumed(b, where) == (30, 32.0)
    for members in (a, b):  # each keeps its newest two: nothing of its own pruned by the other
        assert sorted(os.listdir(folder_of(where, members))) == [
            f"{TRAINING_PREFIX}{s:010d}" for s in (20, 30)]


def test_an_old_experiments_shared_short_folder_still_resumes_each_trial_and_is_cleaned_by_seal(tmp_path):
    a, b = colliding()
    where = storage(tmp_path)
    shared = trial_folder(where, a)
    assert shared == trial_folder(where, b)  # the old layout: one folder for both
    old_checkpoint(f"{shared}/{TRAINING_PREFIX}{20:010d}", a, 20, 21.0)
    old_checkpoint(f"{shared}/{TRAINING_PREFIX}{30:010d}", b, 30, 32.0)
    assert resumed(a, where) == (20, 21.0)
    assert resumed(b, where) == (30, 32.0)
    # a goes on, writing its own folder; its pruning never reaches the shared one
    resumed_from = f"{shared}/{TRAINING_PREFIX}{20:010d}"
    writer = CheckpointWriter(LOCAL, folder_of(where, a), a, resumed_from=resumed_from)
    for step in (25, 30, 35):
        writer.save(state(step, 100.0 + step), histories(step))
    writer.close()
    assert resumed(a, where) == (35, 135.0)
    # a's final clean-up (sweeps.results) deletes its own in the shared folder, never b's
    remove_training_checkpoints(LOCAL, folder_of(where, a), a, unsealed=True)
    remove_training_checkpoints(LOCAL, shared, a)
    assert os.listdir(shared) == [f"{TRAINING_PREFIX}{30:010d}"]
    assert resumed(b, where) == (30, 32.0)
    assert resumed(a, where) is None


def test_pruning_leaves_another_trials_checkpoint_and_one_being_written(tmp_path):
    a, b = colliding()
    folder = tmp_path / "trial"
    old_checkpoint(folder / f"{TRAINING_PREFIX}{5:010d}", b, 5, 9.0)
    # unsealed: half written by an attempt that crashed, or being written now by a zombie worker of
    # this trial (Tune gave up on it and started another): pruning leaves both
    for step in (7, 40):
        (folder / f"{TRAINING_PREFIX}{step:010d}").mkdir(parents=True)
        (folder / f"{TRAINING_PREFIX}{step:010d}" / "member-0.pt").write_bytes(b"being written")
    writer = CheckpointWriter(LOCAL, str(folder), a)
    for step in (10, 20, 30):
        writer.save(state(step, step), histories(step))
    writer.close()
    assert sorted(os.listdir(folder)) == [f"{TRAINING_PREFIX}{s:010d}" for s in (5, 7, 20, 30, 40)]
    # the trial's clean-up once its final checkpoint is stored takes its own, sealed or not
    remove_training_checkpoints(LOCAL, str(folder), a, unsealed=True)
    assert os.listdir(folder) == [f"{TRAINING_PREFIX}{5:010d}"]


def test_a_checkpoint_in_the_shared_tune_folder_counts_only_sealed_for_the_trial_and_whole(tmp_path):
    a, b = colliding()
    where = storage(tmp_path)
    tune_folder = pathlib.Path(trial_folder(where, a)) / "checkpoint_000001"  # where Tune keeps the final one
    old_checkpoint(tune_folder, b, 40, 7.0)  # sealed for another trial
    assert resumed(a, where) is None
    assert resumed(b, where) == (40, 7.0)  # its own trial takes it
    # sealed for this trial but a file changed since (same size): refused too
    trainer_file.save_training(str(tune_folder), state(40, 8.0), histories(40))
    assert resumed(b, where) is None
    # no seal at all: nobody's
    os.remove(tune_folder / "disgen_checkpoint.json")
    assert resumed(a, where) is None and resumed(b, where) is None


def test_a_checkpoint_whose_file_changed_after_its_seal_is_passed_over_for_the_one_before(tmp_path):
    a, _ = colliding()
    folder = tmp_path / "trial"
    old_checkpoint(folder / f"{TRAINING_PREFIX}{10:010d}", a, 10, 10.0)
    old_checkpoint(folder / f"{TRAINING_PREFIX}{20:010d}", a, 20, 20.0)
    changed = folder / f"{TRAINING_PREFIX}{20:010d}"
    before = (changed / trainer_file.member_file(0)).stat().st_size
    trainer_file.save_training(str(changed), state(20, 666.0), histories(20))  # same sizes, other bytes
    assert (changed / trainer_file.member_file(0)).stat().st_size == before
    found = newest_checkpoint(a, LOCAL, [str(folder)])
    assert os.path.basename(found[0]) == f"{TRAINING_PREFIX}{10:010d}"


def test_a_deferred_evaluation_refuses_a_member_file_that_is_not_the_sealed_one(tmp_path):
    a, _ = colliding()
    folder = tmp_path / "checkpoint_000000"
    folder.mkdir()

    def final(value):
        trainer_file.save_final(str(folder), [{"w": torch.full((8,), value)}], [40], {}, histories(40),
                                {"members": [a[0].to_dict()]})

    final(1.0)
    seal(str(folder), a, histories(40), final=True)
    weights, _, step = _final_member(str(folder), 0)
    assert step == 40 and float(weights["w"][0]) == 1.0
    final(2.0)  # the member's file written over after the seal: same size, other weights
    with pytest.raises(CheckpointMismatch, match="SHA-256"):
        _final_member(str(folder), 0)
