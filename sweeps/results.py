"""The results writer: a Tune callback that appends each finished trial to the parquet files.

It writes as trials finish, so a crash of the driver loses no finished trial, and it replaces rows
by trial key, so a resumed experiment never stores a trial twice.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile

from ray import tune

from analysis.schema import (
    HISTORY_FILE,
    HISTORY_SCHEMA,
    METRIC_FIELDS,
    TRIALS_FILE,
    TRIALS_SCHEMA,
    append_rows,
    read_results,
)
from sweeps import storage
from sweeps.packing import dirname, members_of
from sweeps.trials import TrialConfig

ERRORS_FILE = "errors.jsonl"


def trial_row(experiment: str, config: dict, result: dict) -> dict:
    """One trials.parquet row: the config's schema columns and the final metrics."""
    row = {name: config.get(name) for name in TRIALS_SCHEMA.names if name in config}
    row["config"] = json.dumps(config, sort_keys=True, default=str)
    row.update({f.name: result.get(f.name) for f in METRIC_FIELDS if f.name in result})
    row["experiment"] = experiment
    row["finished_at"] = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    return row


def history_rows(experiment: str, config: dict, history: list[dict]) -> list[dict]:
    """history.parquet rows of one model: its progress reports, keyed by its trial."""
    names = set(HISTORY_SCHEMA.names)
    return [{**{k: v for k, v in report.items() if k in names},
             "experiment": experiment, "trial_key": config["trial_key"]} for report in history]


class ResultsWriter(tune.Callback):
    """Appends finished trials to ``trials.parquet`` and ``history.parquet`` in the experiment
    folder. For a remote store (s3://…) it edits a local copy of each file and uploads it whole:
    one PUT, so readers see the old file or the new one, never a torn one."""

    def __init__(self, experiment_dir: str, base_trials=()):
        self.experiment_dir = experiment_dir
        self.base_trials = base_trials  # the planned trials an Optuna trial's config names
        self.experiment = os.path.basename(os.path.normpath(experiment_dir.split("://")[-1]))

    def _edit(self, filename: str, change) -> None:
        """Apply ``change(local_folder)`` to the experiment's ``filename``, wherever it lives."""
        if not storage.is_remote(self.experiment_dir):
            change(self.experiment_dir)
            return
        with tempfile.TemporaryDirectory() as local:
            remote, copy = storage.join(self.experiment_dir, filename), os.path.join(local, filename)
            storage.download_if_exists(remote, copy)
            change(local)
            storage.upload(copy, remote)

    def on_trial_complete(self, iteration, trials, trial, **info):
        """Store the trial's models (one row each; a pack member that diverged goes to errors.jsonl)."""
        result = trial.last_result or {}
        if not result.get("done"):
            return
        shared = {k: result[k] for k in ("node_id", "device") if k in result}
        finished = [(m["config"], {**m, **shared}) for m in result["members"] if "error" not in m]
        history = [row for config, member in finished
                   for row in history_rows(self.experiment, config, member.get("history", []))]
        rows = [{**trial_row(self.experiment, config, member), "trial_id": trial.trial_id,
                 "tensorboard_dir": self._tensorboard_dir(trial, config)} for config, member in finished]
        if rows:
            self._edit(HISTORY_FILE, lambda folder: append_rows(folder, HISTORY_FILE, history))
            self._edit(TRIALS_FILE, lambda folder: append_rows(folder, TRIALS_FILE, rows))
        for member in result["members"]:
            if "error" in member:
                self._error({"trial_key": member["config"]["trial_key"], "trial_id": trial.trial_id,
                             "error": member["error"]})

    def _tensorboard_dir(self, trial, config: dict) -> str:
        """A model's TensorBoard folder relative to the experiment (see sweeps/trainable.py): its
        own folder there, except on remote storage, where a pack's members sit in the pack's."""
        member = TrialConfig(config)
        members = members_of(trial.config, self.base_trials)
        if storage.is_remote(self.experiment_dir) and len(members) > 1:
            return f"{dirname(members)}/{member.dirname}"
        return member.dirname

    def on_trial_error(self, iteration, trials, trial, **info):
        for member in members_of(trial.config, self.base_trials):
            self._error({"trial_key": member.trial_key, "trial_id": trial.trial_id,
                         "error_file": getattr(trial, "error_file", None)})

    def _error(self, record: dict) -> None:
        record["at"] = dt.datetime.now(dt.timezone.utc).isoformat()

        def add_line(folder):
            with open(os.path.join(folder, ERRORS_FILE), "a") as f:
                f.write(json.dumps(record) + "\n")

        self._edit(ERRORS_FILE, add_line)


def read_trials(experiment_dir: str):
    """trials.parquet of a local or remote experiment as a DataFrame (empty if none yet)."""
    if not storage.is_remote(experiment_dir):
        return read_results(experiment_dir, TRIALS_FILE)
    with tempfile.TemporaryDirectory() as local:
        remote, copy = storage.join(experiment_dir, TRIALS_FILE), os.path.join(local, TRIALS_FILE)
        storage.download_if_exists(remote, copy)
        return read_results(local, TRIALS_FILE)
