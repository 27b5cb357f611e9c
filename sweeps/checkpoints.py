"""A trial's checkpoints: written beside its training, and found again when it resumes.

**In training** a trial's checkpoints are disgen's own: ``CheckpointWriter`` copies
the trainer's state (on the device's host, the only pause the training sees) and one background
thread writes it, one file per model (``models.checkpoint``), straight into the trial's folder on
storage as ``training_checkpoint_<step>``, sealed last (``SEAL``); the next checkpoint waits for the
previous one. The newest two sealed ones are kept (one without a seal, which a zombie worker of the
trial may still be writing, is left until the trial's end). The trial's progress reports carry no
checkpoint, so Tune neither uploads one while the GPU waits nor deletes one. **The final
checkpoint** (the trained weights, one file per model, so that an evaluation task reads its own
member's file) goes with the trial's final report, and Tune copies it into the trial's folder
(``trial_folder``); once the driver has it (``sweeps.results.ResultsWriter``), the trial's
in-training checkpoints are removed (``remove_training_checkpoints``).

A trial that starts again (a failed worker that Tune retries, a lost node, a resumed driver's new
Tune run) goes on from the newest complete checkpoint on storage (``newest_checkpoint``): its
in-training checkpoints live in the folder disgen names for the trial by its whole key, or its
pack's whole id (``checkpoint_folder``), under the ``checkpoints`` prefix of its storage, which no
other trial shares; its final checkpoint in its Tune folder, named by 6 characters of the key
(``trial_folder``, where experiments from before that layout also kept their in-training ones),
which two trials could share: only the checkpoints whose seal names this trial's keys count, or are
deleted. Nothing Tune recorded is asked.

A checkpoint's seal names its trial's keys and each file's size and SHA-256: a checkpoint counts
only where its seal is this trial's, every file has its size, and, once read, its hash
(``check_files``, also for the one member a deferred evaluation reads).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

from analysis import storage
from models import checkpoint as trainer_file
from sweeps.packing import dirname
from sweeps.trials import TrialConfig

# In-training checkpoints, written by ``CheckpointWriter``; the final one Tune names ``checkpoint_<index>``.
TRAINING_PREFIX = "training_checkpoint_"
# The prefix that holds the trials' in-training checkpoint folders (``checkpoint_folder``).
CHECKPOINTS = "checkpoints"
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


class CheckpointMismatch(ValueError):
    """A checkpoint's files are not those its seal names (a torn copy, or files changed since)."""


def file_sha256(path: str) -> str:
    """The SHA-256 of the file at ``path``, in hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def seal(folder: str, members: Sequence[TrialConfig], histories: list[list[dict]], final: bool) -> None:
    """Write the checkpoint's seal (``SEAL``) into ``folder``, once its other files are written:
    the trial's keys, how far it goes, and each file's size and SHA-256."""
    names = [name for name in sorted(os.listdir(folder)) if name != SEAL]
    files = {name: os.path.getsize(os.path.join(folder, name)) for name in names}
    hashes = {name: file_sha256(os.path.join(folder, name)) for name in names}
    with open(os.path.join(folder, SEAL), "w") as file:
        json.dump({"trial_keys": [m.trial_key for m in members], "step": _reach(histories),
                   "final": final, "files": files, "sha256": hashes}, file)


def check_files(folder: str, sealed: dict, names: Sequence[str] | None = None) -> None:
    """Raise ``CheckpointMismatch`` unless each file of the local checkpoint ``folder`` that its
    seal ``sealed`` names (or only ``names``) is there with the seal's SHA-256 (a seal written
    before hashes were: its size)."""
    hashes = sealed.get("sha256")
    for name in sealed["files"] if names is None else names:
        path = os.path.join(folder, name)
        if name not in sealed["files"] or not os.path.isfile(path):
            raise CheckpointMismatch(f"{path}: not in the checkpoint its seal describes")
        if hashes is None:
            if os.path.getsize(path) != sealed["files"][name]:
                raise CheckpointMismatch(f"{path}: not the size its seal names")
        elif file_sha256(path) != hashes.get(name):
            raise CheckpointMismatch(f"{path}: its SHA-256 is not the one its seal names")


def read_local_seal(folder: str) -> dict | None:
    """The seal of the local checkpoint ``folder``; None where it has none (from before seals)."""
    path = os.path.join(folder, SEAL)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as file:
            sealed = json.load(file)
    except ValueError:
        raise CheckpointMismatch(f"{path}: not a seal this code wrote") from None
    if not isinstance(sealed, dict) or not isinstance(sealed.get("files"), dict):
        raise CheckpointMismatch(f"{path}: not a seal this code wrote")
    return sealed


def _read_seal(filesystem, path: str) -> dict | None:
    """The seal of the checkpoint folder at ``path``: None where it has none; ``{}`` where one is
    there but cannot be read as a seal this code wrote (torn, or another's)."""
    from pyarrow import fs

    if filesystem.get_file_info(f"{path}/{SEAL}").type != fs.FileType.File:
        return None  # no seal (yet)
    try:
        with filesystem.open_input_stream(f"{path}/{SEAL}") as stream:
            sealed = json.loads(stream.read())
    except FileNotFoundError:
        return None  # gone meanwhile
    except ValueError:
        return {}
    return sealed if isinstance(sealed, dict) and isinstance(sealed.get("files"), dict) else {}


def _sealed(filesystem, path: str, members: Sequence[TrialConfig]) -> dict | None:
    """The seal of the checkpoint folder at ``path`` if it is this trial's and every file it names
    is there at its size; else None (another trial's, half written, or from before seals)."""
    from pyarrow import fs

    sealed = _read_seal(filesystem, path)
    if not sealed or sealed.get("trial_keys") != [m.trial_key for m in members]:
        return None
    try:
        infos = filesystem.get_file_info([f"{path}/{name}" for name in sealed["files"]])
    except FileNotFoundError:
        return None
    sizes = [info.size if info.type == fs.FileType.File else None for info in infos]
    return sealed if sizes == list(sealed["files"].values()) else None


def _stored_checkpoints(members: Sequence[TrialConfig], filesystem, folder: str) -> list[tuple[dict, str]]:
    """The complete checkpoints of the trial in ``folder`` on storage, as (seal, path); storage that
    does not answer fails the trial (Tune retries it)."""
    from pyarrow import fs

    entries = filesystem.get_file_info(fs.FileSelector(folder, allow_not_found=True))
    found = []
    for entry in entries:
        name = entry.base_name
        if entry.type == fs.FileType.Directory and name.startswith(("checkpoint_", TRAINING_PREFIX)):
            sealed = _sealed(filesystem, entry.path, members)
            if sealed is not None:
                found.append((sealed, entry.path))
    return found


@contextlib.contextmanager
def local_copy(filesystem, path: str) -> Iterator[str]:
    """The checkpoint folder ``path`` of the pyarrow ``filesystem`` as a local folder: itself on a
    local file system, else a temporary copy."""
    from pyarrow import fs

    if isinstance(filesystem, fs.LocalFileSystem):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="disgen-checkpoint-") as local:
        fs.copy_files(path, local, source_filesystem=filesystem, destination_filesystem=fs.LocalFileSystem())
        yield local


def newest_checkpoint(members: Sequence[TrialConfig], filesystem, folders: Sequence[str]
                      ) -> tuple[str, dict] | None:
    """The checkpoint a trial goes on from, and its state: the one that goes furthest of the
    complete ones in ``folders`` on storage (a pyarrow ``filesystem``: the trial's
    ``checkpoint_folder`` and its ``trial_folder``), a final one before any other. A checkpoint
    whose state does not read back whole, or goes less far than its seal says, or whose files do
    not have the SHA-256 its seal names (``check_files``), is passed over for the next; one that
    cannot be read for another reason (storage that does not answer) fails the trial, which Tune
    retries: never a silent start from an older checkpoint, or from step 0."""
    candidates = [found for place in dict.fromkeys(folders)
                  for found in _stored_checkpoints(members, filesystem, place)]
    candidates.sort(key=lambda c: (bool(c[0].get("final")), c[0]["step"]), reverse=True)
    for sealed, path in candidates:
        try:
            with local_copy(filesystem, path) as folder:
                check_files(folder, sealed)
                state = trainer_file.load(folder)
        except (FileNotFoundError, trainer_file.CheckpointError, CheckpointMismatch):
            continue  # gone, torn or changed meanwhile: the next one back
        if sealed["step"] == _reach(state["histories"]):
            return path, state
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


def checkpoint_folder(experiment_dir: str, members: Sequence[TrialConfig]) -> tuple[object, str]:
    """(the pyarrow file system, the folder) of a trial's in-training checkpoints, named by the
    trial's whole key (a pack's whole id), the same whichever Tune trial runs it:
    ``<experiment>/checkpoints/<name>`` on a file system; on an object store under the bucket's own
    ``checkpoints/`` prefix, ``<bucket>/checkpoints/<experiment's path in the bucket>/<name>``,
    which the bucket's lifecycle rule for rotated checkpoints covers (cluster/iam/create_bucket.py)."""
    from pyarrow import fs

    filesystem, experiment = storage.resolve(experiment_dir)
    experiment, name = experiment.rstrip("/"), dirname(members, full=True)
    if isinstance(filesystem, fs.LocalFileSystem):
        return filesystem, f"{experiment}/{CHECKPOINTS}/{name}"
    bucket, _, inner = experiment.partition("/")
    return filesystem, f"{bucket}/{CHECKPOINTS}/{inner}/{name}"


def trial_folder(experiment_dir: str, members: Sequence[TrialConfig]) -> str:
    """A trial's Tune folder on its experiment's file system: ``<experiment>/<the trial's name with
    6 characters of its key>`` (a folder two trials could share), where Tune keeps its final
    checkpoint, and experiments from before ``checkpoint_folder``'s layout kept its in-training
    ones."""
    return f"{storage.resolve(experiment_dir)[1].rstrip('/')}/{dirname(members)}"


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
        parent, name = os.path.split((resumed_from or "").rstrip("/"))
        if parent.rstrip("/") == self.folder and name.startswith(TRAINING_PREFIX):
            self.kept.append(name)
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
        # this trial's sealed checkpoints but the newest kept; never an unsealed one, which may be
        # another attempt's being written (a zombie worker of this trial that Tune gave up on): the
        # trial's clean-up once its final checkpoint is stored removes those (sweeps.results)
        remove_training_checkpoints(self.filesystem, self.folder, self.members, keep=self.kept)


def remove_training_checkpoints(filesystem, folder: str, members: Sequence[TrialConfig], keep=(),
                                unsealed: bool = False) -> None:
    """Delete the in-training checkpoints of the trial ``members`` in the folder ``folder`` of the
    pyarrow ``filesystem``, but those named in ``keep``: those whose seal names the trial's keys,
    never another trial's; ``unsealed``: also those without a seal that can be read (half written;
    for the trial's own folder, ``checkpoint_folder``, which no other trial writes)."""
    from pyarrow import fs

    keys = [m.trial_key for m in members]
    for entry in filesystem.get_file_info(fs.FileSelector(folder, allow_not_found=True)):
        if (entry.type == fs.FileType.Directory and entry.base_name.startswith(TRAINING_PREFIX)
                and entry.base_name not in keep):
            sealed = _read_seal(filesystem, entry.path)
            if (sealed.get("trial_keys") == keys) if sealed else unsealed:
                filesystem.delete_dir(entry.path)


def resume(trainer, logs: Sequence, members: Sequence[TrialConfig], experiment_dir: str
           ) -> tuple[dict | None, CheckpointWriter | None]:
    """Continue a trial from its newest complete checkpoint (``newest_checkpoint``), if any: the
    trainer's state and the models' loss histories (``logs``) as they were, TensorBoard told to
    drop what an earlier worker wrote after it. Returns (training, writer): where training goes on
    (from the start or a checkpoint), None and the writer of its next checkpoints; where it had
    finished (a final checkpoint), the trained weights loaded, the training's record and None."""
    filesystem, folder = checkpoint_folder(experiment_dir, members)  # …/checkpoints/<whole key>
    found = newest_checkpoint(members, filesystem, [folder, trial_folder(experiment_dir, members)])
    if found is None:
        return None, CheckpointWriter(filesystem, folder, members)
    path, state = found
    for log, history in zip(logs, state["histories"]):
        log.history = history
    if not state.get("final"):
        trainer.load_pack_state_dict(state["trainer"])
        for log, member in zip(logs, trainer.members):  # no curve doubles back
            log.purge_step = member.step + 1
        return None, CheckpointWriter(filesystem, folder, members, path)
    for member, weights, step, log in zip(trainer.members, state["models"], state["steps"], logs):
        member.model.load_state_dict(weights)
        member.step = step
        log.purge_step = step + 1  # training is over: its curves stay, the evaluation follows
    trainer.load_errors(state.get("errors", {}))  # a lone model's raise: it never has a final checkpoint
    return state.get("config", {}).get("training", {}), None
