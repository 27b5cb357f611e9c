"""Tune's saved state, as this driver wrote it: a resume unpickles nothing a worker could have written.

``--resume`` has Tune read its state back from the experiment folder, and Tune unpickles it:
``tuner.pkl``, the trials in ``experiment_state-*.json`` (cloudpickled fields), a searcher's
``*.pkl`` and each failed trial's ``error.pkl``. A worker node writes to the same bucket (its
checkpoints, TensorBoard files, history parts), so a compromised worker that could overwrite one
of those files would run code on the machine that resumes. Two defences: the worker's IAM policy
denies it writes and deletes on the driver's keys (cluster/iam/worker-policy.json), and the driver
keeps a record of its own, ``driver_state.json`` (``RECORD``), of the SHA-256 of every state file
Tune saved; ``check`` refuses a resume whose files do not match it, before Tune opens any of them.

The record is written by ``StateRecord`` (a Tune callback of the driver): ``tuner.pkl`` as the
tuner writes it (``record_stored``), the experiment state files each time Tune saves them into its
driver staging folder (checked at the end of every step of Tune's loop, and at the experiment's
end, after Tune's last save), and each trial's ``error.pkl`` as Tune writes it. Tune uploads a save
in the background, so a file's two newest hashes are both accepted: a resume after a crash finds
storage holding the previous save or the newest. A crash between Tune's upload of a new state file
and the record's next write (within one step of Tune's loop) leaves a file the record does not
know: that resume is refused with the file's name; an operator who trusts the folder deletes
``driver_state.json`` and resumes (an experiment without a record, from before it existed, is
resumed with a warning).
"""

from __future__ import annotations

import hashlib
import json
import os

from ray import tune

from analysis import storage
from sweeps.checkpoints import file_sha256
from sweeps.errors import UsageError

RECORD = "driver_state.json"
# Tune's files at the top of the experiment folder that a restore reads (and unpickles)
STATE_SUFFIXES = (".pkl", ".json")
# disgen's own JSON files at the top of the folder: data, never unpickled
OWN_FILES = frozenset({RECORD, "plan.json"})
ERROR_PICKLE = "error.pkl"
KEPT = 2  # hashes kept per file: the newest save and the one before it (an upload in flight)


def sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def read_record(experiment_dir: str) -> dict | None:
    """The driver's record (``{"files": {name: [sha256, ...]}}``), or None where there is none."""
    content = storage.read_bytes(storage.join(experiment_dir, RECORD))
    if content is None:
        return None
    try:
        record = json.loads(content)
    except ValueError:
        raise UsageError(f"{storage.join(experiment_dir, RECORD)} is not the driver's record of Tune's "
                         "state; the experiment's state cannot be trusted: resume refused") from None
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
        raise UsageError(f"{storage.join(experiment_dir, RECORD)} is not the driver's record of Tune's "
                         "state; resume refused")
    return record


def stored_state_files(experiment_dir: str) -> list[str]:
    """The files of Tune's state a resume would unpickle, relative to the experiment folder: the
    top-level ``*.pkl`` and ``*.json`` (disgen's own JSON aside) and every trial's ``error.pkl``
    (Tune's ``params.pkl`` beside it is never read back; the worker policy denies workers every
    ``*.pkl`` all the same)."""
    from pyarrow import fs

    filesystem, inner = storage.resolve(experiment_dir)
    names = []
    for info in filesystem.get_file_info(fs.FileSelector(inner, allow_not_found=True, recursive=True)):
        if info.type != fs.FileType.File:
            continue
        name = os.path.relpath(info.path.lstrip("/"), inner.lstrip("/")).replace(os.sep, "/")
        top = "/" not in name
        if ((top and name.endswith(STATE_SUFFIXES) and name not in OWN_FILES)
                or (not top and name.rsplit("/", 1)[-1] == ERROR_PICKLE)):
            names.append(name)
    return sorted(names)


def check(experiment_dir: str) -> None:
    """Refuse (a UsageError naming the file) a resume whose Tune state files are not those the
    driver recorded: each must be in the record with one of its hashes. Reads the files as bytes;
    unpickles nothing. An experiment without a record (from before it) is resumed with a warning."""
    record = read_record(experiment_dir)
    if record is None:
        print(f"warning: {experiment_dir} has no {RECORD} (an experiment from before it was written): "
              "Tune's saved state is read unchecked", flush=True)
        return
    for name in stored_state_files(experiment_dir):
        content = storage.read_bytes(storage.join(experiment_dir, name))
        if content is None:
            continue  # gone meanwhile
        if sha256(content) not in record["files"].get(name, []):
            raise UsageError(
                f"{storage.join(experiment_dir, name)} is not the file this experiment's driver saved "
                f"(its SHA-256 is not in {RECORD}): something other than the driver wrote it, so the "
                "resume is refused before Tune unpickles it. Restore the driver's version "
                "(aws s3api list-object-versions), or, if you trust every file in the folder, "
                f"delete {RECORD} and resume again")


class StateRecord(tune.Callback):
    """Keeps ``RECORD`` up to date with the hashes of the Tune state files this driver writes."""

    def __init__(self, experiment_dir: str):
        self.experiment_dir = experiment_dir
        record = read_record(experiment_dir)
        self.files: dict[str, list[str]] = {} if record is None else {
            name: list(hashes) for name, hashes in record["files"].items()}
        self._seen: dict[str, tuple[int, int]] = {}

    def _add(self, name: str, digest: str) -> bool:
        hashes = self.files.setdefault(name, [])
        if digest in hashes:
            return False
        hashes.append(digest)
        del hashes[:-KEPT]
        return True

    def _write(self) -> None:
        filesystem, inner = storage.resolve(storage.join(self.experiment_dir, RECORD))
        storage.write_whole(filesystem, inner, json.dumps({"files": self.files}, sort_keys=True).encode())

    def record_stored(self, name: str) -> None:
        """Record the file ``name`` of the experiment folder as it is on storage now (``tuner.pkl``,
        which the driver's tuner has just written there itself)."""
        content = storage.read_bytes(storage.join(self.experiment_dir, name))
        if content is not None and self._add(name, sha256(content)):
            self._write()

    def _note(self, name: str, path: str) -> bool:
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return False
        key = (stat.st_mtime_ns, stat.st_size)
        if self._seen.get(name) == key:
            return False
        self._seen[name] = key
        return self._add(name, file_sha256(path))

    def _scan(self, trials) -> None:
        if not trials:
            return
        staging = trials[0].storage.experiment_driver_staging_path
        changed = False
        try:
            entries = list(os.scandir(staging))
        except FileNotFoundError:
            return
        for entry in entries:
            if entry.is_file() and entry.name.endswith(STATE_SUFFIXES) and entry.name not in OWN_FILES:
                changed |= self._note(entry.name, entry.path)
        if changed:
            self._write()

    def on_step_end(self, iteration, trials, **info):
        self._scan(trials)

    def on_trial_error(self, iteration, trials, trial, **info):
        name = f"{trial.storage.trial_dir_name}/{ERROR_PICKLE}"
        if self._note(name, os.path.join(trial.local_path, ERROR_PICKLE)):
            self._write()

    def on_experiment_end(self, trials, **info):
        self._scan(trials)
