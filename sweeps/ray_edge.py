"""Ray's edge: every call of the sweep side into Ray and Ray Tune, and nothing else.

The rest of ``sweeps/`` is plain Python that takes what it needs as arguments: the trainable
(``sweeps.trainable.train_trial``) is handed a ``TrialContext``, the results writer and the console
are handed typed trial events (``TrialView``), the deferred evaluations a ``RemoteTasks``, the
driver a ``Cluster``. This module turns Ray into those:

- **connecting** (``connected``): start a private local Ray or join a cluster, and say what it has
  (its GPUs; ``Cluster.probe_gpu``: whether a GPU node's GPUs are real and their free memory);
- **remote tasks** (``RemoteTasks``): CPU-only tasks that evaluate trained models off the GPU;
- **the trial context** (``RayTrialContext``): a trial's report, its node and its working folder;
- **events** (``Events``): the one ``tune.Callback`` of a run, handing each trial event to plain
  listeners as a ``TrialView``;
- **the run** (``fit``): a ``tune.Tuner`` built from a plain ``TuneRun`` (a grid of trial configs, or
  Optuna sampling a space with its study in a journal file) and fitted. A run is always a new Tune
  run: nothing Tune saved is ever read back (``--resume`` plans from disgen's own records);
- **signals** (``Events.setup``): a Ctrl-C or SIGTERM handed to Tune's own SIGINT handler, which
  ends the run; ``sweeps.errors.StopSignal`` is told, and may end it too (``request``);
- **output** (``TuneOutput``, ``quiet_worker``): Tune's messages filtered, its output engine quiet.

Every private Ray name the sweep side uses is here, in ``PRIVATE`` (tests/sweeps/test_ray_edge.py
checks each against the Ray version it was read from, ``READ_FROM``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence

os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # we write TensorBoard ourselves
# A search metric such as test_nll comes only with a trial's final report, not with its progress.
os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")

import ray  # noqa: E402
from ray import tune  # noqa: E402

from analysis.storage import is_remote, resolve  # noqa: E402
from sweeps.errors import StopSignal, Terminated, UsageError  # noqa: E402
from sweeps.search import Grid, Sampled  # noqa: E402

# The Ray version the private names below were read from (ray is pinned to 2.60 in pyproject.toml).
READ_FROM = "2.60"
# Every private Ray name of the sweep side: what it is for.
PRIVATE = {
    "ray._private.services.find_gcs_addresses": "whether a Ray cluster already runs on this machine",
    "ray.air.util.node._force_on_current_node": "the W&B logging actor on the driver's node",
    "ray.air.integrations.wandb._clean_log": "a model's settings made fit for a W&B run's config",
}


# -- connecting ------------------------------------------------------------------------------------


def existing_local_cluster() -> bool:
    """Whether a Ray cluster already runs on this machine (``ray.init()`` would join it)."""
    try:
        from ray._private.services import find_gcs_addresses

        return bool(find_gcs_addresses())
    except Exception:  # a private API: if it moves, assume a private local instance
        return False


def on_this_node() -> dict:
    """``ray.remote`` options that place an actor on this (the driver's) node."""
    from ray.air.util.node import _force_on_current_node

    return _force_on_current_node()


def clean_for_wandb(config: dict) -> dict:
    """A run's config with what W&B cannot take left out, as Tune's W&B callback cleans it."""
    from ray.air.integrations.wandb import _clean_log

    return _clean_log(config)


def remote_environment(environment: dict | None) -> dict | None:
    """The ``runtime_env`` that gives every worker these environment variables (None: none)."""
    return {"env_vars": environment} if environment else None


class RemoteTasks:
    """CPU-only Ray tasks: ``submit`` one (no GPU reserved; a worker that dies is retried, an error
    of the task's own is not), ``done`` the ones that have ended, ``result`` one's return value (its
    error raised)."""

    def __init__(self):
        self._remote: dict = {}  # function → its Ray remote function, made once

    def submit(self, function: Callable, argument, cpus: float, name: str):
        if function not in self._remote:
            self._remote[function] = ray.remote(num_gpus=0, max_retries=2)(function)
        return self._remote[function].options(num_cpus=cpus, name=name).remote(argument)

    def done(self, handles: Sequence, wait: bool) -> list:
        """The handles whose tasks have ended (``wait``: at least one, waiting for it)."""
        if not handles:
            return []
        ready, _ = ray.wait(list(handles), num_returns=1 if wait else len(handles),
                            timeout=None if wait else 0, fetch_local=True)
        return ready

    def result(self, handle):
        return ray.get(handle)


class Cluster:
    """The Ray this sweep runs on, once connected (``connected``): its GPUs, a GPU node's answer to
    a probe, and its remote tasks."""

    def __init__(self, started: bool):
        self.started = started
        self.tasks = RemoteTasks()

    @staticmethod
    def gpus() -> float:
        return float(ray.cluster_resources().get("GPU", 0))

    @staticmethod
    def probe_gpu(gpus: float) -> dict | None:
        """The GPU a trial gets, asked of a GPU node in a task that reserves what a trial does:
        {"cuda": False} where the node's GPUs are logical only (Ray's ``--num-gpus`` on a machine
        without CUDA: the trials train on its CPU), else its free memory; None if no node answers
        soon (an autoscaling cluster with no GPU node up yet)."""

        @ray.remote(num_gpus=gpus, num_cpus=0)
        def probe() -> dict:
            import torch

            if not torch.cuda.is_available():
                return {"cuda": False}
            return {"cuda": True, "free_bytes": int(torch.cuda.mem_get_info()[0]),
                    "name": torch.cuda.get_device_name()}

        try:
            return ray.get(probe.remote(), timeout=120)
        except Exception:  # no GPU node up yet: the caller assumes a size
            return None


@contextlib.contextmanager
def connected(address: str | None, num_cpus: int | None, verbose: bool,
              environment: dict | None = None) -> Iterator[Cluster]:
    """Ray for the block: joined where this process is connected already, or at ``address``
    (``auto``: this machine's cluster), else a fresh private local instance (even where another
    Ray runs here: it says so), stopped at the end. The workers get ``environment``. ``ray.init``
    puts in its own SIGTERM handler; the one this process had is put back."""
    if ray.is_initialized():
        yield Cluster(started=False)
        return
    if not address and existing_local_cluster():
        print("note: a Ray cluster already runs on this machine; starting a private local Ray for this "
              "run (pass --address auto to run on that cluster instead)", flush=True)
    main = threading.current_thread() is threading.main_thread()
    sigterm = signal.getsignal(signal.SIGTERM) if main else None
    try:
        # The workers' own output reaches this console with --verbose only (a trial's error comes
        # through Tune either way; Ray keeps every worker's output in its session's log files).
        if address and address != "local":
            ray.init(address=address, log_to_driver=verbose, runtime_env=remote_environment(environment))
        else:
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=verbose,
                     runtime_env=remote_environment(environment))
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise UsageError(f"could not start or join Ray ({error}); check --address / $RAY_ADDRESS") from None
    finally:
        if callable(sigterm):
            signal.signal(signal.SIGTERM, sigterm)
    try:
        yield Cluster(started=True)
    finally:
        ray.shutdown()


# -- a trial ---------------------------------------------------------------------------------------


class RayTrialContext:
    """What a trial needs of Ray Tune (``sweeps.trainable.TrialContext``): where it runs and how it
    reports. ``report`` hands a metrics dict to Tune; with ``checkpoint_dir``, also that folder's
    files as the trial's checkpoint (Tune copies them into the trial's folder on storage)."""

    def __init__(self):
        self.node_id = ray.get_runtime_context().get_node_id()
        self.working_dir = os.getcwd()  # the trial's own folder, which Tune syncs to remote storage

    @staticmethod
    def report(metrics: dict, checkpoint_dir: str | None = None) -> None:
        checkpoint = None if checkpoint_dir is None else tune.Checkpoint.from_directory(checkpoint_dir)
        tune.report(metrics, checkpoint=checkpoint)


def _run_trial(config: dict, run_info) -> None:
    from sweeps.trainable import train_trial

    if not run_info.verbose:
        quiet_worker()
    train_trial(config, run_info, RayTrialContext())


# -- events ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TrialView:
    """A Tune trial as the plain listeners see it: its id, its config (its members' keys, or an
    Optuna trial's planned index and samples), its last result, its status, its error (the last
    line of Tune's text record of it) and its checkpoint's path on storage, where it has one."""

    trial_id: str
    config: dict
    last_result: dict
    status: str
    error: str | None = None
    checkpoint: str | None = None


def _first_line(text: str, limit: int = 200) -> str:
    """An error's first line, at most ``limit`` characters (Ray's errors run to paragraphs)."""
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= limit else line[:limit - 1] + "…"


def _error_text(trial) -> str | None:
    """A failed trial's error in one line: the last line of its last failure in Tune's text error
    file (a text file, never the pickled one), or the file's name where it cannot be read."""
    path = getattr(trial, "error_file", None)
    if not path:
        return None
    try:
        with open(path) as file:
            lines = [line.strip() for line in file.read().split("Failure # ")[-1].splitlines()]
    except OSError:
        return f"failed (see {path})"
    lines = [line for line in lines[1:] if line]
    return _first_line(lines[-1], 500) if lines else f"failed (see {path})"


def view(trial) -> TrialView:
    checkpoint = trial.checkpoint
    return TrialView(trial.trial_id, dict(trial.config), dict(trial.last_result or {}), trial.status,
                     _error_text(trial) if trial.status == "ERROR" else None,
                     None if checkpoint is None else checkpoint.path)


class Events(tune.Callback):
    """The one Tune callback of a run: each trial event handed to every plain listener that has a
    method for it (``started``, ``progress``, ``completed``, ``failed``, ``step``, ``announce``), as
    ``TrialView``s; and at ``setup``, a Ctrl-C or SIGTERM bridged to Tune's handler (the class
    ``StopSignal`` docstring in ``sweeps.errors``). Tune keeps its callbacks in its saved state,
    which disgen never reads back: pickled, it is empty."""

    def __init__(self, listeners: Sequence, stop: StopSignal):
        self.listeners, self.stop = list(listeners), stop

    def __getstate__(self):
        return {}

    def _tell(self, event: str, *args) -> None:
        for listener in getattr(self, "listeners", ()):
            method = getattr(listener, event, None)
            if method is not None:
                method(*args)

    def setup(self, **info):
        if getattr(self, "stop", None) is not None:
            bridge_signals(self.stop)
        self._tell("announce")

    def on_trial_start(self, iteration, trials, trial, **info):
        self._tell("started", view(trial))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self._tell("progress", view(trial), dict(result))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._tell("completed", view(trial))

    def on_trial_error(self, iteration, trials, trial, **info):
        self._tell("failed", view(trial))

    def on_step_end(self, iteration, trials, **info):
        self._tell("step", [view(trial) for trial in trials])


def bridge_signals(stop: StopSignal) -> None:
    """Put ``stop`` in front of Tune's SIGINT handler, which Tune has installed by now (Ray 2.60,
    ``ray.tune.tune._setup_signal_catching``): a Ctrl-C is noted and handed on; a SIGTERM (which
    Tune does not handle, and ``ray.init`` leaves to a handler that exits at once) is noted and
    handed to Tune's SIGINT handler, which ends the run the same way; a second SIGTERM raises
    ``Terminated`` at once, as a second Ctrl-C raises ``KeyboardInterrupt`` (Tune's handler puts
    back the one from before the run). ``stop.request`` ends the run through the same handler."""
    if threading.current_thread() is not threading.main_thread():
        return
    tune_handler = signal.getsignal(signal.SIGINT)
    if not callable(tune_handler):
        return

    def on_interrupt(signum, frame):
        stop.noted(signal.SIGINT)
        tune_handler(signum, frame)

    def on_terminate(signum, frame):
        if stop.received.is_set():  # stopping already: at once, as a second Ctrl-C
            stop.signum = signal.SIGTERM
            raise Terminated()
        stop.noted(signal.SIGTERM)
        tune_handler(signal.SIGINT, frame)

    def interrupt() -> None:
        try:
            tune_handler(signal.SIGINT, None)
        except ValueError:  # asked off the main thread (the driver lock's lease): Tune's stop event
            pass  # is set; only its putting back of a signal handler failed

    stop.interrupt = interrupt
    signal.signal(signal.SIGINT, on_interrupt)
    signal.signal(signal.SIGTERM, on_terminate)


# -- the run ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TuneRun:
    """One Tune run, as plain data: its name and storage, the trainable's ``run_info``
    (``sweeps.options.TrialRun``) and resources, what it runs (``Grid`` or ``Sampled``), the name
    of a trial's folder (``name(config)``), ASHA's steps (None: no scheduler), the limits, and the
    callbacks beside disgen's events (Tune's JSON and CSV records, trackers)."""

    name: str
    storage: str
    run_info: object
    cpus: float
    gpus: float
    work: Grid | Sampled
    trial_name: Callable[[dict], str]
    asha_steps: int | None = None
    max_concurrent: int | None = None
    max_failures: int = 2
    verbose: bool = False
    sync_artifacts: bool = False
    callbacks: tuple = ()


def _domains(space: dict) -> dict:
    """A validated search space (``sweeps.grid.search_space``) as Tune's sampling domains."""
    make = {"uniform": tune.uniform, "loguniform": tune.loguniform, "randint": tune.randint}
    return {name: tune.choice(spec["choice"]) if "choice" in spec
            else make[next(iter(spec))](*next(iter(spec.values()))) for name, spec in space.items()}


def _final_metric_optuna(**kwargs):
    """OptunaSearch fed only the results that hold its metric: disgen's metrics (test NLL,
    D-score…) arrive with a trial's final report, its progress reports carry loss terms only, and
    plain OptunaSearch fails on the first one without the metric."""
    from ray.tune.search.optuna import OptunaSearch

    class FinalMetricOptunaSearch(OptunaSearch):
        def on_trial_result(self, trial_id, result):
            if self.metric in result:
                super().on_trial_result(trial_id, result)

    return FinalMetricOptunaSearch(**kwargs)


def _grid(work: Grid) -> tuple[dict, object, int]:
    return {"members": tune.grid_search([config["members"] for config in work.configs])}, None, 1


def _sampled(work: Sampled) -> tuple[dict, object, int]:
    space = {"base": tune.choice(list(range(work.planned))), "sampled": _domains(work.space)}
    searcher = _final_metric_optuna(metric=work.metric, mode=work.mode, seed=work.seed, storage=work.journal,
                                    study_name=work.study, points_to_evaluate=work.points or None)
    return space, searcher, work.samples


_SPACES = {Grid: _grid, Sampled: _sampled}


def _asha(steps: int | None):
    """ASHA on the training loss (``--scheduler asha``); max_t one past the last step: ASHA stops
    a trial that reaches max_t, and the last progress report comes before the final report that
    holds the model's metrics."""
    if steps is None:
        return None
    return tune.schedulers.ASHAScheduler(time_attr="step", metric="loss", mode="min", max_t=steps + 1,
                                         grace_period=max(1, steps // 8), reduction_factor=3)


def _tuner(run: TuneRun, events: Events) -> tune.Tuner:
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    param_space, searcher, samples = _SPACES[type(run.work)](run.work)
    name = lambda trial: run.trial_name(trial.config)  # disgen's model or pack name
    trainable = tune.with_resources(tune.with_parameters(_run_trial, run_info=run.run_info),
                                    {"cpu": run.cpus, "gpu": run.gpus})
    # Tune's per-trial records (result.json, progress.csv, params): beside the trials on a folder; on
    # remote storage none, since every save of Tune's state uploads every one of them again (a new
    # version of each, kept 30 days) and history.parquet holds the same numbers
    records = () if is_remote(run.storage) else (JsonLoggerCallback(), CSVLoggerCallback())
    # on S3, disgen's own file system (analysis.storage.s3_filesystem): Tune's uploads then write each
    # folder's key once, not at every save
    filesystem, path = resolve(run.storage) if run.storage.startswith("s3://") else (None, run.storage)
    return tune.Tuner(
        trainable, param_space=param_space,
        tune_config=tune.TuneConfig(reuse_actors=True, max_concurrent_trials=run.max_concurrent,
                                    trial_name_creator=name, trial_dirname_creator=name, search_alg=searcher,
                                    num_samples=samples, scheduler=_asha(run.asha_steps)),
        run_config=tune.RunConfig(
            name=run.name, storage_path=path, storage_filesystem=filesystem,
            callbacks=[events, *run.callbacks, *records],
            failure_config=tune.FailureConfig(max_failures=run.max_failures),
            # no num_to_keep: each Tune trial reports one checkpoint, its final one, and num_to_keep
            # would make Tune upload its whole state after every trial's (_state_uploads)
            sync_config=tune.SyncConfig(sync_artifacts=run.sync_artifacts),
            verbose=1 if run.verbose else 0))


def fit(run: TuneRun, listeners: Sequence, stop: StopSignal) -> int:
    """Run ``run`` as a new Tune run, its events handed to ``listeners``, stopped by ``stop``; the
    number of trials that failed. Tune's output is disgen's console's unless ``run.verbose``."""
    with TuneOutput(run.verbose, stop), _state_uploads(run.storage):
        return _tuner(run, Events(listeners, stop)).fit().num_errors


STATE_UPLOADS = "TUNE_GLOBAL_CHECKPOINT_S"
STATE_UPLOAD_S = 900


@contextlib.contextmanager
def _state_uploads(storage: str) -> Iterator[None]:
    """Tune saves its experiment state every 10 s or more and uploads its whole staging folder each
    time, unchanged files included: on an object store a new version of each of its files and of
    each folder's key, kept 30 days by the bucket's rule. disgen reads none of it back (its results
    are its own), so on remote storage Tune uploads it every 15 minutes and at the end
    (``$TUNE_GLOBAL_CHECKPOINT_S``, unless the user set it)."""
    if not is_remote(storage) or STATE_UPLOADS in os.environ:
        yield
        return
    os.environ[STATE_UPLOADS] = str(STATE_UPLOAD_S)
    try:
        yield
    finally:
        os.environ.pop(STATE_UPLOADS, None)


# -- output ----------------------------------------------------------------------------------------

# Tune's hint to resume with its own API: the command line prints the --resume command instead.
_RESTORE_HINT = "Tuner.restore("
_STOP_SIGNAL = "Stop signal received"
_NOT_COMPLETE = "Trials did not complete"
_NO_METRICS = "Failed to fetch metrics for"  # a trial that had not started when the run stopped
_TRIAL_FAILED = "Trial task failed for trial"  # with the traceback of its worker's error
_FILTERED = ("ray.tune.tune", "ray.tune.analysis.experiment_analysis", "ray.tune.execution.tune_controller")
NEW_OUTPUT = "RAY_AIR_NEW_OUTPUT"


class _TuneMessages(logging.Filter):
    """Drops Tune's restore hint always; in the quiet view, also its lists of unfinished trials and
    of trials without results, says in disgen's words what its stop message says, and a failed
    trial's traceback in one line (the whole of it is in the trial's error file)."""

    def __init__(self, verbose: bool, stop: StopSignal | None = None):
        super().__init__()
        self.verbose, self.stop = verbose, stop

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if _RESTORE_HINT in message:
            return False
        if self.verbose:
            return True
        if message.startswith((_NOT_COMPLETE, _NO_METRICS)):
            return False
        if message.startswith(_TRIAL_FAILED):
            error = record.exc_info[1] if record.exc_info else None
            said = f"{type(error).__name__}: {_first_line(str(error))}" if error else "its error"
            record.msg = (f"{message.splitlines()[0]} ({said}); Tune retries it from its newest "
                          "checkpoint up to --max-failures times")
            record.args, record.exc_info, record.exc_text = (), None, None
        if message.startswith(_STOP_SIGNAL):
            if self.stop is not None and self.stop.signum == signal.SIGTERM:
                record.msg = ("SIGTERM (e.g. `ray job stop`): stopping the sweep (finished models are "
                              "stored; a second SIGTERM stops at once)")
            else:
                record.msg = ("Ctrl-C: stopping the sweep (finished models are stored; Ctrl-C again stops "
                              "at once)")
            record.args = ()
        return True


class TuneOutput:
    """While Tune runs: its messages filtered (``_TuneMessages``); in the quiet view, its output
    engine off and its INFO lines (the experiment state it wrote, its run time) left out.

    Ray 2.60's default output engine prints its experiment box and "View detailed results here"
    whatever the verbosity (``ray.tune.experimental.output``, ``experiment_started``); its legacy
    engine (``RAY_AIR_NEW_OUTPUT=0``) at verbosity 0 prints nothing. ``tune.run`` reads the variable
    when it starts, so it is set for the run only."""

    def __init__(self, verbose: bool, stop: StopSignal | None = None):
        self.verbose = verbose
        self.filter = _TuneMessages(verbose, stop)
        self.saved: tuple = ()

    def __enter__(self):
        tune_logger = logging.getLogger("ray.tune")
        self.saved = (tune_logger.level, os.environ.get(NEW_OUTPUT))
        for name in _FILTERED:
            logging.getLogger(name).addFilter(self.filter)
        if not self.verbose:
            tune_logger.setLevel(max(logging.WARNING, tune_logger.getEffectiveLevel()))
            os.environ[NEW_OUTPUT] = "0"
        return self

    def __exit__(self, *exc):
        level, engine = self.saved
        for name in _FILTERED:
            logging.getLogger(name).removeFilter(self.filter)
        logging.getLogger("ray.tune").setLevel(level)
        if engine is None:
            os.environ.pop(NEW_OUTPUT, None)
        else:
            os.environ[NEW_OUTPUT] = engine
        return False


def quiet_worker() -> None:
    """In a trial's worker: leave out Ray Train's line for every checkpoint it saves ('Checkpoint
    successfully created at ...'), which Ray forwards to the driver's console."""
    logging.getLogger("ray.train").setLevel(logging.WARNING)
