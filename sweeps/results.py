"""The results writer: a Tune callback that commits each finished trial's rows as one part, and
a row for each model that failed or was stopped.

A finished trial that evaluated its models writes their loss history itself, as a history part in
the experiment's storage (``sweeps/trainable.py``), and reports only scalars: its models' metrics
and the part's name. This callback, on the driver, then writes the trials part of the same name,
which is the commit (``analysis/storage.py``): a crash before it leaves history that no reader
sees, and the resume stores the trial (``repair``). A trial that held a GPU reports its models as
trained but not evaluated: the callback starts their evaluations in CPU-only tasks
(``sweeps.evaluation.DeferredEvaluations``) and, at each trial's end, commits its models with the
histories the tasks read from its checkpoint, as a new part. The driver keeps the stored trial
keys in memory (one ``ResultsStore`` per experiment, read once when a sweep starts), so a commit
never reads what earlier ones wrote, and a resumed trial never gets a second row.

Every row holds every setting the model ran with (``TrialConfig.effective_settings``, and what the
run resolved: the images of a whole grid, the steps of an epoch budget, the transfer factor), its
``status`` and what ran it (``sweeps/provenance.py``). A model that failed (its lone trial errored,
or it diverged in a pack) or was stopped early by ASHA gets a row with its status, its settings and
no metrics; a later finished run of it replaces that row.

A write that fails with an error of the store (an ``OSError``: S3's 503s, a dropped connection) is
tried again, ``WRITE_ATTEMPTS`` times in all, after ``WRITE_BACKOFF_S`` seconds, then twice that,
and so on. Where it still fails, the callback stops the sweep as a Ctrl-C does
(``sweeps.console.StopSignal.request``): Tune saves its state, the running trials stop at their
last checkpoint, the command prints how to resume, and the callbacks write nothing more. Nothing is
lost: the resume stores the finished trials whose rows did not land (``repair``), evaluates again
the models whose evaluation was not stored, and runs the rest. Each file is written whole or not at
all (``analysis.storage.write_whole``), so a failed try leaves nothing a reader sees.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time

from ray import tune

from analysis import storage
from analysis.loading import ERRORS_PARTS
from analysis.schema import HISTORY_SCHEMA, JSON_SETTINGS, METRIC_FIELDS, TRIALS_FILE
from analysis.storage import ResultsStore, experiment_name, read_results
from sweeps import provenance
from sweeps.evaluation import DeferredEvaluations
from sweeps.outcome import RUN_FACTS, TrialOutcome
from sweeps.packing import members_of, outcome_of, planned, tensorboard_folder
from sweeps.trials import TrialConfig

_STORES: dict[str, ResultsStore] = {}  # this driver's open experiments, by folder

# A failed write to the results store is tried this many times in all, the first wait this long,
# doubled each time (1 + 2 + 4 + 8 s: about 15 s before the sweep stops).
WRITE_ATTEMPTS = int(os.environ.get("DISGEN_WRITE_ATTEMPTS", "5"))
WRITE_BACKOFF_S = float(os.environ.get("DISGEN_WRITE_BACKOFF_S", "1.0"))


class StorageFailed(RuntimeError):
    """A write to the results store that kept failing, ``WRITE_ATTEMPTS`` times."""


def retried(action, what: str, attempts: int | None = None, backoff_s: float | None = None):
    """``action()``, tried again after an ``OSError`` (an error of the store), with exponential
    backoff; ``StorageFailed`` naming ``what`` once it has failed ``attempts`` times."""
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


def results_store(experiment_dir: str, fresh: bool = False) -> ResultsStore:
    """The driver's ``ResultsStore`` of an experiment, opened on first use (or again, ``fresh``,
    when a sweep starts: its stored keys are read then, once). The results callback, the repair on
    resume and the final compaction share it; a restored Tune run's callback finds it here."""
    key = storage.normalise(experiment_dir)
    if fresh or key not in _STORES:
        _STORES[key] = ResultsStore(key)
    return _STORES[key]


# Settings whose effective value only the run knows, taken from a finished model's result: the
# images of a whole grid (n_images None), the steps of an epoch budget, the transfer scores' factor,
# and bf16 (None: on where the model trained on CUDA).
RESOLVED_BY_THE_RUN = ("n_images", "steps", "transfer_factor", "bf16")
# When a model's training and evaluation started and ended: epoch seconds in a trial's results,
# timestamps in its row.
TIMES = ("train_started_at", "train_ended_at", "eval_started_at", "eval_ended_at")


def trial_row(experiment: str, trial: TrialConfig, result: dict, status: str = "finished") -> dict:
    """One trials.parquet row: every setting the model ran with (its columns and the ``config``
    JSON), its status, and what the result holds: final metrics, the step reached (``step``),
    what ran it (provenance) and, for a failed model, its ``error``."""
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
    """The trials rows of a Tune trial's outcome: one per member, finished or failed (a pack
    member that diverged, or whose evaluation failed), each linked to its Ray trial (``trial_id``,
    which Tune puts in every result) and to its TensorBoard folder (``tensorboard_folder``)."""
    rows = []
    for member in outcome.members:
        status = "failed" if member.failed else "finished"
        values = {**member.values(), "step": member.step, "error": member.error, **outcome.facts}
        rows.append({**trial_row(experiment, member.trial, values, status), "trial_id": outcome.trial_id,
                     "tensorboard_dir": tensorboard_folder(outcome.trials, member.trial, remote)})
    return rows


def unfinished_rows(experiment: str, trial, base_trials, status: str, error: str | None = None) -> list[dict]:
    """The rows of a Tune trial's models that did not finish: ``failed`` (the trial errored, for
    good) or ``stopped`` (ASHA stopped it early), with the step they reached, where and on what."""
    result = trial.last_result or {}
    facts = {**provenance.software(), **{k: result[k] for k in ("node_id", "device") if k in result},
             "step": result.get("step"), "error": error}
    return [{**trial_row(experiment, member, facts, status), "trial_id": trial.trial_id,
             "tensorboard_dir": member.dirname} for member in members_of(trial.config, base_trials)]


def error_text(trial) -> str:
    """A failed Tune trial's error in one line (the last line of its last failure in Tune's error
    file, where the exception's type and message are); the file's name where it cannot be read."""
    path = getattr(trial, "error_file", None)
    try:
        with open(path) as file:
            lines = [line.strip() for line in file.read().split("Failure # ")[-1].splitlines()]
    except (OSError, TypeError):
        return f"failed (see {path})" if path else "failed"
    lines = [line for line in lines[1:] if line]
    return lines[-1] if lines else f"failed (see {path})"


def _commit(store: ResultsStore, outcome: TrialOutcome) -> list[dict]:
    """Commit the models of a finished Tune trial's outcome; the rows stored."""
    experiment = experiment_name(store.experiment)
    rows = member_rows(experiment, outcome, storage.is_remote(store.experiment))
    part = outcome.results_part
    if part is None:  # the history is in the outcome: a deferred evaluation's (read from the trial's
        # checkpoint), or a result of disgen before the trial wrote its own history
        part = storage.new_part()
        new = {row["trial_key"] for row in rows if row["status"] == "finished"} - store.keys
        history = [row for m in outcome.members if not m.failed and m.trial.trial_key in new
                   for row in history_rows(experiment, m.trial.trial_key, m.history or [])]
        if new and history:
            storage.write_history_part(store.experiment, part, history)
    return store.commit(part, rows)


def repair(store: ResultsStore, outcomes, checkpoints=None,
           evaluations: DeferredEvaluations | None = None) -> int:
    """Store the models of finished Tune trials that have no trials row (the driver died between
    Tune recording a trial as finished and its rows being committed; the trial's history part is
    in place). ``outcomes``: the trials' outcomes (``sweeps.packing.outcome_of`` of a ResultGrid's
    ``metrics``; None for a trial that did not finish). The models
    of a trial that trained but was never evaluated (the driver died first) are evaluated instead,
    by ``evaluations``, from the trial's checkpoint in ``checkpoints`` (a ResultGrid's
    ``checkpoint``, in the same order); the caller then collects them. Returns the models stored."""
    stored = 0
    checkpoints = checkpoints if checkpoints is not None else [None] * len(outcomes)
    for outcome, checkpoint in zip(outcomes, checkpoints):
        if outcome is None:
            continue
        if not outcome.evaluated:
            if evaluations is not None:
                try:
                    evaluations.start(outcome, checkpoint, store.keys)
                except ValueError as error:  # no checkpoint to evaluate from: the trial must train again
                    print(f"warning: {error}; its models stay without rows", flush=True)
        else:
            stored += sum(row["status"] == "finished" for row in _commit(store, outcome))
    return stored


class ResultsWriter(tune.Callback):
    """Commits each finished trial's rows (``ResultsStore.commit``) to the experiment's results, and
    the rows of models that failed or were stopped. Errors also go to ``errors.jsonl``; for a
    remote store it edits a local copy of that file and writes it back whole. Every write is
    ``retried``; one that keeps failing stops the sweep through ``stop`` (the run's
    ``StopSignal``; without one, it raises ``StorageFailed``), and nothing more is written."""

    def __init__(self, experiment_dir: str, base_trials=(), store: ResultsStore | None = None, stop=None):
        self.experiment_dir = experiment_dir
        self.base_trials = planned(base_trials)  # the planned trials a Tune trial's config names
        self._store = store or results_store(experiment_dir, fresh=True)
        self.stop = stop
        self.failure: str | None = None  # the write that kept failing, once one has

    def __getstate__(self):  # Tune keeps its callbacks in its state: the store stays with the driver
        return {**self.__dict__, "_store": None, "stop": None}

    @property
    def store(self) -> ResultsStore:
        """The store given, or (in a restored Tune run) the driver's open one."""
        if self._store is None:
            self._store = results_store(self.experiment_dir)
        return self._store

    @property
    def evaluations(self) -> DeferredEvaluations:
        """The driver's evaluations in flight for this experiment (never pickled with Tune's state)."""
        return DeferredEvaluations.of(self.experiment_dir)

    def _write(self, what: str, action) -> bool:
        """Run the write ``action``, ``retried``; True where it succeeded. Where it keeps failing,
        stop the sweep (see the class); once stopping, write nothing (the resume does)."""
        if self.failure is not None:
            return False
        try:
            retried(action, what)
            return True
        except StorageFailed as error:
            self.failure = str(error)
            if self.stop is None:
                raise
            print(f"error: cannot write the results to {self.experiment_dir}: {error}. Stopping the sweep "
                  "as Ctrl-C does; the results not written are written on --resume", flush=True)
            self.stop.request(f"the results could not be written to {self.experiment_dir} ({error})")
            return False

    def on_trial_complete(self, iteration, trials, trial, **info):
        """Store the trial's models: one row each, finished or failed (a pack member that diverged,
        also in errors.jsonl); a trial that ASHA stopped early, ``stopped``; or, if it trained them
        without evaluating (it held a GPU), start their evaluations. A model whose finished row is
        already stored keeps it: a driver killed after the commit but before Tune saved the trial as
        finished lets the resume run the trial again."""
        result = trial.last_result or {}
        if "members" not in result:  # no final report: the scheduler stopped it
            part, rows = storage.new_part(), unfinished_rows(
                experiment_name(self.store.experiment), trial, self.base_trials, "stopped")
            self._write(f"storing the stopped trial {trial.trial_id}", lambda: self.store.commit(part, rows))
            return
        outcome = outcome_of({"trial_id": trial.trial_id, **result}, trial.config, self.base_trials)
        if trial.checkpoint is not None:  # the final one: the in-training ones are spent
            _remove_training_checkpoints(trial, outcome.trials)
        if not outcome.evaluated:
            self._errors(outcome)
            if self.failure is not None:  # stopping: the resume evaluates its models
                return
            try:
                self.evaluations.start(outcome, trial.checkpoint, self.store.keys)
            except Exception as error:  # not the trial's fault: it stays finished, --resume evaluates it
                self.evaluations.failed += 1
                for member in outcome.members:
                    self._error({"trial_key": member.trial.trial_key, "trial_id": trial.trial_id,
                                 "error": f"evaluation not started: {type(error).__name__}: {error}"})
        else:
            self.store_result(outcome)

    def on_step_end(self, iteration, trials, **info):
        self.collect()

    def store_result(self, outcome: TrialOutcome) -> None:
        """Commit a finished trial's models, and record the members that failed in errors.jsonl."""
        if self._write(f"storing the trial {outcome.trial_id}", lambda: _commit(self.store, outcome)):
            self._errors(outcome)

    def collect(self, wait: bool = False) -> int:
        """Commit the trials whose deferred evaluations have ended (``wait``: all of them, as they
        end); the trials committed."""
        done = 0
        for outcome in self.evaluations.finished(wait):
            self.store_result(outcome)
            done += 1
        return done

    def _errors(self, outcome: TrialOutcome) -> None:
        for member in outcome.members:
            if member.failed:
                self._error({"trial_key": member.trial.trial_key, "trial_id": outcome.trial_id,
                             "error": member.error})

    def on_trial_error(self, iteration, trials, trial, **info):
        """Store a ``failed`` row for each of the trial's models (with the error's last line), and
        the error file in errors.jsonl."""
        error = error_text(trial)
        part, rows = storage.new_part(), unfinished_rows(
            experiment_name(self.store.experiment), trial, self.base_trials, "failed", error)
        self._write(f"storing the failed trial {trial.trial_id}", lambda: self.store.commit(part, rows))
        for member in members_of(trial.config, self.base_trials):
            self._error({"trial_key": member.trial_key, "trial_id": trial.trial_id, "error": error,
                         "error_file": getattr(trial, "error_file", None)})

    def _error(self, record: dict) -> None:
        """Record a failed trial as a new part of ``errors-parts/`` (one JSON line, written whole):
        never a file read, changed and written back, which two writers, or a retried write, could
        tear or lose a line of (``analysis.load_errors`` reads them)."""
        record["at"] = dt.datetime.now(dt.timezone.utc).isoformat()
        path = storage.join(self.experiment_dir, ERRORS_PARTS, f"{storage.new_part()}.jsonl")
        text = (json.dumps(record) + "\n").encode()
        self._write(f"recording an error in {ERRORS_PARTS}/", lambda: self._put(path, text))

    @staticmethod
    def _put(path: str, content: bytes) -> None:
        """Write the new file ``path`` whole (its folder made if need be)."""
        fs, inner = storage.resolve(path)
        fs.create_dir(inner.rsplit("/", 1)[0], recursive=True)
        storage.write_whole(fs, inner, content)


def _remove_training_checkpoints(trial, members) -> None:
    """Delete a trial's in-training checkpoints once its final one (the trained models) is on
    storage and Tune's; one that cannot be deleted now stays, costing only its storage."""
    from sweeps.checkpoints import checkpoint_folder, legacy_checkpoint_folder, remove_training_checkpoints

    try:
        filesystem = trial.storage.storage_filesystem
        remove_training_checkpoints(filesystem, checkpoint_folder(trial.storage, members), members,
                                    unsealed=True)
        # an experiment from before the layout: only this trial's (by their seals) in the shared folder
        remove_training_checkpoints(filesystem, legacy_checkpoint_folder(trial.storage, members), members)
    except OSError as error:
        print(f"warning: the in-training checkpoints of trial {trial.trial_id} stay on storage "
              f"({error})", flush=True)


def read_trials(experiment_dir: str):
    """The trials table of a local or remote experiment as a DataFrame (empty if none yet)."""
    return read_results(experiment_dir, TRIALS_FILE)
