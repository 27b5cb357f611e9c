"""The results writer: a Tune callback that appends each finished trial to the parquet files.

It writes as trials finish, so a crash of the driver loses no finished trial, and it replaces rows
by trial key, so a resumed experiment never stores a trial twice. A trial's history is written
before its trials row, each file whole (a temporary file renamed; on an object store one PUT of a
small part file, see ``analysis.schema.write_part``): a crash between the two leaves history that
no reader sees (``read_results`` shows history only for trials with a row), and the resume writes
the trial again (``repair``).
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
    write_part,
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
    # the dataset the trial read, which the trainable reports beside its metrics
    row.update({name: result[name] for name in ("data_uri", "data_content_id") if name in result})
    row["experiment"] = experiment
    row["finished_at"] = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    return row


def history_rows(experiment: str, config: dict, history: list[dict]) -> list[dict]:
    """history.parquet rows of one model: its progress reports, keyed by its trial."""
    names = set(HISTORY_SCHEMA.names)
    return [{**{k: v for k, v in report.items() if k in names},
             "experiment": experiment, "trial_key": config["trial_key"]} for report in history]


def store_rows(experiment_dir: str, history: list[dict], rows: list[dict]) -> None:
    """Commit finished models' rows: history first, then the trials rows (the commit point).
    Local: each file rewritten to a temporary file and renamed. Remote: one part file each."""
    if storage.is_remote(experiment_dir):
        write_part(experiment_dir, history, rows)
        return
    append_rows(experiment_dir, HISTORY_FILE, history)
    append_rows(experiment_dir, TRIALS_FILE, rows)


def member_rows(experiment: str, result: dict, remote: bool = False) -> tuple[list[dict], list[dict]]:
    """(history rows, trials rows) of a Tune trial's final result: one per member that finished,
    each row linked to its Ray trial (``trial_id``, which Tune puts in every result) and to its
    TensorBoard folder relative to the experiment (see sweeps/trainable.py): its own folder there,
    except on remote storage, where a pack's members sit in the pack's."""
    shared = {k: result[k] for k in ("node_id", "device") if k in result}
    finished = [(m["config"], {**m, **shared}) for m in result["members"] if "error" not in m]
    history = [row for config, member in finished
               for row in history_rows(experiment, config, member.get("history", []))]
    members = [TrialConfig(m["config"]) for m in result["members"]]
    rows = []
    for config, member in finished:
        folder = TrialConfig(config).dirname
        if remote and len(members) > 1:
            folder = f"{dirname(members)}/{folder}"
        rows.append({**trial_row(experiment, config, member), "trial_id": result.get("trial_id"),
                     "tensorboard_dir": folder})
    return history, rows


def experiment_name(experiment_dir: str) -> str:
    return os.path.basename(os.path.normpath(experiment_dir.split("://")[-1]))


def repair(experiment_dir: str, final_results) -> int:
    """Store the models of finished Tune trials that have no trials row (the driver died between
    Tune recording a trial as finished and its rows being committed). ``final_results``: the
    trials' last results (a ResultGrid's ``metrics``). Returns the models stored."""
    have = set(read_trials(experiment_dir)["trial_key"])
    experiment, stored = experiment_name(experiment_dir), 0
    for result in final_results:
        if not (result or {}).get("done") or "members" not in result:
            continue
        history, rows = member_rows(experiment, result, storage.is_remote(experiment_dir))
        if any(row["trial_key"] not in have for row in rows):
            store_rows(experiment_dir, history, rows)
            stored += len(rows)
    return stored


class ResultsWriter(tune.Callback):
    """Appends finished trials to ``trials.parquet`` and ``history.parquet`` in the experiment
    folder (``store_rows``). Errors go to ``errors.jsonl``; for a remote store it edits a local
    copy of that file and uploads it whole."""

    def __init__(self, experiment_dir: str, base_trials=()):
        self.experiment_dir = experiment_dir
        self.base_trials = base_trials  # the planned trials an Optuna trial's config names
        self.experiment = experiment_name(experiment_dir)

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
        result = {"trial_id": trial.trial_id, **result}
        history, rows = member_rows(self.experiment, result, storage.is_remote(self.experiment_dir))
        if rows:
            # A model whose row is already stored keeps it: a driver killed after the commit but
            # before Tune saved the trial as finished lets the resume run the trial again.
            stored = set(read_trials(self.experiment_dir)["trial_key"])
            new = {row["trial_key"] for row in rows} - stored
            rows = [row for row in rows if row["trial_key"] in new]
            history = [row for row in history if row["trial_key"] in new]
        if rows:
            store_rows(self.experiment_dir, history, rows)
        for member in result["members"]:
            if "error" in member:
                self._error({"trial_key": member["config"]["trial_key"], "trial_id": trial.trial_id,
                             "error": member["error"]})

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
    return read_results(experiment_dir, TRIALS_FILE)
