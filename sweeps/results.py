"""The results writer: a Tune callback that appends each finished trial to the parquet files.

It writes as trials finish, so a crash of the driver loses no finished trial, and it replaces rows
by trial key, so a resumed experiment never stores a trial twice.
"""

from __future__ import annotations

import datetime as dt
import json
import os

from ray import tune

from analysis.schema import (
    HISTORY_FILE,
    HISTORY_SCHEMA,
    METRIC_FIELDS,
    TRIALS_FILE,
    TRIALS_SCHEMA,
    append_rows,
)
from sweeps.grid import complete_config

ERRORS_FILE = "errors.jsonl"


def trial_row(experiment: str, config: dict, result: dict) -> dict:
    """One trials.parquet row: the config's schema columns and the final metrics."""
    row = {name: config.get(name) for name in TRIALS_SCHEMA.names if name in config}
    row.update({f.name: result.get(f.name) for f in METRIC_FIELDS if f.name in result})
    row["experiment"] = experiment
    row["finished_at"] = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    return row


def history_rows(experiment: str, config: dict, history: list[dict]) -> list[dict]:
    names = set(HISTORY_SCHEMA.names)
    return [{**{k: v for k, v in report.items() if k in names},
             "experiment": experiment, "trial_key": config["trial_key"]} for report in history]


class ResultsWriter(tune.Callback):
    def __init__(self, experiment_dir: str):
        self.experiment_dir = experiment_dir
        self.experiment = os.path.basename(os.path.normpath(experiment_dir))

    def on_trial_complete(self, iteration, trials, trial, **info):
        result = trial.last_result or {}
        if not result.get("done"):
            return
        config = complete_config(trial.config)
        append_rows(self.experiment_dir, HISTORY_FILE,
                    history_rows(self.experiment, config, result.get("history", [])))
        append_rows(self.experiment_dir, TRIALS_FILE, [trial_row(self.experiment, config, result)])

    def on_trial_error(self, iteration, trials, trial, **info):
        record = {"trial_key": complete_config(trial.config)["trial_key"], "trial_id": trial.trial_id,
                  "error_file": getattr(trial, "error_file", None),
                  "at": dt.datetime.now(dt.timezone.utc).isoformat()}
        with open(os.path.join(self.experiment_dir, ERRORS_FILE), "a") as f:
            f.write(json.dumps(record) + "\n")
