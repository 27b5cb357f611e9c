"""MLflow: each model of a sweep as one MLflow run (``--mlflow URI``; the optional ``mlflow`` extra).

Ray Tune's ``MLflowLoggerCallback`` logs a Tune trial as one run, with the trial's config as its
parameters and every result as metrics. A disgen Tune trial is one model or a pack of them, and its
config is ``{"members": [trial key, ...]}`` (their settings are in the plan: ``base_trials``), so
``ModelRuns`` keeps Tune's callback (its MLflow set-up: the tracking URI, the experiment, found or
created by the disgen experiment's name) and logs per model:

- one run per model, named as disgen names it (``TrialConfig.dirname``), with the model's settings
  as parameters and its trial key, experiment and Tune trial as tags;
- a lone model's progress reports (its loss terms and images per second) as metrics at their step,
  and its final metrics at its last step;
- for a pack, each member's final metrics in its own run. A pack's progress reports to Tune are
  means over its members, so they belong to no one model; each member's curves are in its
  TensorBoard folder and in ``history.parquet``;
- a run ends FINISHED, FAILED (a failed trial, or a pack member whose loss diverged: its error is
  the ``error`` tag) or KILLED (stopped early by ASHA). A run interrupted by Ctrl-C stays RUNNING,
  and ``--resume`` continues it: a model's run is found by its trial key, so a model is one run
  however often it resumes.

MLflow 3 refuses a plain folder (``file:`` URI) as a tracking store unless
``MLFLOW_ALLOW_FILE_STORE=true``; naming one with ``--mlflow`` sets it for this process.
``sqlite:///path/mlflow.db`` is MLflow's recommended local store.
"""

from __future__ import annotations

import math
import os
import time

from ray.air.integrations.mlflow import MLflowLoggerCallback

from analysis.schema import HISTORY_SCHEMA
from sweeps.packing import dirname, members_of, planned

KEY_TAG = "trial_key"
# A model's progress metrics: the loss terms and speed history.parquet keeps.
PROGRESS_METRICS = tuple(n for n in HISTORY_SCHEMA.names if n not in ("experiment", "trial_key", "step"))
_BATCH = 100  # MLflow's most parameters per log_batch call (metrics: 1,000)


def _numbers(values: dict) -> dict[str, float]:
    """The numeric entries (NaN kept: a metric that could not be computed), as floats."""
    return {k: float(v) for k, v in values.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isinf(v)}


class ModelRuns(MLflowLoggerCallback):
    """Tune's MLflow callback, one run per model (see the module docstring)."""

    def __init__(self, tracking_uri: str, experiment_name: str, base_trials=()):
        if tracking_uri.startswith("file:") or "://" not in tracking_uri:  # a folder: MLflow's file store
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        super().__init__(tracking_uri=tracking_uri, experiment_name=experiment_name)
        self.base_trials = planned(base_trials)
        self._runs: dict[str, str] = {}

    def setup(self, *args, **kwargs):
        super().setup(*args, **kwargs)  # the tracking URI and the experiment
        self._runs = {}

    def _client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.tracking_uri)

    def _run_of(self, client, member, trial) -> str:
        """The model's run: the one this driver opened, the one a resumed model already has (found
        by its trial key), or a new one with the model's settings as parameters."""
        key = member.trial_key
        if key in self._runs:
            return self._runs[key]
        experiment = self.mlflow_util.experiment_id
        found = client.search_runs([experiment], f"tags.{KEY_TAG} = '{key}'", max_results=1)
        if found:
            self._runs[key] = found[0].info.run_id
            return self._runs[key]
        from mlflow.entities import Param

        run = client.create_run(experiment, run_name=member.dirname,
                                tags={KEY_TAG: key, "experiment": self.experiment_name,
                                      "tune_trial": dirname(members_of(trial.config, self.base_trials)),
                                      "tune_trial_id": trial.trial_id})
        params = [Param(name, str(value)) for name, value in sorted(member.items())]
        for start in range(0, len(params), _BATCH):
            client.log_batch(run.info.run_id, params=params[start:start + _BATCH])
        self._runs[key] = run.info.run_id
        return self._runs[key]

    @staticmethod
    def _log(client, run_id: str, values: dict, step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(name, value, now, int(step)) for name, value in _numbers(values).items()]
        for start in range(0, len(metrics), 1000):
            client.log_batch(run_id, metrics=metrics[start:start + 1000])

    def log_trial_start(self, trial):
        client = self._client()
        for member in members_of(trial.config, self.base_trials):
            self._run_of(client, member, trial)

    def log_trial_result(self, iteration, trial, result):
        client = self._client()
        members = members_of(trial.config, self.base_trials)
        if result.get("done") and "members" in result:
            for member, outcome in zip(members, result["members"]):
                run_id = self._run_of(client, member, trial)
                if "error" in outcome:
                    client.set_tag(run_id, "error", str(outcome["error"])[:5000])
                    continue
                metrics = {k: v for k, v in outcome.items() if k not in ("config", "trial_key", "step")}
                self._log(client, run_id, metrics, outcome.get("step", result.get("step", 0)))
        elif len(members) == 1 and "step" in result:
            progress = {name: result[name] for name in PROGRESS_METRICS if name in result}
            self._log(client, self._run_of(client, members[0], trial), progress, result["step"])

    def log_trial_end(self, trial, failed: bool = False):
        client = self._client()
        result = trial.last_result or {}
        outcomes = result.get("members") or []
        for k, member in enumerate(members_of(trial.config, self.base_trials)):
            diverged = k < len(outcomes) and "error" in outcomes[k]
            status = "FAILED" if failed or diverged else "FINISHED" if result.get("done") else "KILLED"
            client.set_terminated(self._run_of(client, member, trial), status)
