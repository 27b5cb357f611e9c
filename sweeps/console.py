"""The sweep's console: what a researcher reads while a sweep runs.

Tune's own output (a ``members`` column, ``train_trial_…`` names, a result box of about 45 rows
per finished trial) is replaced by three things, printed to stdout as plain lines that read the
same in a terminal, in ``ray job logs`` and in a CI log:

- a **progress table** of the models that are running: the model's name (the trial's
  ``TrialConfig.dirname``, or the pack's name), dataset, split, objective, β, seed (a pack shows
  its range), step (or ``evaluating``), loss and images per second, under a status line with the
  models done, running and waiting and the **ETA of the whole sweep**. It comes at the first progress
  report, then every 30 s, the interval growing to a quarter of the time run (at most 10
  minutes), so a day-long sweep prints a few hundred tables, not thousands; its column header
  only when the models in it have changed;
- **one line per finished model** with its headline metrics (one per member of a pack), and one
  per failed or early-stopped model;
- Tune's own messages, less those that repeat the above or give a hint that disgen replaces (its
  ``Tuner.restore(...)`` hint: the command line prints the exact ``--resume`` command instead).

The ETA is the work left, counted as ``sweeps/costs.py`` counts training (images × FLOPs per
image), at the rate measured so far in this run: the work done since its first trial started over
the time since. A model counts whole once finished; a running one by the share of its steps done,
less the share of its time that evaluation takes (measured on the models finished so far), so
the ETA does not reach zero while the last models are being evaluated. Before the first
progress report, the header gives ``sweeps/costs.py``'s a-priori estimate.

``--verbose`` gives Tune's full output instead (``LiveView`` is then left out).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence

from ray import tune

from sweeps.errors import Terminated, raise_terminated
from sweeps.packing import dirname, members_of, outcome_of
from sweeps.packing import planned as as_planned_trials
from sweeps.trials import TrialConfig

FIRST_INTERVAL = 30.0  # seconds between two progress tables, at first
LONGEST_INTERVAL = 600.0
MAX_ROWS = 20  # running models shown in one table; the rest are counted
HEADLINE = ("train_nll", "test_nll", "d_score", "dci_disentanglement", "mig", "transfer_gbt_ood1_a")
COLUMNS = ("model", "dataset", "split", "objective", "β", "seed", "step", "loss", "img/s")


def duration(seconds: float) -> str:
    """``h:mm:ss`` (``m:ss`` under an hour)."""
    seconds = int(max(0.0, seconds) + 0.5)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _values(values: Sequence) -> str:
    """One setting over a pack's members: the value, two values, or the range."""
    distinct = sorted(set(values), key=lambda v: (isinstance(v, str), v))
    text = [f"{v:g}" if isinstance(v, float) else str(v) for v in distinct]
    if len(text) <= 2:
        return ",".join(text)
    return f"{text[0]}–{text[-1]}"


def _number(value) -> str:
    """A loss or metric: three decimals for a score in [-1, 1], one for an NLL or a loss."""
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "—"
    return f"{value:.3f}" if abs(value) <= 1 else f"{value:.1f}"


def _work(trial: TrialConfig) -> float:
    """A model's training work in reference-network images (``sweeps/costs.py``)."""
    from sweeps.costs import relative_flops, training_images

    return training_images(trial) * relative_flops(trial)


class Console:
    """The state behind the live view of one experiment: the planned models, which are done, what
    each running Tune trial last reported. ``LiveView`` feeds it Tune's events; it prints."""

    def __init__(self, name: str, planned: Sequence[TrialConfig], finished_keys=(), base_trials=(),
                 samples: int | None = None, gpus: float = 0.0, stream=None, clock=time.monotonic):
        # what the Tune trials' configs name: the planned trials (Optuna's base), by key
        self.name, self.base_trials, self.gpus = name, as_planned_trials(base_trials or planned), gpus
        self.stream, self.clock = stream, clock
        self.work = {t.trial_key: _work(t) for t in planned}
        self.models = samples if samples is not None else len(planned)
        mean = sum(self.work.values()) / max(1, len(self.work))
        self.total_work = mean * samples if samples is not None else sum(self.work.values())
        self.done_before = {k for k in finished_keys if k in self.work} if samples is None else set()
        self.done: set[str] = set(self.done_before)
        self.failed: set[str] = set()
        self.timings: list[tuple[float, float]] = []  # (train, eval) seconds of the models finished
        self.started = clock()
        self.first_start: float | None = None  # when the run's first trial started: the rate's origin
        self.latest: dict[str, dict] = {}  # Tune trial id → its last progress report
        self.baseline: dict[str, float] = {}  # trial id → fraction trained when first seen
        self.trials: list = []
        self.last_table: float | None = None
        self.last_shown: list[str] = []  # the trial ids of the last table's rows
        self.widths: list[int] = []  # the column widths of the last header
        self.announced = False
        self.reported = False  # a progress report has come in this run (the first shows the table)

    # -- printing ---------------------------------------------------------------------------------

    def print(self, text: str) -> None:
        print(text, file=self.stream or sys.stdout, flush=True)

    def stamp(self) -> str:
        return f"[{duration(self.clock() - self.started):>7}]"

    def announce(self) -> None:
        """The header, once per experiment run: models, how many are done, the a-priori cost."""
        if self.announced:
            return
        self.announced = True
        from sweeps.costs import CPU_IMAGES_PER_SECOND, gpu_flops_per_second, training_flops_per_image

        left = self.total_work - sum(self.work[k] for k in self.done)
        if self.gpus > 0:
            rate = gpu_flops_per_second() / training_flops_per_image("burgess", 64, 1, 10)
            cost = f"{left / rate / 3600:.2g} V100-GPU-hours"
        else:
            cost = f"{left / CPU_IMAGES_PER_SECOND['burgess'] / 60:.2g} CPU-core-minutes"
        before = f" ({len(self.done_before)} done before)" if self.done_before else ""
        self.print(f"{self.name}: {self.models} models{before}, about {cost} of training left "
                   "(sweeps/costs.py); Ctrl-C stops the sweep cleanly")

    # -- Tune's events ----------------------------------------------------------------------------

    def members(self, trial) -> list[TrialConfig]:
        return members_of(trial.config, self.base_trials)

    def _fraction(self, trial, result: dict) -> float:
        members = self.members(trial)
        total = result.get("total_steps") or members[0].model.steps or 1
        return min(1.0, result.get("step", 0) / total)

    def trial_started(self) -> None:
        if self.first_start is None:
            self.first_start = self.clock()

    def result(self, trial, result: dict) -> None:
        if result.get("done"):
            return
        first, self.reported = not self.reported, True
        if trial.trial_id not in self.latest:
            restored = result.get("training_iteration", 1) > result.get("iterations_since_restore", 1)
            self.baseline[trial.trial_id] = self._fraction(trial, result) if restored else 0.0
        self.latest[trial.trial_id] = result
        if first:
            self.table(force=True)

    def complete(self, trial) -> None:
        """One line per model of a finished Tune trial: its headline metrics, or why it has none."""
        result = trial.last_result or {}
        self.latest.pop(trial.trial_id, None)
        if not result.get("done"):  # stopped early (ASHA): no evaluation
            for member in self.members(trial):
                self.failed.add(member.trial_key)
            self.print(f"{self.stamp()} stopped {dirname(self.members(trial))} at step "
                       f"{result.get('step', '?')} (early stopping), loss {_number(result.get('loss'))}")
            return
        outcome = outcome_of(result, trial.config, self.base_trials)
        for member in outcome.members if outcome else []:
            config = member.trial
            if member.failed:
                self.failed.add(config.trial_key)
                self.print(f"{self.stamp()} FAILED {config.dirname}: {str(member.error).splitlines()[0]}")
                continue
            self.done.add(config.trial_key)
            self.work.setdefault(config.trial_key, _work(config))
            values = member.values()
            if all(isinstance(values.get(k), (int, float)) for k in ("train_seconds", "eval_seconds")):
                self.timings.append((values["train_seconds"], values["eval_seconds"]))
            metrics = [f"{name} {_number(values[name])}" for name in HEADLINE
                       if isinstance(values.get(name), (int, float)) and math.isfinite(values[name])][:4]
            seconds = ", ".join(f"{what} {values[key]:.0f} s" for what, key in
                                (("train", "train_seconds"), ("eval", "eval_seconds"))
                                if isinstance(values.get(key), (int, float)))
            self.print(f"{self.stamp()} done {config.dirname}: {', '.join(metrics) or 'no metrics'}"
                       + (f" ({seconds})" if seconds else "")
                       + f" [{len(self.done)} of {self.models}]")

    def error(self, trial) -> None:
        self.latest.pop(trial.trial_id, None)
        error = getattr(trial, "error_file", None)
        for member in self.members(trial):
            self.failed.add(member.trial_key)
        self.print(f"{self.stamp()} FAILED {dirname(self.members(trial))} "
                   f"(its error: {error or 'in errors.jsonl'})")

    def step(self, trials) -> None:
        self.trials = trials
        self.table()

    # -- the table --------------------------------------------------------------------------------

    def interval(self) -> float:
        """30 s at first, then a quarter of the time run, at most 10 minutes."""
        return min(LONGEST_INTERVAL, max(FIRST_INTERVAL, (self.clock() - self.started) / 4))

    def running(self) -> list:
        return [t for t in self.trials if t.status == "RUNNING" and t.trial_id in self.latest]

    def evaluation_share(self) -> float:
        """The share of a model's time its evaluation took, over the models finished in this run
        (0 until one has)."""
        shares = [e / (t + e) for t, e in self.timings if t + e > 0]
        return sum(shares) / len(shares) if shares else 0.0

    def progress(self) -> tuple[float, float]:
        """(work done in all, work done since this run started): a finished model counts whole, a
        running one by the fraction of its steps done (since this run first saw it, for the
        second), less the share of its time that its evaluation will take."""
        finished = sum(self.work.get(k, 0.0) for k in self.done)
        since = finished - sum(self.work.get(k, 0.0) for k in self.done_before)
        trained = 1.0 - self.evaluation_share()
        for trial in self.running():
            work = sum(self.work.get(m.trial_key) or _work(m) for m in self.members(trial)) * trained
            fraction = self._fraction(trial, self.latest[trial.trial_id])
            finished += work * fraction
            since += work * max(0.0, fraction - self.baseline.get(trial.trial_id, 0.0))
        return finished, since

    def eta(self) -> str:
        """The time the sweep's work left takes at the rate measured in this run (since its first
        trial started)."""
        elapsed = self.clock() - (self.started if self.first_start is None else self.first_start)
        finished, since = self.progress()
        if since <= 0 or elapsed <= 0:
            return "ETA after the first reports"
        return f"ETA {duration(max(0.0, self.total_work - finished) / (since / elapsed))}"

    def table(self, force: bool = False) -> None:
        """The status line and the running models (training or being evaluated), if ``force`` or the
        interval has passed."""
        now = self.clock()
        if not force and (self.last_table is None or now - self.last_table < self.interval()):
            return
        self.last_table = now
        running = self.running()
        busy = sum(len(self.members(t)) for t in running)
        waiting = max(0, self.models - len(self.done) - len(self.failed) - busy)
        failed = f", {len(self.failed)} failed or stopped" if self.failed else ""
        self.print(f"{self.stamp()} {len(self.done)} of {self.models} models done{failed}, {busy} "
                   f"running, {waiting} waiting; {self.eta()}")
        if not running:
            return
        rows = [COLUMNS, *(self.row(trial) for trial in running[:MAX_ROWS])]
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
        shown = [t.trial_id for t in running[:MAX_ROWS]]
        if shown == self.last_shown and all(w <= old for w, old in zip(widths, self.widths)):
            rows, widths = rows[1:], self.widths  # the same models: their rows, under the last header
        self.last_shown, self.widths = shown, widths
        for row in rows:
            self.print("  " + "  ".join(f"{cell:<{width}}" for cell, width in zip(row, widths)).rstrip())
        if len(running) > MAX_ROWS:
            self.print(f"  … and {len(running) - MAX_ROWS} more running")

    def row(self, trial) -> tuple[str, ...]:
        """A training model's (or pack's) cells, in the order of ``COLUMNS``."""
        members = self.members(trial)
        first, result = members[0], self.latest.get(trial.trial_id, {})
        total = result.get("total_steps") or first.model.steps
        step = result.get("step")
        steps = ("starting" if step is None else "evaluating" if total and step >= total
                 else f"{step}/{total}")
        speed = result.get("images_per_second")
        return (dirname(members), first.data.dataset, first.data.split, first.model.objective,
                _values([m.model.beta for m in members]), _values([m.model.seed for m in members]), steps,
                _number(result.get("loss")), f"{speed:.0f}" if isinstance(speed, (int, float)) else "—")


class LiveView(tune.Callback):
    """Tune's events, handed to the experiment's ``Console``. Tune keeps its callbacks in its
    saved state; the console stays with the driver (a restored run is given a fresh LiveView:
    ``sweeps.tuner``)."""

    def __init__(self, console: Console):
        self.console = console

    def __getstate__(self):
        return {"console": None}

    def setup(self, **info):
        if self.console:
            self.console.announce()

    def on_trial_start(self, iteration, trials, trial, **info):
        if self.console:
            self.console.trial_started()

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if self.console:
            self.console.trials = trials
            self.console.result(trial, result)

    def on_trial_complete(self, iteration, trials, trial, **info):
        if self.console:
            self.console.complete(trial)

    def on_trial_error(self, iteration, trials, trial, **info):
        if self.console:
            self.console.error(trial)

    def on_step_end(self, iteration, trials, **info):
        if self.console:
            self.console.step(trials)


# -- Tune's own messages ------------------------------------------------------------------------------

# Tune's hint to resume with its own API: the command line prints the --resume command instead.
_RESTORE_HINT = "Tuner.restore("
_STOP_SIGNAL = "Stop signal received"
_NOT_COMPLETE = "Trials did not complete"
_NO_METRICS = "Failed to fetch metrics for"  # a trial that had not started when the run stopped
_FILTERED = ("ray.tune.tune", "ray.tune.analysis.experiment_analysis")
NEW_OUTPUT = "RAY_AIR_NEW_OUTPUT"


class _TuneMessages(logging.Filter):
    """Drops Tune's restore hint always; in the quiet view, also its lists of unfinished trials and
    of trials without results, and says in disgen's words what its stop message says."""

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
        if message.startswith(_STOP_SIGNAL):
            if self.stop is not None and self.stop.signum == signal.SIGTERM:
                record.msg = ("SIGTERM (e.g. `ray job stop`): stopping the sweep and saving its state "
                              "(finished models are stored; a second SIGTERM stops at once)")
            else:
                record.msg = ("Ctrl-C: stopping the sweep and saving its state (finished models "
                              "are stored; Ctrl-C again stops at once)")
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


class StopSignal(tune.Callback):
    """Notices the Ctrl-C (SIGINT), or the SIGTERM (``ray job stop``), that stops a Tune run.

    Tune's SIGINT handler ends the run, and ``Tuner.fit()`` returns normally; Tune then marks the
    trials it stopped as terminated, finished or not. So the command line asks this callback: at
    ``setup`` (Tune's handler is in place by then) it puts itself in front of Tune's handler, notes
    the signal and hands it on. Tune (Ray 2.60, ``ray.tune.tune._setup_signal_catching``) handles
    SIGINT (and SIGUSR1) only, and ``ray.init`` leaves SIGTERM to a handler that exits at once; so
    a SIGTERM is handed to Tune's SIGINT handler too, and ends the run the same way. Tune's handler
    puts back the SIGINT handler that was there before the run, so a second Ctrl-C raises
    ``KeyboardInterrupt`` at once; a second SIGTERM does the same, raising ``Terminated``
    (``sweeps.errors``). ``signum`` is the signal that stopped the sweep (None: none did).

    Used as a context manager around the runs, it puts back the SIGINT and SIGTERM handlers that
    were there before (Tune leaves its own in place after a run that was not interrupted, where a
    later Ctrl-C would do nothing); inside it, outside Tune's runs, a SIGTERM raises ``Terminated``
    as a Ctrl-C raises ``KeyboardInterrupt``."""

    def __init__(self):
        self.received = threading.Event()
        self.reason: str | None = None  # why the sweep stops, where it is not a signal
        self.signum: int | None = None  # the signal that stopped it: SIGINT or SIGTERM
        self._before: dict = {}
        self._tune_handler = None

    def __getstate__(self):  # Tune keeps its callbacks in its saved state
        return {}

    def __setstate__(self, state):
        self.__init__()

    def setup(self, **info):
        if threading.current_thread() is not threading.main_thread():
            return
        tune_handler = signal.getsignal(signal.SIGINT)
        if not callable(tune_handler):
            return

        def on_interrupt(signum, frame):
            self.signum = self.signum or signal.SIGINT
            self.received.set()
            tune_handler(signum, frame)

        def on_terminate(signum, frame):
            if self.received.is_set():  # stopping already: at once, as a second Ctrl-C
                self.signum = signal.SIGTERM
                raise Terminated()
            self.signum = signal.SIGTERM
            self.received.set()
            tune_handler(signal.SIGINT, frame)

        self._tune_handler = tune_handler
        signal.signal(signal.SIGINT, on_interrupt)
        signal.signal(signal.SIGTERM, on_terminate)

    def request(self, reason: str) -> None:
        """Stop the sweep as a Ctrl-C does, for ``reason`` (the results store keeps failing): Tune
        ends its run, saves its state and leaves the unfinished trials to a resume. Outside a
        Tune run (or off the main thread), the sweep only notes it: nothing more is started."""
        if self.reason is None:
            self.reason = reason
        self.received.set()
        if self._tune_handler is not None:
            try:
                self._tune_handler(signal.SIGINT, None)
            except ValueError:
                # asked off the main thread (the driver lock's lease, sweeps/lock.py): Tune's handler
                # has set its stop event, and only its putting back of a signal handler failed
                pass

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
            signal.signal(signal.SIGTERM, raise_terminated)
        return self

    def __exit__(self, *exc):
        self._tune_handler = None
        for signum, handler in self._before.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        self._before = {}
        return False
