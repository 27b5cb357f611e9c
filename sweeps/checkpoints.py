"""A trial's checkpoints: written beside its training, and found again when it resumes.

**In training** a trial's checkpoints are disgen's own, not Tune's: ``CheckpointWriter`` copies
the trainer's state (on the device's host, the only pause the training sees) and one background
thread writes it, one file per model (``models.checkpoint``), straight into the trial's folder on
storage as ``training_checkpoint_<step>``, sealed last (``SEAL``); the next checkpoint waits for the
previous one. The newest two are kept. The trial's progress reports to Tune carry no checkpoint, so
Tune neither uploads one inside ``tune.report`` while the GPU waits nor deletes one before its own
state names the next. **The final checkpoint** (the trained weights, one file per model, so that an
evaluation task reads its own member's file) is reported to Tune as before; once the driver has it
(``sweeps.results.ResultsWriter``), the trial's in-training checkpoints are removed
(``remove_training_checkpoints``).

A trial that starts again (a failed worker, a lost node, a resumed driver) goes on from the
newest complete checkpoint in its folder on storage (``newest_checkpoint``), whatever checkpoint
Tune's record names, if any. The in-training checkpoints live in the folder disgen names for the
trial (``checkpoint_folder``), not necessarily Tune's: a trial that runs again as a new Tune trial
(its driver died before Tune saved its state) gets a Tune folder with a suffix, but finds them.
"""

from __future__ import annotations

import collections
import json
import os
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import torch
from ray import tune

from models import checkpoint as trainer_file
from sweeps.packing import dirname
from sweeps.trials import TrialConfig

# In-training checkpoints, written by ``CheckpointWriter``; Tune's own are ``checkpoint_<index>``.
TRAINING_PREFIX = "training_checkpoint_"
# How many in-training checkpoints a trial keeps: the newest, and the one before it in case the
# newest cannot be read back.
KEEP = 2


# Written into every checkpoint folder beside its files: the trial's keys, how far the checkpoint
# goes, and each file's size. Tune copies a folder's files in no set order, and a trial run again
# in its old folder (a resume) writes over the old checkpoint folders of the same names, so a
# checkpoint counts as complete only where every file has the size its seal names and the state
# read back goes exactly as far as the seal says.
SEAL = "disgen_checkpoint.json"


def _reach(histories: list[list[dict]]) -> int:
    """How far a checkpoint goes: the last step any of its models reported."""
    return max((history[-1]["step"] for history in histories if history), default=0)


def seal(folder: str, members: Sequence[TrialConfig], histories: list[list[dict]], final: bool) -> None:
    """Write the checkpoint's seal (``SEAL``) into ``folder``, once its other files are written."""
    files = {name: os.path.getsize(os.path.join(folder, name)) for name in sorted(os.listdir(folder))
             if name != SEAL}
    with open(os.path.join(folder, SEAL), "w") as file:
        json.dump({"trial_keys": [m.trial_key for m in members], "step": _reach(histories),
                   "final": final, "files": files}, file)


def _sealed(filesystem, path: str, members: Sequence[TrialConfig]) -> dict | None:
    """The seal of the checkpoint folder at ``path`` if it is this trial's and every file it names
    is there at its size; else None (another trial's, half written, or from before seals)."""
    from pyarrow import fs

    if filesystem.get_file_info(f"{path}/{SEAL}").type != fs.FileType.File:
        return None  # no seal (yet)
    try:
        with filesystem.open_input_stream(f"{path}/{SEAL}") as stream:
            sealed = json.loads(stream.read())
        infos = filesystem.get_file_info([f"{path}/{name}" for name in sealed["files"]])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None  # gone meanwhile, or not a seal this code wrote
    if sealed.get("trial_keys") != [m.trial_key for m in members]:
        return None
    sizes = [info.size if info.type == fs.FileType.File else None for info in infos]
    return sealed if sizes == list(sealed["files"].values()) else None


def _stored_checkpoints(members: Sequence[TrialConfig], filesystem,
                        folder: str) -> list[tuple[dict, tune.Checkpoint]]:
    """The complete checkpoints in the trial's folder on storage, as (seal, checkpoint); storage
    that does not answer fails the trial (Tune retries it)."""
    from pyarrow import fs

    entries = filesystem.get_file_info(fs.FileSelector(folder, allow_not_found=True))
    found = []
    for entry in entries:
        name = entry.base_name
        if entry.type == fs.FileType.Directory and name.startswith(("checkpoint_", TRAINING_PREFIX)):
            sealed = _sealed(filesystem, entry.path, members)
            if sealed is not None:
                found.append((sealed, tune.Checkpoint(entry.path, filesystem=filesystem)))
    return found


def newest_checkpoint(members: Sequence[TrialConfig], filesystem, folder: str, given: tune.Checkpoint | None,
                      others: Sequence[str] = ()) -> tuple[tune.Checkpoint, dict] | None:
    """The checkpoint a trial goes on from, and its state: the one that goes furthest of Tune's
    (``given``, from ``tune.get_checkpoint``) and the complete ones in the trial's ``folder`` on
    storage (a pyarrow ``filesystem``) and in the ``others`` (Tune's folder of the trial, where its
    final checkpoint goes, if that is not ``folder``). Tune's record
    can name an older checkpoint than storage holds, or one already deleted, or none: a driver that
    died after a newer checkpoint registered and before Tune saved its state, or a resume that
    restores only the newest of an extended experiment's Tune runs. A checkpoint whose state does
    not read back whole, or goes less far than its seal says, is passed over for the next; one that
    cannot be read for another reason (storage that does not answer) fails the trial."""
    candidates = [found for place in dict.fromkeys([folder, *others])
                  for found in _stored_checkpoints(members, filesystem, place)]
    if given is not None and not any(c.path == given.path for _, c in candidates):
        # Tune's own, from before seals (or unsealed): tried after every sealed one that goes further
        candidates.append(({"step": -1, "final": False}, given))
    candidates.sort(key=lambda c: (bool(c[0].get("final")), c[0]["step"]), reverse=True)
    for sealed, checkpoint in candidates:
        try:
            with checkpoint.as_directory() as folder:
                state = trainer_file.load(folder)
        except (FileNotFoundError, trainer_file.CheckpointError):
            continue  # gone or torn meanwhile: the next one back
        # any other error (storage that does not answer) fails the trial, which Tune retries: never
        # a silent start from an older checkpoint, or from step 0
        if sealed["step"] in (-1, _reach(state["histories"])):
            return checkpoint, state
    return None


def checkpoint_due(step: int, total_steps: int, every_steps: int, every_seconds: float,
                   seconds_since: float) -> bool:
    """Whether the report at ``step`` carries a checkpoint: every ``every_steps`` steps, or once
    ``every_seconds`` have passed since the last one (0 turns either off), so a lost node costs
    minutes, not a fifth of a run. Never at the end: the final report carries the trained model."""
    if step >= total_steps:
        return False
    by_steps = bool(every_steps) and step % every_steps == 0
    return by_steps or bool(every_seconds and seconds_since >= every_seconds)


def checkpoint_folder(storage, members: Sequence[TrialConfig]) -> str:
    """The folder of a trial's in-training checkpoints, on the pyarrow file system of ``storage``
    (a trial's or a worker's Tune ``StorageContext``): ``<experiment>/<disgen's name of the trial>``,
    the same whichever Tune trial runs it."""
    return f"{storage.experiment_fs_path.rstrip('/')}/{dirname(members)}"


def snapshot(value):
    """A copy of a state dict (``value``) that training cannot change: every tensor copied into
    host memory of its own, the containers rebuilt; numbers and strings are shared (immutable)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(snapshot(v) for v in value)
    return value


class CheckpointWriter:
    """One trial's in-training checkpoints (the module docstring), written by one background
    thread into the folder ``folder`` of the pyarrow ``filesystem`` (the trial's on storage).
    ``save`` returns once the state is copied; a write that fails raises at the next ``save`` or at
    ``wait``, which fails the trial (Tune retries it, from the newest checkpoint that was whole).
    ``resumed_from``: the checkpoint the trial went on from, kept until two newer are written."""

    def __init__(self, filesystem, folder: str, members: Sequence[TrialConfig],
                 resumed_from: str | None = None, keep: int = KEEP):
        self.filesystem, self.folder, self.members = filesystem, folder.rstrip("/"), list(members)
        self.kept = collections.deque(maxlen=keep)
        if resumed_from and os.path.basename(resumed_from.rstrip("/")).startswith(TRAINING_PREFIX):
            self.kept.append(os.path.basename(resumed_from.rstrip("/")))
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="disgen-checkpoint")
        self._pending = None

    def save(self, trainer_state: dict, histories: list[list[dict]]) -> None:
        """Checkpoint the trainer's state (``trainer_state``, read now) and the models' loss
        histories, written in the background; first waits for the previous checkpoint."""
        self.wait()
        state = snapshot(trainer_state)
        histories = [list(history) for history in histories]  # a report is never changed once made
        self._pending = self._thread.submit(self._write, state, histories)

    def wait(self) -> None:
        """Until the checkpoint being written is on storage and sealed; raises its error, if any."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self, raise_error: bool = True) -> None:
        """Wait for the last checkpoint; then no more are written. ``raise_error=False``: its
        error, if any, is not raised (training has already failed with its own)."""
        try:
            self.wait()
        except Exception:
            if raise_error:
                raise
        finally:
            self._thread.shutdown(wait=True)

    def _write(self, state: dict, histories: list[list[dict]]) -> None:
        from pyarrow import fs

        name = f"{TRAINING_PREFIX}{_reach(histories):010d}"
        target = f"{self.folder}/{name}"
        self.filesystem.create_dir(target)
        if self.filesystem.get_file_info(f"{target}/{SEAL}").type == fs.FileType.File:
            self.filesystem.delete_file(f"{target}/{SEAL}")  # a rewrite: unsealed until whole again
        if isinstance(self.filesystem, fs.LocalFileSystem):  # a disk or a shared mount: written in place
            trainer_file.save_training(target, state, histories)
            seal(target, self.members, histories, final=False)
        else:  # an object store: written here, then uploaded file by file, the seal last
            with tempfile.TemporaryDirectory(prefix="disgen-checkpoint-") as local:
                trainer_file.save_training(local, state, histories)
                seal(local, self.members, histories, final=False)
                for file in [*sorted(set(os.listdir(local)) - {SEAL}), SEAL]:
                    fs.copy_files(os.path.join(local, file), f"{target}/{file}",
                                  source_filesystem=fs.LocalFileSystem(),
                                  destination_filesystem=self.filesystem)
        if name in self.kept:
            self.kept.remove(name)
        self.kept.append(name)
        self._prune()

    def _prune(self) -> None:
        remove_training_checkpoints(self.filesystem, self.folder, keep=self.kept)


def remove_training_checkpoints(filesystem, folder: str, keep=()) -> None:
    """Delete every in-training checkpoint in the trial folder ``folder`` of the pyarrow
    ``filesystem`` but those named in ``keep``."""
    from pyarrow import fs

    for entry in filesystem.get_file_info(fs.FileSelector(folder, allow_not_found=True)):
        if (entry.type == fs.FileType.Directory and entry.base_name.startswith(TRAINING_PREFIX)
                and entry.base_name not in keep):
            filesystem.delete_dir(entry.path)
