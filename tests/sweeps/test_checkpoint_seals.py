"""Which checkpoint a trial goes on from (``sweeps.checkpoints.newest_checkpoint``): the sealed one
of its own that goes furthest, never a half-written one, another trial's, or a folder whose seal
was copied over an older checkpoint's files."""

import json
import os

import pyarrow.fs
import torch

from models import checkpoint as trainer_file
from sweeps.checkpoints import SEAL, newest_checkpoint, seal
from sweeps.trials import TrialConfig


def trial(beta=1.0):
    return TrialConfig.complete({"dataset": "dsprites", "split": "blank_side", "n_images": 100,
                                 "data_seed": 0, "report_every": 5, "n_nll": 10, "n_metric": 10,
                                 "architecture": "burgess", "objective": "beta_vae", "steps": 40,
                                 "beta": beta, "seed": 0})


def history(step):
    return [{"step": s, "loss": 100.0 - s} for s in range(5, step + 1, 5)]


def write(folder, members, step, final=False, sealed=True):
    os.makedirs(folder)
    histories = [history(step) for _ in members]
    if final:
        trainer_file.save_final(str(folder), [{"w": torch.ones(3)}], [step], {}, histories, {})
    else:
        trainer_file.save_training(str(folder), {"members": [{"w": torch.full((50,), step)}]}, histories)
    if sealed:
        seal(str(folder), members, histories, final=final)


def pick(folder, members):
    found = newest_checkpoint(members, pyarrow.fs.LocalFileSystem(), [str(folder)])
    return None if found is None else (os.path.basename(found[0]), found[1]["histories"][0][-1]["step"])


def test_the_sealed_checkpoint_that_goes_furthest_wins_whatever_its_name(tmp_path):
    members = [trial()]
    write(tmp_path / "checkpoint_000003", members, 20)  # an earlier run's, in the same folder
    write(tmp_path / "checkpoint_000001", members, 30)  # the trial run again, further on
    assert pick(tmp_path, members) == ("checkpoint_000001", 30)
    write(tmp_path / "checkpoint_000002", members, 40, final=True)
    assert pick(tmp_path, members) == ("checkpoint_000002", 40)


def test_a_half_written_foreign_or_unsealed_checkpoint_is_never_picked(tmp_path):
    members = [trial()]
    write(tmp_path / "checkpoint_000000", members, 10)
    # half written: its member's file shorter than its seal says
    write(tmp_path / "checkpoint_000001", members, 20)
    path = tmp_path / "checkpoint_000001" / trainer_file.member_file(0)
    path.write_bytes(path.read_bytes()[:100])
    # its seal copied over an older checkpoint's files (Tune copies files in no set order)
    # (and, to pass the size check, a seal that names the older file's size)
    overwritten = tmp_path / "checkpoint_000002"
    write(overwritten, members, 30)
    newer_seal = json.loads((overwritten / SEAL).read_text())
    write(tmp_path / "old", members, 5)
    older_files = sorted(p.name for p in (tmp_path / "old").iterdir() if p.name != SEAL)
    for name in older_files:
        os.replace(tmp_path / "old" / name, overwritten / name)
    newer_seal["files"] = {name: os.path.getsize(overwritten / name) for name in older_files}
    (overwritten / SEAL).write_text(json.dumps(newer_seal))
    # without a seal (Tune still copying): not counted
    write(tmp_path / "checkpoint_000003", members, 35, sealed=False)
    # another trial's
    write(tmp_path / "checkpoint_000004", [trial(beta=4.0)], 40)
    assert pick(tmp_path, members) == ("checkpoint_000000", 10)
    assert pick(tmp_path / "nothing", members) is None
