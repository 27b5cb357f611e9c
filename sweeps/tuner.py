"""The Ray Tune wiring: a preset's grid → a Tuner run, or the restore of an interrupted one."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time

os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # we write TensorBoard ourselves
# Short trials checkpoint often; Tune's warning about frequent experiment snapshots is noise here.
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
# A search metric such as test_nll comes only with a trial's final report, not with its progress.
os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")

import ray  # noqa: E402
from ray import tune  # noqa: E402
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback  # noqa: E402

from analysis import storage  # noqa: E402
from sweeps import plan_record, tune_state  # noqa: E402
from sweeps.console import Console, LiveView, StopSignal, TuneOutput  # noqa: E402
from sweeps.data import share_procedural  # noqa: E402
from sweeps.errors import UsageError  # noqa: E402
from sweeps.evaluation import DeferredEvaluations  # noqa: E402
from sweeps.grid import search_space  # noqa: E402
from sweeps.options import Sweep, SweepOptions, TrialRun  # noqa: E402
from sweeps.packing import (  # noqa: E402
    PlannedTrials,
    dirname,
    make_packs,
    members_of,
    outcome_of,
    pack_size_and_reason,
    tune_config,
)
from sweeps.results import ResultsWriter, StorageFailed, read_trials, repair, results_store, retried  # noqa: E402
from sweeps.trainable import train_trial  # noqa: E402


def _gpu_probe(gpus: float) -> dict | None:
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


def _pack_size(options: SweepOptions, trials, gpus: float, cluster_gpus: float) -> int:
    requested = options.pack_size
    if options.search == "optuna" or options.scheduler == "asha":
        return 1  # both decide per trial (checked in plan() for an explicit size)
    probe = _gpu_probe(gpus) if gpus > 0 and cluster_gpus > 0 else None
    logical = probe is not None and not probe["cuda"]
    size, reason = pack_size_and_reason(requested, trials, 0 if logical else gpus,
                                        (probe or {}).get("free_bytes"))
    if logical:
        reason += (" (the GPUs Ray offers here are logical: the GPU node has no CUDA device, so trials "
                   "train on its CPUs)")
    if gpus > 0 or requested not in (None, "auto"):  # the plain CPU path has nothing to explain
        print(f"Pack size {size}: {reason}", flush=True)
    return size


def _existing_local_cluster() -> bool:
    """Whether a Ray cluster already runs on this machine (``ray.init()`` then joins it)."""
    try:
        from ray._private.services import find_gcs_addresses

        return bool(find_gcs_addresses())
    except Exception:  # a private API: if it moves, assume a private local instance
        return False


def _connect(options: SweepOptions) -> bool:
    """Start or join Ray; True if this call started it (and so should stop it). Without --address
    the run gets a private local Ray, even where another Ray already runs on this machine (it says
    so: on a cluster's head node, pass --address auto to use the cluster)."""
    if ray.is_initialized():
        return False
    if not options.address and _existing_local_cluster():
        print("note: a Ray cluster already runs on this machine; starting a private local Ray for this "
              "run (pass --address auto to run on that cluster instead)", flush=True)
    # ray.init puts in its own SIGTERM handler (the driver exits at once, sys.exit(15)); a handler
    # this process had (the command line's: SIGTERM stops the sweep as Ctrl-C does) is put back
    main = threading.current_thread() is threading.main_thread()
    sigterm = signal.getsignal(signal.SIGTERM) if main else None
    try:
        environment = storage.worker_environment()
        runtime_env = {"env_vars": environment} if environment else None
        # The workers' own output reaches this console with --verbose only (a trial's error comes
        # through Tune either way; Ray keeps every worker's output in its session's log files).
        if options.address and options.address != "local":
            ray.init(address=options.address, log_to_driver=options.verbose, runtime_env=runtime_env)
        else:  # a fresh private instance, even where another Ray runs
            ray.init(address="local", num_cpus=options.num_cpus, include_dashboard=False,
                     runtime_env=runtime_env, log_to_driver=options.verbose)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise UsageError(f"could not start or join Ray ({error}); check --address / $RAY_ADDRESS") from None
    finally:
        if callable(sigterm):
            signal.signal(signal.SIGTERM, sigterm)
    return True


def _final_metric_optuna(**kwargs):
    """OptunaSearch fed only the results that hold its metric.

    disgen's metrics (test NLL, D-score…) arrive with a trial's final report; progress reports
    carry loss terms only. Plain OptunaSearch passes every report to Optuna as an intermediate
    value and fails on the first one without the metric."""
    from ray.tune.search.optuna import OptunaSearch

    class FinalMetricOptunaSearch(OptunaSearch):
        def on_trial_result(self, trial_id, result):
            if self.metric in result:
                super().on_trial_result(trial_id, result)

    return FinalMetricOptunaSearch(**kwargs)


def _tune_space(space: dict) -> dict:
    """A validated search space (see sweeps.grid.search_space) as Tune sampling domains."""
    make = {"uniform": tune.uniform, "loguniform": tune.loguniform, "randint": tune.randint}
    return {name: tune.choice(spec["choice"]) if "choice" in spec
            else make[next(iter(spec))](*next(iter(spec.values()))) for name, spec in space.items()}


def _gpus_per_trial(options: SweepOptions) -> float:
    """The GPUs each trial reserves: as asked, or 1 where the cluster has GPUs; refused on a local
    Ray without GPUs."""
    gpus, cluster_gpus = options.gpus_per_trial, ray.cluster_resources().get("GPU", 0)
    if gpus is None:
        gpus = 1.0 if cluster_gpus > 0 else 0.0
    if gpus > 0 and cluster_gpus == 0:
        if not options.address:
            raise UsageError(f"--gpus-per-trial {gpus:g} but this machine's Ray has no GPUs; "
                             "use --gpus-per-trial 0, or join a GPU cluster with --address")
        print(f"warning: --gpus-per-trial {gpus:g} but the cluster has no GPUs yet; trials wait "
              "until the autoscaler adds GPU nodes", flush=True)
    return gpus


def _checkpoint_every(options: SweepOptions, trials) -> int:
    """Steps between checkpoints: as asked, or about five per trial (never under one report)."""
    if options.checkpoint_every is not None:
        return options.checkpoint_every
    every = max(t.evaluation.report_every for t in trials)
    return max(every, trials[0].model.steps // 5)


def _param_space(sweep: Sweep, gpus: float) -> tuple[dict, object, int]:
    """(Tune's param_space, search algorithm, samples): the planned trials, one by one or in packs,
    as a grid search of their trial keys (``tune_config``: Tune writes a trial's config into each of
    its results, so it holds no settings); or for --search optuna, the index of a planned trial to
    pick and the search space."""
    trials = sweep.trials
    if sweep.options.search == "optuna":
        search = sweep.spec["search"]
        space = _tune_space(search_space(sweep.spec, sweep.preset))
        param_space = {"base": tune.choice(list(range(len(trials)))), "sampled": space}
        algorithm = _final_metric_optuna(metric=search["metric"], mode=search["mode"], seed=0)
        return param_space, algorithm, sweep.options.num_samples
    pack_size = sweep.pack_size or _pack_size(sweep.options, trials, gpus,
                                              ray.cluster_resources().get("GPU", 0))
    packs = make_packs(trials, pack_size)
    if pack_size > 1:
        print(f"Packing {len(trials)} trials into {len(packs)} packs of up to {pack_size} "
              "models (one Tune trial each; one row per model)", flush=True)
    return {"members": tune.grid_search([tune_config(pack)["members"] for pack in packs])}, None, 1


def _callbacks(sweep: Sweep, console: Console | None, stop: StopSignal) -> list:
    """The run's Tune callbacks: the results writer first (a model's row is stored before the
    console says it is done), the Ctrl-C watch, the live view unless --verbose, MLflow with
    --mlflow, W&B with --wandb, and Tune's JSON and CSV records of each trial."""
    base, options = sweep.base_trials, sweep.options
    writer = ResultsWriter(sweep.experiment_dir, base, results_store(sweep.experiment_dir), stop)
    callbacks = [writer, stop]
    if console is not None:
        callbacks.append(LiveView(console))
    if options.mlflow:
        from sweeps.tracking import ModelRuns

        callbacks.append(ModelRuns(options.mlflow, sweep.name, base))
    if options.wandb:
        from sweeps.tracking import WandbRuns

        experiment_dir = sweep.experiment_dir  # W&B writes its files there (offline: its runs)
        callbacks.append(WandbRuns(options.wandb.strip(), sweep.name, base,
                                   None if storage.is_remote(experiment_dir) else experiment_dir).check())
    # last: the driver's record of the hashes of Tune's state files, once Tune has written them
    return [*callbacks, JsonLoggerCallback(), CSVLoggerCallback(),
            tune_state.StateRecord(sweep.experiment_dir)]


def _record_tuner_state(tuner: tune.Tuner) -> tune.Tuner:
    """The tuner, once its ``tuner.pkl`` (which it writes to storage itself) is in the driver's record."""
    for callback in tuner._local_tuner.get_run_config().callbacks or ():
        if isinstance(callback, tune_state.StateRecord):
            callback.record_stored("tuner.pkl")
    return tuner


def _tune_verbosity(options: SweepOptions) -> int:
    """Tune's own output: silent, as the live view replaces it; its full output with --verbose."""
    return 1 if options.verbose else 0


def _new_tuner(sweep: Sweep, trainable, gpus: float, remote: bool, console: Console | None,
               stop: StopSignal) -> tune.Tuner:
    param_space, search_alg, num_samples = _param_space(sweep, gpus)
    scheduler = None
    if sweep.options.scheduler == "asha":
        steps = sweep.trials[0].model.steps
        # max_t one past the last step: ASHA stops a trial that reaches max_t, and the progress
        # report of the last step comes before the final report that holds the model's metrics
        scheduler = tune.schedulers.ASHAScheduler(time_attr="step", metric="loss", mode="min",
                                                  max_t=steps + 1, grace_period=max(1, steps // 8),
                                                  reduction_factor=3)
    base = sweep.base_trials
    name = lambda trial: dirname(members_of(trial.config, base))  # disgen's model or pack name
    return _record_tuner_state(tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tune.TuneConfig(
            reuse_actors=True,
            max_concurrent_trials=sweep.options.max_concurrent_trials,
            trial_name_creator=name,
            trial_dirname_creator=name,
            search_alg=search_alg,
            num_samples=num_samples,
            scheduler=scheduler,
        ),
        run_config=tune.RunConfig(
            name=sweep.name,
            storage_path=sweep.storage,
            callbacks=_callbacks(sweep, console, stop),
            failure_config=tune.FailureConfig(max_failures=sweep.options.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            sync_config=tune.SyncConfig(sync_artifacts=remote),
            verbose=_tune_verbosity(sweep.options),
        ),
    ))


def _trainable(sweep: Sweep, gpus: float, remote: bool):
    # Local storage: TensorBoard files go straight to the trial folders, live. Remote storage:
    # into each trial's working folder, which Tune syncs to the store (sync_artifacts). The
    # datasets travel as references (a few hundred bytes each); each node caches the data once.
    options = sweep.options
    run_info = TrialRun(
        experiment_dir=sweep.experiment_dir,
        tensorboard_root=None if remote else sweep.experiment_dir,
        cpus_per_trial=options.cpus_per_trial,
        gpus_per_trial=gpus,
        checkpoint_every=_checkpoint_every(options, sweep.trials),
        checkpoint_seconds=60.0 * options.checkpoint_minutes,
        verbose=options.verbose,
        # what the Tune trials' configs name (their members' keys, or Optuna's planned trial):
        # sent once, with the trainable's parameters, never in a trial's config
        base_trials=sweep.base_trials,
        datasets=sweep.data,
        # a trial that holds a GPU frees it for the next as soon as its models are trained, and the
        # driver evaluates them in CPU-only tasks (sweeps/evaluation.py); but Optuna learns from each
        # trial's metrics, which it must then report itself
        deferred_evaluation=gpus > 0 and options.search == "grid")
    return tune.with_resources(
        tune.with_parameters(train_trial, run_info=run_info),
        {"cpu": options.cpus_per_trial, "gpu": gpus},
    )


# Tune's error when a trial's recorded checkpoint is gone. disgen's in-training checkpoints are
# its own, never Tune's (sweeps/checkpoints.py), so only an experiment started by an older disgen,
# whose driver died after Tune deleted a checkpoint and before it saved its state, meets it: its
# trial runs again as a new Tune trial in its folder, going on from the newest checkpoint there
# (sweeps.checkpoints.newest_checkpoint).
LOST_CHECKPOINT = "Could not recover from checkpoint"


def _keys_of(grid, base) -> set[str]:
    """The trial keys a Tune experiment's trials hold (its ResultGrid), less those that could not
    be restored because their checkpoint is gone: those run again, from their newest checkpoint on
    storage."""
    return {member.trial_key for result in grid if result.config
            and not (result.error and LOST_CHECKPOINT in str(result.error))
            for member in members_of(result.config, base)}


def _resumed_tuner(sweep: Sweep, trainable, console: Console | None, stop: StopSignal) -> tune.Tuner:
    """Tune's restore of the experiment's run, with this command line's callbacks and verbosity.
    Tune keeps the first run's RunConfig in its saved state; a restore would use those (a live view
    with no console, the first run's --mlflow and --verbose). ``get_run_config`` is Tune's own
    accessor of the restored RunConfig (Ray 2.60's TunerInternal; ray is pinned to 2.60). Before
    Tune unpickles anything, its state files are checked against the driver's record
    (``sweeps.tune_state.check``): a resume whose state something else wrote is refused."""
    tune_state.check(sweep.experiment_dir)
    tuner = tune.Tuner.restore(sweep.experiment_dir, trainable=trainable, resume_errored=True)
    run_config = tuner._local_tuner.get_run_config()
    run_config.callbacks = _callbacks(sweep, console, stop)
    run_config.verbose = _tune_verbosity(sweep.options)
    return _record_tuner_state(tuner)


def _resume_tune_run(sweep: Sweep, trainable, console: Console | None,
                     stop: StopSignal) -> tuple[int, set[str]]:
    """Resume the experiment's Tune run; (failed trials, trial keys it holds). Finished trials whose
    rows never landed (a driver killed while writing them) are written now; trials that trained but
    whose models were never evaluated (a driver killed while their evaluations ran) have them
    evaluated from their final checkpoints, beside the restored run's training."""
    base = sweep.base_trials  # holds every trial of the restored run (plan_record.check_resume)
    experiment_dir = sweep.experiment_dir
    print(f"Resuming {experiment_dir}", flush=True)
    store, evaluations = results_store(experiment_dir), DeferredEvaluations.of(experiment_dir)
    tuner = _resumed_tuner(sweep, trainable, console, stop)
    try:
        before = list(tuner.get_results())
    except RuntimeError:  # Tune could not read its results back: the repair after the run covers them
        before = []
    _repair(store, before, base, evaluations, stop)
    if stop.received.is_set():  # the store keeps failing: nothing runs until it is healthy
        return 0, set()
    if len(evaluations):
        print(f"Evaluating {len(evaluations)} trained models whose evaluation had not ended", flush=True)
    grid = tuner.fit()
    repaired = _repair(store, grid, base, evaluations, stop)
    if repaired:
        print(f"Stored {repaired} finished trials whose rows were missing", flush=True)
    lost = sum(1 for result in grid if result.error and LOST_CHECKPOINT in str(result.error))
    if lost:
        print(f"{lost} trials could not be restored from the checkpoint Tune recorded (deleted after a "
              "newer one registered); running them again from their newest checkpoint", flush=True)
    return grid.num_errors - lost, _keys_of(grid, base)


def _repair(store, results, base: PlannedTrials, evaluations: DeferredEvaluations, stop: StopSignal) -> int:
    """``repair`` of Tune's ``results`` (their members' settings from the plan, ``base``), its
    writes ``retried``; where they keep failing, the sweep stops (``stop``) and the next resume
    repairs them."""
    if stop.reason is not None:
        return 0
    finals = [outcome_of(r.metrics, r.config or {}, base) for r in results]
    try:
        return retried(lambda: repair(store, finals, [r.checkpoint for r in results], evaluations),
                       f"storing the finished trials of {store.experiment}")
    except StorageFailed as error:
        print(f"error: {error}; stopping (--resume stores them)", flush=True)
        stop.request(f"the results could not be written to {store.experiment} ({error})")
        return 0


def _finish_evaluations(experiment_dir: str, base, stop: StopSignal) -> int:
    """Wait for the evaluations still running and commit each trial as it ends; the evaluations
    that failed. Interrupted (a second Ctrl-C), the rest are left to --resume."""
    evaluations = DeferredEvaluations.of(experiment_dir)
    if len(evaluations):
        print(f"Waiting for {len(evaluations)} evaluations on CPUs to end (interrupt to leave them to "
              "--resume)", flush=True)
    ResultsWriter(experiment_dir, base, results_store(experiment_dir), stop).collect(wait=True)
    return evaluations.failed


def _to_run(sweep: Sweep, covered: set[str]) -> tuple:
    """The planned trials that no Tune run holds and that have no finished row: all of them for a
    new experiment; for a resume, the ones an extension adds, those of an earlier Tune run of an
    extended experiment (a restore reads the newest run's state only) and those of a run killed
    before Tune saved state. Each goes on from its newest checkpoint on storage, if it has one."""
    finished = results_store(sweep.experiment_dir).keys
    return tuple(t for t in sweep.trials if t.trial_key not in covered and t.trial_key not in finished)


def run_sweep(sweep: Sweep, stop: StopSignal | None = None) -> dict:
    """Run, resume or extend the planned sweep on Ray; returns the finished rows and the failure count.
    ``stop``: the sweep's stop signal (a Ctrl-C, or ``request`` from the driver lock's lease, which
    another driver took), else a new one.

    Resume: Tune's own restore continues the experiment's trials from their checkpoints. Then the
    planned trials that no Tune run holds (an extension's new ones) run as a new Tune run in the
    same folder. plan.json is written before a run starts."""
    options, experiment_dir = sweep.options, sweep.experiment_dir
    resuming = options.resume and tune.Tuner.can_restore(experiment_dir)
    if options.resume and not resuming and options.search != "grid":
        raise UsageError(f"{experiment_dir} holds results but no Tune state to resume from; "
                         "start a new experiment with --name NEW")
    started_ray = _connect(options)
    started = time.perf_counter()
    failed, covered, stop = 0, set(), stop or StopSignal()
    store = results_store(experiment_dir, fresh=True)  # the stored trial keys, read once
    DeferredEvaluations.of(experiment_dir, fresh=True)
    try:
        gpus = _gpus_per_trial(options)
        if not resuming and options.search == "grid":  # a --pack-size that does not fit: refused before
            # anything is written or any trial runs (a resumed run's packs are in Tune's state)
            sweep = dataclasses.replace(sweep, pack_size=_pack_size(options, sweep.trials, gpus,
                                                                    ray.cluster_resources().get("GPU", 0)))
        if sweep.shared_dir:  # procedural data rendered once to shared storage, by Ray Data
            sweep = dataclasses.replace(sweep, data=share_procedural(sweep.data, sweep.shared_dir))
        console = None if options.verbose else Console(
            sweep.name, sweep.trials, store.keys, base_trials=sweep.base_trials,
            samples=options.num_samples if options.search == "optuna" else None, gpus=gpus)
        remote = storage.is_remote(experiment_dir)
        trainable = _trainable(sweep, gpus, remote)
        filesystem, inner = storage.resolve(experiment_dir)
        filesystem.create_dir(inner, recursive=True)
        with TuneOutput(options.verbose, stop), stop:
            if resuming:
                failed, covered = _resume_tune_run(sweep, trainable, console, stop)
            new = _to_run(sweep, covered) if options.search == "grid" else (() if resuming else sweep.trials)
            if new and not stop.received.is_set():
                if resuming:
                    print(f"Extending {experiment_dir} with {len(new)} new trials", flush=True)
                plan_record.write(experiment_dir, sweep.record)
                to_tune = dataclasses.replace(sweep, trials=new) if options.search == "grid" else sweep
                tuner = _new_tuner(to_tune, trainable, gpus, remote, console, stop)
                failed += tuner.fit().num_errors
            elif not resuming:
                plan_record.write(experiment_dir, sweep.record)
            if not stop.received.is_set():
                failed += _finish_evaluations(experiment_dir, sweep.base_trials, stop)
    finally:
        if started_ray:
            ray.shutdown()
    try:
        # every part, folded into the two files; not after a write that kept failing: the parts
        # stay (they read the same), with the history of trials whose rows the resume stores
        if stop.reason is None:
            retried(store.compact, f"compacting the results of {experiment_dir}")
        trials = read_trials(experiment_dir)  # every model's row: finished, failed or stopped
    except (StorageFailed, OSError) as error:
        print(f"error: {error}; the results stay as parts (they read the same), and --resume compacts "
              "them", flush=True)
        stop.request(f"the results could not be compacted in {experiment_dir} ({error})")
        trials = None
    finished = None if trials is None else int((trials["status"] == "finished").sum())
    return {"finished": finished, "failed": failed, "trials": trials, "interrupted": stop.received.is_set(),
            "stopped_by": stop.reason, "signal": stop.signum, "seconds": time.perf_counter() - started}
