"""The driver: a planned sweep run on Ray, start to finish. What is left to run comes from the plan and the
results, never from Tune's saved state, so a new run, a resume and an extension are one path."""

from __future__ import annotations

import dataclasses
import time

from analysis import storage
from analysis.storage import ResultsStore
from sweeps import plan_record, ray_edge
from sweeps.console import Console, LiveView
from sweeps.errors import StopSignal, UsageError
from sweeps.evaluation import DeferredEvaluations
from sweeps.lock import LeaseLost
from sweeps.options import Sweep, SweepOptions, TrialRun
from sweeps.packing import dirname, members_of
from sweeps.results import ResultsWriter, StorageFailed, read_trials, retried


@dataclasses.dataclass(frozen=True)
class SweepSummary:
    """What a run left: every model's row (None where unreadable), the failed Tune trials, seconds, stop."""
    trials: object
    failed: int
    seconds: float
    stop: StopSignal

    @property
    def finished(self) -> int | None:
        return None if self.trials is None else int((self.trials["status"] == "finished").sum())

    @property
    def interrupted(self) -> bool:
        return self.stop.received.is_set()


def run(sweep: Sweep, stop: StopSignal | None = None, fence=None) -> SweepSummary:
    """Run what is left of ``sweep`` on Ray; ``stop``: a Ctrl-C, or the lock's lease lost; ``fence``:
    the lock's check before each results write (``ExperimentLock.fence``)."""
    stop, started, failed = stop or StopSignal(), time.perf_counter(), 0
    store = ResultsStore(sweep.experiment_dir, fence=fence)  # the stored rows, read once
    options = sweep.options
    with ray_edge.connected(options.address, options.num_cpus, options.verbose,
                            storage.worker_environment()) as cluster, stop:
        sweep = ready(sweep, cluster)
        work = sweep.search.work(sweep, store.statuses)
        announce(sweep, store, work)
        plan_record.write(sweep.experiment_dir, {**sweep.record, "pack_size": sweep.pack_size,
                                                 "packs": packs_of(work)})
        evaluations = DeferredEvaluations(sweep.experiment_dir, cluster.tasks)
        writer = ResultsWriter(store, sweep.base_trials, stop, evaluations)
        if work is not None and not stop.received.is_set():
            failed = ray_edge.fit(tune_run(sweep, work), listeners(sweep, writer, store), stop)
        if not stop.received.is_set():
            failed += finish_evaluations(writer, evaluations)
    return SweepSummary(compacted(store, stop), failed, time.perf_counter() - started, stop)


def gpus_per_trial(options: SweepOptions, cluster_gpus: float) -> float:
    """The GPUs per trial: as asked, else 1 where the cluster has GPUs; refused on a local Ray without."""
    gpus = options.gpus_per_trial
    if gpus is None:
        gpus = 1.0 if cluster_gpus > 0 else 0.0
    if gpus > 0 and cluster_gpus == 0:
        if not options.address:
            raise UsageError(f"--gpus-per-trial {gpus:g} but this machine's Ray has no GPUs; "
                             "use --gpus-per-trial 0, or join a GPU cluster with --address")
        print(f"warning: --gpus-per-trial {gpus:g} but the cluster has no GPUs yet; trials wait "
              "until the autoscaler adds GPU nodes", flush=True)
    return gpus


def ready(sweep: Sweep, cluster) -> Sweep:
    """The sweep with its GPUs, pack size and packs (a resume keeps its own: checkpoints match) and
    shared data."""
    gpus = gpus_per_trial(sweep.options, cluster.gpus())
    stored = (plan_record.read(sweep.experiment_dir) or {}) if sweep.options.resume else {}
    size = stored.get("pack_size") or pack_size(sweep, gpus, cluster)
    if sweep.shared_dir:  # procedural data rendered once to shared storage, by Ray Data
        from sweeps.data import share_procedural
        sweep = dataclasses.replace(sweep, data=share_procedural(sweep.data, sweep.shared_dir))
    kept = tuple(tuple(pack) for pack in stored.get("packs", ()))
    return dataclasses.replace(sweep, gpus=gpus, pack_size=size, kept_packs=kept)


def pack_size(sweep: Sweep, gpus: float, cluster) -> int:
    """The pack size, measured on a GPU node where trials hold GPUs, and why, where that needs saying."""
    requested = sweep.options.pack_size
    if sweep.options.scheduler == "asha":
        return 1  # ASHA decides trial by trial (an explicit size > 1 is refused by the options)
    probe = cluster.probe_gpu(gpus) if gpus > 0 and cluster.gpus() > 0 else None
    logical = probe is not None and not probe["cuda"]
    size, reason = sweep.search.pack_size(requested, sweep.trials, 0 if logical else gpus,
                                          (probe or {}).get("free_bytes"))
    if logical:
        reason += (" (the GPUs Ray offers here are logical: the GPU node has no CUDA device, so trials "
                   "train on its CPUs)")
    if gpus > 0 or requested not in (None, "auto"):  # the plain CPU path has nothing to explain
        print(f"Pack size {size}: {reason}", flush=True)
    return size


def packs_of(work) -> list[list[str]]:
    """The packs this run trains, by their members' keys, for plan.json: a resume keeps them."""
    return [config["members"] for config in getattr(work, "configs", ()) if len(config["members"]) > 1]


def announce(sweep: Sweep, store: ResultsStore, work) -> None:
    """A resumed or extended experiment says so, and how much of it is stored; packs say so."""
    packs = getattr(work, "configs", ())
    if sweep.pack_size > 1 and packs:
        trials = sum(len(config["members"]) for config in packs)
        print(f"Packing {trials} trials into {len(packs)} packs of up to {sweep.pack_size} models (one Tune "
              "trial each; one row per model)", flush=True)
    if sweep.added:
        print(f"Extending {sweep.experiment_dir} with {len(sweep.added)} new trials", flush=True)
    elif sweep.options.resume:
        left = "nothing left to run" if work is None else "running the rest"
        print(f"Resuming {sweep.experiment_dir}: {len(store.keys)} of {sweep.planned} models stored; {left}",
              flush=True)


def checkpoint_every(sweep: Sweep) -> int:
    """Steps between checkpoints: as asked, or about five per trial (never under one report)."""
    if sweep.options.checkpoint_every is not None:
        return sweep.options.checkpoint_every
    every = max(t.evaluation.report_every for t in sweep.trials)
    return max(every, sweep.trials[0].model.steps // 5)


def tune_run(sweep: Sweep, work) -> ray_edge.TuneRun:
    """The Tune run of ``work`` (TensorBoard files straight to the trial folders where storage is local)."""
    options, base, remote = sweep.options, sweep.base_trials, storage.is_remote(sweep.experiment_dir)
    run_info = TrialRun(
        experiment_dir=sweep.experiment_dir, tensorboard_root=None if remote else sweep.experiment_dir,
        cpus_per_trial=options.cpus_per_trial, gpus_per_trial=sweep.gpus,
        checkpoint_every=checkpoint_every(sweep), checkpoint_seconds=60.0 * options.checkpoint_minutes,
        verbose=options.verbose, base_trials=base, datasets=sweep.data,
        deferred_evaluation=sweep.search.defers_evaluation(sweep.gpus))
    return ray_edge.TuneRun(
        name=sweep.name, storage=sweep.storage, run_info=run_info, cpus=options.cpus_per_trial,
        gpus=sweep.gpus, work=work, trial_name=lambda config: dirname(members_of(config, base)),
        asha_steps=sweep.trials[0].model.steps if options.scheduler == "asha" else None,
        max_concurrent=options.max_concurrent_trials, max_failures=options.max_failures,
        verbose=options.verbose, sync_artifacts=remote, callbacks=tuple(trackers(sweep)))


def listeners(sweep: Sweep, writer: ResultsWriter, store: ResultsStore) -> list:
    """The trial events' listeners: the results writer first, the search's, the live view (not --verbose)."""
    found = [writer, *sweep.search.listeners(sweep)]
    if not sweep.options.verbose:
        console = Console(sweep.name, sweep.trials, store.keys, base_trials=sweep.base_trials,
                          models=sweep.planned, gpus=sweep.gpus)
        found.append(LiveView(console, writer.stop))
    return found


def trackers(sweep: Sweep) -> list:
    """MLflow with --mlflow, W&B with --wandb (Tune's logger callbacks: ``sweeps.tracking``)."""
    found, options = [], sweep.options
    if options.mlflow:
        from sweeps.tracking import ModelRuns
        found.append(ModelRuns(options.mlflow, sweep.name, sweep.base_trials))
    if options.wandb:
        from sweeps.tracking import WandbRuns
        local = None if storage.is_remote(sweep.experiment_dir) else sweep.experiment_dir  # W&B's files
        found.append(WandbRuns(options.wandb.strip(), sweep.name, sweep.base_trials, local).check())
    return found


def finish_evaluations(writer: ResultsWriter, evaluations: DeferredEvaluations) -> int:
    """Wait for the running evaluations, committing each trial as it ends; the evaluations that failed."""
    if len(evaluations):
        print(f"Waiting for {len(evaluations)} evaluations on CPUs to end (interrupt to leave them to "
              "--resume)", flush=True)
    writer.collect(wait=True)
    return evaluations.failed


def compacted(store: ResultsStore, stop: StopSignal):
    """Every model's row, the parts folded in (not after a write kept failing: they stay for --resume)."""
    try:
        if stop.reason is None:
            retried(store.compact, f"compacting the results of {store.experiment}")
        return read_trials(store.experiment)
    except (StorageFailed, OSError, LeaseLost) as error:
        print(f"error: {error}; the results stay as parts (they read the same), and --resume compacts "
              "them", flush=True)
        stop.request(f"the results could not be compacted in {store.experiment} ({error})")
        return None
