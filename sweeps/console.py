"""The sweep's console, in place of Tune's own output: a progress table of the running models under a status
line with the sweep's ETA, and a line per finished, failed or stopped model (docs/sweeps.md, "What you see
while it runs"). The ETA is the work left (``sweeps/costs.py``) at the rate measured since the run's first
trial started, a running model counted less the share of its time evaluation takes."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence

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
    return ",".join(text) if len(text) <= 2 else f"{text[0]}–{text[-1]}"


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
    """The live view's state: the planned models, those done, and each running Tune trial's last report."""

    def __init__(self, name: str, planned: Sequence[TrialConfig], finished_keys=(), base_trials=(),
                 models: int | None = None, gpus: float = 0.0, stream=None, clock=time.monotonic):
        # what the Tune trials' configs name: the planned trials (Optuna's base), by key
        self.name, self.base_trials, self.gpus = name, as_planned_trials(base_trials or planned), gpus
        self.stream, self.clock = stream, clock
        self.work = {t.trial_key: _work(t) for t in planned}
        # how many models the sweep has: the planned ones, or as many as Optuna samples from them
        self.models = models if models is not None else len(planned)
        self.mean_work = sum(self.work.values()) / max(1, len(self.work))  # a sampled model's, not planned
        self.total_work = self.mean_work * self.models
        self.done_before = set(finished_keys)
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
        left = self.total_work - sum(self.work.get(k, self.mean_work) for k in self.done)
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
        if trial.trial_id not in self.latest:  # a trial that went on from a checkpoint counts what is new
            resumed_at = {**result, "step": result.get("resumed_at", 0)}
            self.baseline[trial.trial_id] = self._fraction(trial, resumed_at)
            self.trials = [t for t in self.trials if t.trial_id != trial.trial_id] + [trial]
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
        for member in self.members(trial):
            self.failed.add(member.trial_key)
        self.print(f"{self.stamp()} FAILED {dirname(self.members(trial))}: "
                   f"{trial.error or 'its error is in errors-parts/ (analysis.load_errors)'}")

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
        """The mean share of a model's time its evaluation took, over this run's finished models."""
        shares = [e / (t + e) for t, e in self.timings if t + e > 0]
        return sum(shares) / len(shares) if shares else 0.0

    def progress(self) -> tuple[float, float]:
        """(work done in all, work done since this run started): a running model counts the share of its
        steps done (since first seen, for the second), less the share its evaluation takes."""
        finished = sum(self.work.get(k, self.mean_work) for k in self.done)
        since = finished - sum(self.work.get(k, self.mean_work) for k in self.done_before)
        trained = 1.0 - self.evaluation_share()
        for trial in self.running():
            work = sum(self.work.get(m.trial_key) or _work(m) for m in self.members(trial)) * trained
            fraction = self._fraction(trial, self.latest[trial.trial_id])
            finished += work * fraction
            since += work * max(0.0, fraction - self.baseline.get(trial.trial_id, 0.0))
        return finished, since

    def eta(self) -> str:
        """The time the work left takes at the rate measured since this run's first trial started."""
        elapsed = self.clock() - (self.started if self.first_start is None else self.first_start)
        finished, since = self.progress()
        if since <= 0 or elapsed <= 0:
            return "ETA after the first reports"
        return f"ETA {duration(max(0.0, self.total_work - finished) / (since / elapsed))}"

    def table(self, force: bool = False) -> None:
        """The status line and the running models' rows, if ``force`` or the interval has passed."""
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


class LiveView:
    """The sweep's trial events, handed to its ``Console`` (none said done once results cannot be written)."""

    def __init__(self, console: Console, stop=None):
        self.console, self.stop = console, stop

    def announce(self) -> None:
        self.console.announce()

    def started(self, trial) -> None:
        self.console.trial_started()

    def progress(self, trial, result: dict) -> None:
        self.console.result(trial, result)

    def completed(self, trial) -> None:
        if self.stop is None or self.stop.reason is None:
            self.console.complete(trial)

    def failed(self, trial) -> None:
        self.console.error(trial)

    def step(self, trials) -> None:
        self.console.step(trials)
