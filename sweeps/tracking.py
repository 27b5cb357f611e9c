"""MLflow and Weights & Biases: each model of a sweep as one tracked run (``--mlflow URI``, ``--wandb
PROJECT``; docs/sweeps.md, "Tracking in MLflow" and "Tracking in W&B"). Tune's logger callbacks log a Tune
trial as one run, but a disgen Tune trial is a model or a pack: ``ModelRuns`` and ``WandbRuns`` keep Tune's
set-up and log a run per model, found again by its trial key on a resume."""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
import time
from collections.abc import Sequence

import ray
from ray.air.integrations.mlflow import MLflowLoggerCallback
from ray.air.integrations.wandb import WandbLoggerCallback

from analysis.schema import HISTORY_SCHEMA
from sweeps.outcome import TrialOutcome, is_final
from sweeps.packing import dirname, members_of, planned
from sweeps.ray_edge import clean_for_wandb, on_this_node
from sweeps.trials import TrialConfig

KEY_TAG = "trial_key"
# A model's progress metrics: the loss terms and speed history.parquet keeps.
PROGRESS_METRICS = tuple(n for n in HISTORY_SCHEMA.names if n not in ("experiment", "trial_key", "step"))
_BATCH = 100  # MLflow's most parameters per log_batch call (metrics: 1,000)


def _numbers(values: dict) -> dict[str, float]:
    """The numeric entries (NaN kept: a metric that could not be computed), as floats."""
    return {k: float(v) for k, v in values.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isinf(v)}


# -- what a tracked run records of a model: the same for MLflow and W&B ----------------------------
def run_tags(member: TrialConfig, trial, experiment: str, base: Sequence[TrialConfig] = ()) -> dict[str, str]:
    """A model's run labels: its trial key, the experiment, its Tune trial's name and id."""
    return {KEY_TAG: member.trial_key, "experiment": experiment,
            "tune_trial": dirname(members_of(trial.config, base)), "tune_trial_id": trial.trial_id}


def progress_of(members: Sequence[TrialConfig], result: dict) -> tuple[int, dict[str, float]] | None:
    """(step, metrics) of a lone model's progress report; None for a pack's and for the final result."""
    if len(members) != 1 or "step" not in result or (result.get("done") and "members" in result):
        return None
    return int(result["step"]), _numbers({n: result[n] for n in PROGRESS_METRICS if n in result})


def finals_of(members: Sequence[TrialConfig],
              result: dict) -> list[tuple[TrialConfig, int, dict, str | None]]:
    """Each model's (trial, step, final metrics, error) from its Tune trial's final result (none before)."""
    if not is_final(result):
        return []
    finals = []
    for member in TrialOutcome.from_report(result, members).members:
        step = int(member.step if member.step is not None else result.get("step", 0))
        if member.failed:
            finals.append((member.trial, step, {}, str(member.error)[:5000]))
        else:
            finals.append((member.trial, step, _numbers(member.values()), None))
    return finals


def end_states(members: Sequence[TrialConfig], trial, failed: bool) -> list[tuple[TrialConfig, str]]:
    """Each model's run state as its Tune trial ends: FINISHED, FAILED (or diverged), KILLED (ASHA)."""
    result = trial.last_result or {}
    outcomes = TrialOutcome.from_report(result, members).members if is_final(result) else []
    states = []
    for k, member in enumerate(members):
        diverged = k < len(outcomes) and outcomes[k].failed
        states.append((member, "FAILED" if failed or diverged else "FINISHED" if result.get("done")
                       else "KILLED"))
    return states


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
        """The model's run: this driver's, the one a resumed model has (by trial key), or a new one."""
        key = member.trial_key
        if key in self._runs:
            return self._runs[key]
        experiment = self.mlflow_util.experiment_id
        if found := client.search_runs([experiment], f"tags.{KEY_TAG} = '{key}'", max_results=1):
            self._runs[key] = found[0].info.run_id
            return self._runs[key]
        from mlflow.entities import Param
        run = client.create_run(experiment, run_name=member.dirname,
                                tags=run_tags(member, trial, self.experiment_name, self.base_trials))
        params = [Param(name, str(value)) for name, value in sorted(member.items())]
        for start in range(0, len(params), _BATCH):
            client.log_batch(run.info.run_id, params=params[start:start + _BATCH])
        self._runs[key] = run.info.run_id
        return self._runs[key]

    @staticmethod
    def _log(client, run_id: str, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric
        now = int(time.time() * 1000)
        metrics = [Metric(name, value, now, int(step)) for name, value in values.items()]
        for start in range(0, len(metrics), 1000):
            client.log_batch(run_id, metrics=metrics[start:start + 1000])

    def log_trial_start(self, trial):
        client = self._client()
        for member in members_of(trial.config, self.base_trials):
            self._run_of(client, member, trial)

    def log_trial_result(self, iteration, trial, result):
        client = self._client()
        members = members_of(trial.config, self.base_trials)
        for member, step, metrics, error in finals_of(members, result):
            run_id = self._run_of(client, member, trial)
            if error is not None:
                client.set_tag(run_id, "error", error)
            else:
                self._log(client, run_id, metrics, step)
        if (progress := progress_of(members, result)) is not None:
            self._log(client, self._run_of(client, members[0], trial), progress[1], progress[0])

    def log_trial_end(self, trial, failed: bool = False):
        client = self._client()
        for member, state in end_states(members_of(trial.config, self.base_trials), trial, failed):
            client.set_terminated(self._run_of(client, member, trial), state)


# -- Weights & Biases ------------------------------------------------------------------------------
def wandb_run_id(experiment: str, trial_key: str) -> str:
    """A model's W&B run id: its trial key and the experiment's hash, one run per model and experiment."""
    return f"{trial_key}-{hashlib.sha1(experiment.encode()).hexdigest()[:8]}"


API_KEY, KEY_FILE = "WANDB_API_KEY", "DISGEN_WANDB_KEY_FILE"


def actor_environment(environment: dict, key_folder: str) -> dict:
    """The W&B actor's environment: the driver's ``WANDB_*``, the API key as a 0600 file (not in the env)."""
    env = {k: v for k, v in environment.items() if k.startswith("WANDB_") and k != API_KEY}
    if environment.get(API_KEY):
        path = os.path.join(key_folder, "wandb_api_key")
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(environment[API_KEY])
        env[KEY_FILE] = path
    return env


def take_api_key() -> None:
    """In the logging actor: the W&B API key from ``actor_environment``'s file into the environment."""
    if path := os.environ.pop(KEY_FILE, None):
        with open(path) as file:
            os.environ[API_KEY] = file.read()


class _ModelRunsActor:
    """A Tune trial's W&B runs, one per model, in a process of their own on the driver's node."""

    def __init__(self, logdir: str, runs: list[dict]):
        import wandb
        take_api_key()
        os.makedirs(logdir, exist_ok=True)  # the Tune trial's folder on the driver: W&B's default place
        os.chdir(logdir)
        os.environ["WANDB_START_METHOD"] = "thread"
        # one process, several runs at once: reinit="create_new" (wandb >= 0.19.10)
        self.runs = [wandb.init(reinit="create_new", **kwargs) for kwargs in runs]

    def log(self, k: int, step: int, values: dict, summary: dict) -> None:
        if values:
            self.runs[k].log(values, step=step)
        if summary:
            self.runs[k].summary.update(summary)

    def end(self, ends: dict[int, tuple[int, str]]) -> None:
        """Each run's end: its exit code and ``status`` (finished, failed, stopped or interrupted)."""
        for k, run in enumerate(self.runs):
            code, status = ends.get(k, (0, "finished"))
            run.summary["status"] = status
            run.finish(exit_code=code)


class WandbRuns(WandbLoggerCallback):
    """Tune's W&B callback, one run per model, via a ``_ModelRunsActor`` per Tune trial, never waited for."""

    def __init__(self, project: str, experiment_name: str, base_trials=(), local_dir: str | None = None):
        entity, _, name = project.rpartition("/")
        where = {"entity": entity} if entity else {}
        if local_dir and not os.environ.get("WANDB_DIR"):  # W&B's files in <experiment>/wandb/
            where["dir"] = local_dir
        super().__init__(project=name, group=experiment_name, **where)
        self.experiment_name = experiment_name
        self.base_trials = planned(base_trials)
        self._actors: dict = {}  # trial → its logging actor, until the trial ends
        self._runs_actor = None  # the actor class, made once (``_actor_class``)
        self._ending: dict = {}  # the end call of each trial's last actor → (trial, actor)

    def _members(self, trial) -> list[TrialConfig]:
        return members_of(trial.config, self.base_trials)

    def check(self) -> WandbRuns:
        """Tune's set-up now, before the sweep: no API key (W&B not offline) is a UsageError."""
        from sweeps.errors import UsageError
        try:
            self.setup()
        except ValueError:
            message = ("--wandb: no W&B API key found; run wandb login or set WANDB_API_KEY (or set "
                       "WANDB_MODE=offline to write the runs to disk, for a later wandb sync)")
            raise UsageError(message) from None
        return self

    def _actor_class(self):
        # the driver's W&B settings go with the actor (the key as a file); a dead actor costs only its records
        if self._runs_actor is None:
            self._key_folder = tempfile.TemporaryDirectory(prefix="disgen-wandb-")  # removed at exit
            env = actor_environment(dict(os.environ), self._key_folder.name)
            self._runs_actor = ray.remote(num_cpus=0, **on_this_node(), runtime_env={"env_vars": env})(
                _ModelRunsActor)
        return self._runs_actor

    def log_trial_start(self, trial):
        if trial in self._actors:
            return
        # a failed trial that Tune retries: its runs resume once its last actor has ended them
        self._collect([f for f, (t, _) in self._ending.items() if t is trial], timeout=60)
        runs = []
        for member in self._members(trial):
            config = {**member.to_dict(), **run_tags(member, trial, self.experiment_name, self.base_trials)}
            runs.append(dict(id=wandb_run_id(self.experiment_name, member.trial_key), name=member.dirname,
                             resume="allow", allow_val_change=True, group=self.group, project=self.project,
                             config=clean_for_wandb(config), **self.kwargs))
        self._actors[trial] = self._actor_class().remote(trial.local_path, runs)

    def log_trial_result(self, iteration, trial, result):
        if trial not in self._actors:
            self.log_trial_start(trial)
        actor, members = self._actors[trial], self._members(trial)
        for k, (_, step, metrics, error) in enumerate(finals_of(members, result)):
            actor.log.remote(k, step, metrics, {"error": error} if error else {})
        if (progress := progress_of(members, result)) is not None:
            actor.log.remote(0, progress[0], progress[1], {})

    def log_trial_save(self, trial):
        pass  # checkpoints are a Tune trial's, of all its models: not uploaded to a model's run

    def log_trial_end(self, trial, failed: bool = False):
        if (actor := self._actors.pop(trial, None)) is None:
            return
        status = {"FINISHED": "finished", "FAILED": "failed", "KILLED": "stopped"}
        ends = {k: (1 if state == "FAILED" else 0, status[state])
                for k, (_, state) in enumerate(end_states(self._members(trial), trial, failed))}
        self._ending[actor.end.remote(ends)] = (trial, actor)
        self._collect(list(self._ending), timeout=0)

    def _collect(self, futures: list, timeout: float) -> None:
        """Let go of the actors whose end has run (or, past ``timeout``, not)."""
        if not futures:
            return
        done, _ = ray.wait(futures, num_returns=len(futures), timeout=timeout)
        for future in futures if timeout else done:
            _, actor = self._ending.pop(future)
            ray.kill(actor)

    def on_experiment_end(self, trials, **info):
        """Wait for the runs to finish (W&B's uploads included), as Tune's callback does."""
        for trial in list(self._actors):  # trials Tune did not end (a Ctrl-C): --resume goes on with them
            actor = self._actors.pop(trial)
            ends = {k: (0, "interrupted") for k in range(len(self._members(trial)))}
            self._ending[actor.end.remote(ends)] = (trial, actor)
        self._collect(list(self._ending), timeout=self._upload_timeout)

    def __del__(self):
        self._actors, self._ending = {}, {}
