"""The Ray Tune wiring: a preset's grid → a Tuner run, or the restore of an interrupted one."""

from __future__ import annotations

import os
import time

os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # we write TensorBoard ourselves
# Short trials checkpoint often; Tune's warning about frequent experiment snapshots is noise here.
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
# A search metric such as test_nll comes only with a trial's final report, not with its progress.
os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")

import ray  # noqa: E402
from ray import tune  # noqa: E402
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback  # noqa: E402

from sweeps import storage  # noqa: E402
from sweeps.errors import UsageError  # noqa: E402
from sweeps.grid import complete_config, grid_axes, search_space, trial_dirname  # noqa: E402
from sweeps.packing import is_pack, make_packs, pack_dirname, resolve_pack_size  # noqa: E402
from sweeps.results import ResultsWriter, read_trials  # noqa: E402
from sweeps.trainable import train_trial  # noqa: E402


def _dirname(trial) -> str:
    if is_pack(trial.config):
        return pack_dirname(trial.config["pack"])
    return trial_dirname(complete_config(trial.config))


def _gpu_free_bytes(gpus: float) -> int | None:
    """Free memory of the GPU a trial gets, asked of a GPU node (None if none answers soon)."""

    @ray.remote(num_gpus=gpus)
    def free_bytes() -> int:
        import torch

        return int(torch.cuda.mem_get_info()[0])

    try:
        return ray.get(free_bytes.remote(), timeout=120)
    except Exception:  # no GPU node up yet (an autoscaling cluster): the caller assumes a size
        return None


def _pack_size(args, configs: list[dict], gpus: float, cluster_gpus: float) -> int:
    requested = getattr(args, "pack_size", "auto")
    if args.search == "optuna" or args.scheduler == "asha":
        return 1  # both decide per trial (checked in plan() for an explicit size)
    free = _gpu_free_bytes(gpus) if gpus > 0 and cluster_gpus > 0 else None
    return resolve_pack_size(requested, configs, gpus, free)


def _existing_local_cluster() -> bool:
    """Whether a Ray cluster already runs on this machine (``ray.init()`` then joins it)."""
    try:
        from ray._private.services import find_gcs_addresses

        return bool(find_gcs_addresses())
    except Exception:  # a private API: if it moves, assume a private local instance
        return False


def _connect(args) -> bool:
    """Start or join Ray; True if this call started it (and so should stop it)."""
    if ray.is_initialized():
        return False
    if not args.address and _existing_local_cluster():
        args.address = "auto"  # e.g. on a cluster's head node: join it rather than start another
    try:
        environment = storage.worker_environment()
        runtime_env = {"env_vars": environment} if environment else None
        if args.address == "local":  # a fresh private instance, even where another Ray runs
            ray.init(address="local", num_cpus=args.num_cpus, include_dashboard=False,
                     runtime_env=runtime_env)
        elif args.address:
            ray.init(address=args.address, log_to_driver=True, runtime_env=runtime_env)
        else:
            ray.init(num_cpus=args.num_cpus, include_dashboard=False, runtime_env=runtime_env)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise UsageError(f"could not start or join Ray ({error}); check --address / $RAY_ADDRESS") from None
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


def run_sweep(args, plan: dict) -> dict:
    experiment_dir, configs = plan["experiment_dir"], plan["configs"]
    restoring = args.resume and tune.Tuner.can_restore(experiment_dir)
    if args.resume and not restoring:
        raise UsageError(f"{experiment_dir} holds results but no Tune state to resume from; "
                         "start a new experiment with --name NEW")

    started_ray = _connect(args)
    started = time.perf_counter()
    try:
        gpus, cluster_gpus = args.gpus_per_trial, ray.cluster_resources().get("GPU", 0)
        if gpus is None:
            gpus = 1.0 if cluster_gpus > 0 else 0.0
        if gpus > 0 and cluster_gpus == 0:
            if not args.address:
                raise UsageError(f"--gpus-per-trial {gpus:g} but this machine's Ray has no GPUs; "
                                 "use --gpus-per-trial 0, or join a GPU cluster with --address")
            print(f"warning: --gpus-per-trial {gpus:g} but the cluster has no GPUs yet; trials wait "
                  "until the autoscaler adds GPU nodes", flush=True)
        datasets = plan["datasets"]
        steps = configs[0]["steps"]
        checkpoint_every = args.checkpoint_every or max(config["report_every"] for config in configs)
        if args.checkpoint_every is None:
            checkpoint_every = max(checkpoint_every, steps // 5)
        # Local storage: TensorBoard files go straight to the trial folders, live. Remote storage:
        # into each trial's working folder, which Tune syncs to the store (sync_artifacts).
        remote = storage.is_remote(experiment_dir)
        run_info = {"tensorboard_root": None if remote else experiment_dir,
                    "cpus_per_trial": args.cpus_per_trial,
                    "checkpoint_every": checkpoint_every}
        trainable = tune.with_resources(
            tune.with_parameters(train_trial, datasets=datasets, run_info=run_info),
            {"cpu": args.cpus_per_trial, "gpu": gpus},
        )
        filesystem, inner = storage.resolve(experiment_dir)
        filesystem.create_dir(inner, recursive=True)
        if restoring:
            print(f"Resuming {experiment_dir}", flush=True)
            tuner = tune.Tuner.restore(experiment_dir, trainable=trainable, resume_errored=True)
        else:
            fixed, axes = grid_axes(plan["spec"], plan["preset"], args.scale, plan["seeds"])
            search_alg, num_samples = None, 1
            if args.search == "optuna":
                search = plan["spec"]["search"]
                space = _tune_space(search_space(plan["spec"], plan["preset"]))
                param_space = {**fixed, **{name: tune.choice(values) for name, values in axes.items()
                                           if name not in space}, **space}
                search_alg = _final_metric_optuna(metric=search["metric"], mode=search["mode"], seed=0)
                num_samples = args.num_samples
            else:
                pack_size = _pack_size(args, configs, gpus, cluster_gpus)
                if pack_size > 1:
                    packs = make_packs(configs, pack_size)
                    print(f"Packing {len(configs)} trials into {len(packs)} packs of up to {pack_size} "
                          "models (one Tune trial each; one row per model)", flush=True)
                    param_space = {"pack": tune.grid_search(packs)}
                else:
                    param_space = {**fixed, **{name: tune.grid_search(values)
                                               for name, values in axes.items()}}
            scheduler = None
            if args.scheduler == "asha":
                scheduler = tune.schedulers.ASHAScheduler(
                    time_attr="step", metric="loss", mode="min", max_t=steps,
                    grace_period=max(1, steps // 8), reduction_factor=3)
            tuner = tune.Tuner(
                trainable,
                param_space=param_space,
                tune_config=tune.TuneConfig(
                    reuse_actors=True,
                    max_concurrent_trials=args.max_concurrent_trials,
                    trial_dirname_creator=_dirname,
                    search_alg=search_alg,
                    num_samples=num_samples,
                    scheduler=scheduler,
                ),
                run_config=tune.RunConfig(
                    name=plan["name"],
                    storage_path=plan["storage"],
                    callbacks=[ResultsWriter(experiment_dir), JsonLoggerCallback(), CSVLoggerCallback()],
                    failure_config=tune.FailureConfig(max_failures=args.max_failures),
                    checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
                    sync_config=tune.SyncConfig(sync_artifacts=remote),
                    verbose=1,
                ),
            )
        results = tuner.fit()
        failed = results.num_errors
    finally:
        if started_ray:
            ray.shutdown()
    trials = read_trials(experiment_dir)
    return {"finished": len(trials), "failed": failed, "trials": trials,
            "seconds": time.perf_counter() - started}
