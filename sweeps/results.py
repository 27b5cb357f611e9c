"""The results writer: a listener of a sweep's trial events that commits each finished trial's rows as one
part, and a row for each model that failed or was stopped (docs/sweeps.md, "How results are stored"). A
trial writes its history part itself; the writer's trials part of the same name is the commit. A write that
keeps failing (``OSError``, retried with backoff) stops the sweep as a Ctrl-C does; the resume runs every
trial whose rows did not land."""

from __future__ import annotations

import datetime as dt
import json
import os
import time

from analysis import storage
from analysis.loading import ERRORS_PARTS
from analysis.schema import HISTORY_SCHEMA, JSON_SETTINGS, METRIC_FIELDS, TRIALS_FILE
from analysis.storage import ResultsStore, experiment_name, read_results
from sweeps import provenance
from sweeps.lock import LeaseLost
from sweeps.outcome import RUN_FACTS, TrialOutcome
from sweeps.packing import members_of, outcome_of, planned, tensorboard_folder
from sweeps.trials import TrialConfig

# A failed write is tried this many times in all, the first wait this long, doubled each time (about 15 s)
WRITE_ATTEMPTS = int(os.environ.get("DISGEN_WRITE_ATTEMPTS", "5"))
WRITE_BACKOFF_S = float(os.environ.get("DISGEN_WRITE_BACKOFF_S", "1.0"))


class StorageFailed(RuntimeError):
    """A write to the results store that kept failing, ``WRITE_ATTEMPTS`` times."""


def retried(action, what: str, attempts: int | None = None, backoff_s: float | None = None):
    """``action()``, retried after an ``OSError`` with exponential backoff, else ``StorageFailed``."""
    attempts = WRITE_ATTEMPTS if attempts is None else attempts
    backoff_s = WRITE_BACKOFF_S if backoff_s is None else backoff_s
    for attempt in range(attempts):
        try:
            return action()
        except OSError as error:
            if attempt == attempts - 1:
                raise StorageFailed(f"{what} failed {attempts} times; the last error: "
                                    f"{type(error).__name__}: {error}") from error
            wait = backoff_s * 2 ** attempt
            print(f"warning: {what} failed ({type(error).__name__}: {error}); trying again in {wait:g} s",
                  flush=True)
            time.sleep(wait)


# Settings only the run resolves, from a finished model's result (bf16 None: on where it trained on CUDA)
RESOLVED_BY_THE_RUN = ("n_images", "steps", "transfer_factor", "bf16")
# When a model's training and evaluation started and ended: epoch seconds in results, timestamps in rows
TIMES = ("train_started_at", "train_ended_at", "eval_started_at", "eval_ended_at")


def trial_row(experiment: str, trial: TrialConfig, result: dict, status: str = "finished") -> dict:
    """One trials.parquet row: every setting the model ran with, status, metrics, step, provenance, error."""
    settings = trial.effective_settings()
    if status == "finished":
        settings.update({name: result[name] for name in RESOLVED_BY_THE_RUN if result.get(name) is not None})
    if settings.get("bf16") is None and result.get("device"):  # by default, bf16 is on where CUDA trains
        settings["bf16"] = str(result["device"]).startswith("cuda")
    row = {name: json.dumps(value) if name in JSON_SETTINGS and value is not None else value
           for name, value in settings.items()}
    row["config"] = json.dumps(settings, sort_keys=True, default=str)
    row.update({f.name: result.get(f.name) for f in METRIC_FIELDS if f.name in result})
    row.update({name: result[name] for name in RUN_FACTS if name in result})
    row.update({name: dt.datetime.fromtimestamp(result[name], dt.timezone.utc)
                for name in TIMES if result.get(name) is not None})
    row.update({"experiment": experiment, "status": status, "error": result.get("error"),
                "trained_steps": result.get("step"),
                "finished_at": dt.datetime.now(dt.timezone.utc).replace(microsecond=0)})
    return row


def history_rows(experiment: str, trial_key: str, history: list[dict]) -> list[dict]:
    """history.parquet rows of one model: its progress reports, keyed by its trial."""
    names = set(HISTORY_SCHEMA.names)
    return [{**{k: v for k, v in report.items() if k in names},
             "experiment": experiment, "trial_key": trial_key} for report in history]


def member_rows(experiment: str, outcome: TrialOutcome, remote: bool = False) -> list[dict]:
    """A Tune trial's outcome's rows, one per member, with its Ray ``trial_id`` and its TensorBoard folder."""
    rows = []
    for member in outcome.members:
        status = "failed" if member.failed else "finished"
        values = {**member.values(), "step": member.step, "error": member.error, **outcome.facts}
        rows.append({**trial_row(experiment, member.trial, values, status), "trial_id": outcome.trial_id,
                     "tensorboard_dir": tensorboard_folder(outcome.trials, member.trial, remote)})
    return rows


def unfinished_rows(experiment: str, trial, base_trials, status: str, error: str | None = None) -> list[dict]:
    """The rows of a Tune trial's models that did not finish (``failed`` or ``stopped``)."""
    result = trial.last_result or {}
    facts = {**provenance.software(), **{k: result[k] for k in ("node_id", "device") if k in result},
             "step": result.get("step"), "error": error}
    return [{**trial_row(experiment, member, facts, status), "trial_id": trial.trial_id,
             "tensorboard_dir": member.dirname} for member in members_of(trial.config, base_trials)]


def _commit(store: ResultsStore, outcome: TrialOutcome) -> list[dict]:
    """Commit the models of a finished Tune trial's outcome; the rows stored."""
    experiment = experiment_name(store.experiment)
    rows = member_rows(experiment, outcome, storage.is_remote(store.experiment))
    part = outcome.results_part
    if part is None:  # the history is in the outcome (a deferred evaluation's, or an older disgen's result)
        part = storage.new_part()
        new = {row["trial_key"] for row in rows if row["status"] == "finished"} - store.keys
        history = [row for m in outcome.members if not m.failed and m.trial.trial_key in new
                   for row in history_rows(experiment, m.trial.trial_key, m.history or [])]
        if new and history:
            storage.write_history_part(store.experiment, part, history)
    return store.commit(part, rows)


class ResultsWriter:
    """Commits each trial's rows (finished, failed or stopped); a write that keeps failing stops the sweep."""

    def __init__(self, store: ResultsStore, base_trials=(), stop=None, evaluations=None):
        self.store, self.experiment_dir = store, store.experiment
        self.base_trials = planned(base_trials)  # the planned trials a Tune trial's config names
        self.stop, self.evaluations = stop, evaluations
        self.failure: str | None = None  # the write that kept failing, once one has

    def _write(self, what: str, action) -> bool:
        """``action``, ``retried``: True where it succeeded; where it kept failing, the sweep stops."""
        if self.failure is not None:
            return False
        try:
            retried(action, what)
            return True
        except (StorageFailed, LeaseLost) as error:  # a lost lease: no retry, nothing more written
            self.failure = str(error)
            if self.stop is None:
                raise
            print(f"error: cannot write the results to {self.experiment_dir}: {error}. Stopping the sweep "
                  "as Ctrl-C does; the results not written are written on --resume", flush=True)
            self.stop.request(f"the results could not be written to {self.experiment_dir} ({error})")
            return False

    def completed(self, trial) -> None:
        """Store the trial's models (finished, failed or stopped), or start their deferred evaluations."""
        result = trial.last_result or {}
        if "members" not in result:  # no final report: the scheduler stopped it
            self._commit_unfinished(trial, "stopped")
            return
        outcome = outcome_of({"trial_id": trial.trial_id, **result}, trial.config, self.base_trials)
        if outcome.evaluated:
            self.store_result(outcome, final_checkpoint=trial.checkpoint is not None)
            return
        self._errors(outcome)
        if self.failure is not None:  # stopping: the resume evaluates its models
            return
        try:
            self.evaluations.start(outcome, trial.checkpoint, self.store.keys)
        except Exception as error:  # not the trial's fault: --resume runs it again, and evaluates it
            self.evaluations.failed += 1
            for member in outcome.members:
                self._error({"trial_key": member.trial.trial_key, "trial_id": trial.trial_id,
                             "error": f"evaluation not started: {type(error).__name__}: {error}"})

    def step(self, trials=()) -> None:
        self.collect()

    def store_result(self, outcome: TrialOutcome, final_checkpoint: bool = True) -> None:
        """Commit a finished trial's models; its failed members also go to errors-parts/. Once its
        rows are stored and every model trained and was evaluated from its final checkpoint, its
        in-training checkpoints are spent and deleted; otherwise they stay for the resume, which
        goes on from them (a final checkpoint that does not evaluate is not the end of a model)."""
        if not self._write(f"storing the trial {outcome.trial_id}", lambda: _commit(self.store, outcome)):
            return
        self._errors(outcome)
        if final_checkpoint and not any(member.failed for member in outcome.members):
            _remove_training_checkpoints(self.experiment_dir, outcome.trials)

    def collect(self, wait: bool = False) -> int:
        """Commit the trials whose deferred evaluations have ended (``wait``: all, as they end); how many."""
        done = 0
        for outcome in self.evaluations.finished(wait) if self.evaluations is not None else ():
            self.store_result(outcome)
            done += 1
        return done

    def _errors(self, outcome: TrialOutcome) -> None:
        for member in outcome.members:
            if member.failed:
                self._error({"trial_key": member.trial.trial_key, "trial_id": outcome.trial_id,
                             "error": member.error})

    def failed(self, trial) -> None:
        """A ``failed`` row for each of the trial's models, and the error in errors-parts/."""
        self._commit_unfinished(trial, "failed", trial.error)
        for member in members_of(trial.config, self.base_trials):
            self._error({"trial_key": member.trial_key, "trial_id": trial.trial_id, "error": trial.error})

    def _commit_unfinished(self, trial, status: str, error: str | None = None) -> None:
        part, rows = storage.new_part(), unfinished_rows(
            experiment_name(self.store.experiment), trial, self.base_trials, status, error)
        self._write(f"storing the {status} trial {trial.trial_id}", lambda: self.store.commit(part, rows))

    def _error(self, record: dict) -> None:
        """Record a failure as a new part of ``errors-parts/``, written whole (never appended: no tearing)."""
        record["at"] = dt.datetime.now(dt.timezone.utc).isoformat()
        path = storage.join(self.experiment_dir, ERRORS_PARTS, f"{storage.new_part()}.jsonl")
        text = (json.dumps(record) + "\n").encode()
        self._write(f"recording an error in {ERRORS_PARTS}/", lambda: self._put(path, text))

    @staticmethod
    def _put(path: str, content: bytes) -> None:
        fs, inner = storage.resolve(path)
        fs.create_dir(inner.rsplit("/", 1)[0], recursive=True)
        storage.write_whole(fs, inner, content)


def _remove_training_checkpoints(experiment_dir: str, members) -> None:
    """Delete a trial's in-training checkpoints, now that its final one is stored (as far as it can)."""
    from sweeps.checkpoints import checkpoint_folder, remove_training_checkpoints, trial_folder
    try:
        filesystem, folder = checkpoint_folder(experiment_dir, members)
        remove_training_checkpoints(filesystem, folder, members, unsealed=True)
        # an experiment from before the layout: only this trial's (by their seals) in its Tune folder
        remove_training_checkpoints(filesystem, trial_folder(experiment_dir, members), members)
    except OSError as error:
        print(f"warning: the in-training checkpoints of {members[0].dirname} stay on storage ({error})",
              flush=True)


def read_trials(experiment_dir: str):
    """The trials table of a local or remote experiment as a DataFrame (empty if none yet)."""
    return read_results(experiment_dir, TRIALS_FILE)
