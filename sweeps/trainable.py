"""The Ray Tune trainable: the only place that touches Ray's trial API.

One call trains one model, or one pack of models (``sweeps.packing``): data from
``data_pipeline`` (the trial is handed a dataset reference, which this node's cache materialises
once and memory-maps: ``data_pipeline.node_cache``), the models and their training loop from
``models`` (``PackedTrainer``, which
for one model is the plain ``Trainer`` loop), evaluation from ``analysis``. It reports loss terms
as it goes, writes each model's TensorBoard scalars and reconstruction grids, and checkpoints so a
failed trial resumes where it stopped. At the end it writes its models' loss history itself, as
one history part in the experiment's storage (``analysis/storage.py``), and then makes one report
of scalars: the final metrics of the model, or of each member of the pack under ``members``, and
the part's name (``results_part``), which the driver's results writer commits. Loss histories
never travel through Tune.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence

import numpy as np
import ray
import torch
from ray import tune
from torch.utils.tensorboard import SummaryWriter

from analysis import storage
from analysis.task_evaluation import evaluate_task
from analysis.tiles import reconstruction_grid
from data_pipeline.node_cache import open_reference
from data_pipeline.splits import get_split
from models import NonFiniteLossError, reconstruct
from models import checkpoint as trainer_file
from models.packed import PackedTrainer
from sweeps.console import quiet_worker
from sweeps.packing import members_of
from sweeps.provenance import provenance
from sweeps.results import history_rows
from sweeps.trials import TrialConfig

N_GRID_IMAGES = 8


class _ModelLog:
    """One model's TensorBoard folder, the training and held-out images its grids show, and its
    loss history."""

    def __init__(self, trial: TrialConfig, data, train_rows, test_rows, log_dir: str, total_steps: int):
        self.trial, self.data, self.history = trial, data, []
        self.log_dir, self._writer = log_dir, None
        # The first step this worker writes (set on a restore): TensorBoard drops what an earlier worker
        # wrote from that step on, so a resumed model's curves do not double back.
        self.purge_step = 1
        rng = np.random.default_rng(trial.model.seed)
        self.shown = {side: np.sort(rng.choice(rows, min(N_GRID_IMAGES, len(rows)), replace=False))
                      for side, rows in (("train", train_rows), ("test", test_rows))}
        # reconstructions of the same training images about five times during training, then at the end
        self.image_every = max(1, total_steps // trial.evaluation.report_every // 5)
        self.total_steps = total_steps

    @property
    def writer(self) -> SummaryWriter:
        """The model's TensorBoard writer, opened at the first event (after a restore has set
        ``purge_step``)."""
        if self._writer is None:
            self._writer = SummaryWriter(self.log_dir, purge_step=self.purge_step)
        return self._writer

    def reconstructions(self, model, side: str, step: int) -> None:
        rows = self.shown[side]
        # the ground-truth decoder has no encoder, and CompositionNet's reconstruction skips its latent op
        if len(rows) and self.trial.model.task == "vae":
            originals = self.data.images[rows]
            grid = reconstruction_grid(originals, reconstruct(model, originals))
            self.writer.add_image(f"reconstructions/{side}", grid, step)

    def progress(self, report: dict, model) -> None:
        step = report["step"]
        self.history.append(report)
        for name, value in report.items():
            if name != "step":
                self.writer.add_scalar(f"train/{name}", value, step)
        if len(self.history) % self.image_every == 0 and step < self.total_steps:  # the last comes at the end
            self.reconstructions(model, "train", step)

    def final(self, model, step: int, metrics: dict) -> None:
        for side in self.shown:
            self.reconstructions(model, side, step)
        metrics = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}  # not the names
        for name, value in metrics.items():
            self.writer.add_scalar(f"eval/{name}", value, step)
        hparams = {k: v for k, v in self.trial.items() if isinstance(v, (int, float, str, bool))}
        self.writer.add_hparams(hparams, {f"hparam/{k}": v for k, v in metrics.items()}, run_name=".",
                                global_step=step)
        self.writer.close()


def _evaluate(trainer, data, split, trial: TrialConfig, cpus: float) -> dict:
    evaluation = trial.evaluation
    started = time.perf_counter()
    metrics = evaluate_task(trainer, data, split, n_nll=evaluation.n_nll, seed=trial.model.seed,
                            n_metric=evaluation.n_metric, n_jobs=max(1, int(cpus)),
                            dci_estimator=None if evaluation.dci_estimator == "none"
                            else evaluation.dci_estimator, transfer_factor=evaluation.transfer_factor,
                            transfer_regressors=evaluation.transfer_regressors,
                            **({"metrics": evaluation.metrics} if evaluation.metrics is not None else {}))
    metrics["eval_seconds"] = time.perf_counter() - started
    return metrics


def _pack_progress(reports: dict[int, dict], members: int) -> dict:
    """One progress report for Tune: the model's own, or for a pack the least advanced member's
    step and the members' mean of each term."""
    if members == 1:
        return next(iter(reports.values()))
    fine = [r for r in reports.values() if "error" not in r]
    names = {n for r in fine for n in r if n not in ("step", "images_per_second")}
    out = {"step": min(r["step"] for r in reports.values()), "members_reporting": len(fine)}
    out.update({n: float(np.mean([r[n] for r in fine if n in r])) for n in names})
    out["images_per_second"] = float(sum(r.get("images_per_second", 0.0) for r in fine))
    return out


def _dataset(first: TrialConfig, references: dict):
    """The trial's images: its dataset reference materialised in this node's cache (once per node)
    and memory-mapped, its ``n_images`` rows chosen by index."""
    reference = references.get(first.data.key)
    if reference is None:
        raise RuntimeError(f"trial {first.trial_key} needs {first.data.data_source} {first.data.dataset} "
                           "data that the driver did not plan; resume with the same --data-source/--data-dir "
                           "options the experiment started with")
    return reference, open_reference(reference, first.data.n_images, first.data.data_seed)


def _restore(trainer: PackedTrainer, logs: list[_ModelLog]) -> bool:
    """Continue from Tune's checkpoint, if any; True if training had already finished."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return False
    with checkpoint.as_directory() as folder:
        state = trainer_file.load(folder)
    for log, history in zip(logs, state["histories"]):
        log.history = history
    if not state.get("final"):
        trainer.load_state_dict(state["trainer"])
        for log, member in zip(logs, trainer.members):
            log.purge_step = member.step + 1
        return False
    for member, weights, step, log in zip(trainer.members, state["models"], state["steps"], logs):
        member.model.load_state_dict(weights)
        member.step = step
        log.purge_step = step + 1  # training is over: its curves stay, the evaluation follows
    trainer.errors = {int(k): v for k, v in state.get("errors", {}).items()}
    return True


def _signal_checkpoint(step: int) -> None:
    """A test hook (tests/conftest.py, ``CheckpointSignals``), off unless the folder named by
    ``DISGEN_CHECKPOINT_SIGNAL_DIR`` exists: once the checkpoint of ``step`` is reported, so that Tune
    holds it, write this worker's pid to ``<folder>/<trial dir name>-<step>`` and wait (at most 60 s)
    until the file is deleted. A test kills the worker, its node or the driver while it waits: at a
    known checkpoint, without racing the files Tune writes."""
    folder = os.environ.get("DISGEN_CHECKPOINT_SIGNAL_DIR")
    if not folder or not os.path.isdir(folder):
        return
    path = os.path.join(folder, f"{os.path.basename(tune.get_context().get_trial_dir().rstrip('/'))}-{step}")
    with open(path + ".tmp", "w") as signal:
        signal.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    deadline = time.monotonic() + 60
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    if os.path.exists(path):  # nobody acted: leave no stale signal behind
        os.remove(path)


def checkpoint_due(step: int, total_steps: int, every_steps: int, every_seconds: float,
                   seconds_since: float) -> bool:
    """Whether the report at ``step`` carries a checkpoint: every ``every_steps`` steps, or once
    ``every_seconds`` have passed since the last one (0 turns either off), so a lost node costs
    minutes, not a fifth of a run. Never at the end: the final report carries the trained model."""
    if step >= total_steps:
        return False
    by_steps = bool(every_steps) and step % every_steps == 0
    return by_steps or bool(every_seconds and seconds_since >= every_seconds)


def _train(trainer: PackedTrainer, logs: list[_ModelLog], report_every: int, checkpoint_every: int,
           node_id: str, checkpoint_seconds: float = 0.0) -> None:
    """Train, reporting progress to Tune and checkpointing every ``checkpoint_every`` steps or
    ``checkpoint_seconds`` (``checkpoint_due``). A lone model whose loss diverges fails its trial
    (Tune retries or records it); a pack member stops alone."""
    packed = len(trainer.members) > 1
    last_checkpoint = time.monotonic()
    for reports in trainer.run(report_every=report_every):
        for k, report in reports.items():
            if "error" not in report:
                logs[k].progress(report, trainer.members[k].model)
            elif not packed:
                raise NonFiniteLossError(report["error"])
        progress = {**_pack_progress(reports, len(trainer.members)), "node_id": node_id,
                    "device": trainer.device.type, "total_steps": trainer.total_steps}
        step = progress["step"]
        if checkpoint_due(step, trainer.total_steps, checkpoint_every, checkpoint_seconds,
                          time.monotonic() - last_checkpoint):
            for log in logs:  # TensorBoard holds every step up to the checkpoint a restore starts from
                log.writer.flush()
            with tempfile.TemporaryDirectory() as folder:
                trainer_file.save_training(folder, trainer.state_dict(), [log.history for log in logs])
                tune.report(progress, checkpoint=tune.Checkpoint.from_directory(folder))
            last_checkpoint = time.monotonic()
            _signal_checkpoint(step)
        else:
            tune.report(progress)


def _finish(trainer: PackedTrainer, logs: list[_ModelLog], members: Sequence[TrialConfig], data, split,
            cpus: float, train_seconds: float, reference) -> list[dict]:
    """Evaluate every model that trained to the end: one result per member, with its config, the
    step it reached, the settings only the run resolves (its length in steps, its images), and the
    dataset it read (its location and content id)."""
    results = []
    for k, (member, log, trial) in enumerate(zip(trainer.members, logs, members)):
        if k in trainer.errors:
            results.append({"config": trial.to_dict(), "error": trainer.errors[k], "step": member.step})
            continue
        metrics = _evaluate(member, data, split, trial, cpus)
        # members of a pack train together: each is credited an equal share of the pack's time
        metrics["train_seconds"] = train_seconds / len(members)
        metrics.update(data_uri=reference.uri, data_content_id=reference.content_id)
        log.final(member.model, member.step, metrics)
        results.append({"config": trial.to_dict(), **metrics, "step": member.step,
                        "steps": member.total_steps, "n_images": len(data), "bf16": bool(member.bf16)})
    return results


def write_history(experiment_dir: str, logs: list[_ModelLog], results: list[dict]) -> str:
    """The finished members' loss histories as one new history part of the experiment; its name.
    Written before the final report, so the driver's commit always finds it."""
    experiment = storage.experiment_name(experiment_dir)
    rows = [row for log, result in zip(logs, results) if "error" not in result
            for row in history_rows(experiment, result["config"], log.history)]
    part = storage.new_part()
    storage.write_history_part(experiment_dir, part, rows)
    return part


def train_trial(config: dict, run_info: dict) -> None:
    """Train, evaluate and report one Tune trial: a model, or a pack of models (``sweeps.packing``).
    ``run_info`` holds the dataset references (``DataConfig.key`` → ``DatasetReference``), the
    experiment's folder or URI (for the history part), the TensorBoard root, the CPUs per trial,
    the checkpoint interval and the planned trials (for Optuna's)."""
    cpus = run_info["cpus_per_trial"]
    if not run_info.get("verbose"):
        quiet_worker()
    torch.set_num_threads(max(1, int(cpus)))
    members = members_of(config, run_info.get("base_trials", ()))
    first = members[0]
    reference, data = _dataset(first, run_info["datasets"])
    split = get_split(first.data.dataset, first.data.split)
    train_rows, test_rows = split.train_test_indices(data.classes, data.factor_space)
    # Objectives on pairs (Ada-GVAE) draw them from the factor classes; the others ignore them.
    trainer = PackedTrainer([m.model for m in members], data.images, train_rows, factors=data.classes,
                            factor_space=data.factor_space)
    root = run_info["tensorboard_root"] or os.getcwd()
    log_dirs = [os.path.join(root, m.dirname) if run_info["tensorboard_root"] or len(members) > 1 else root
                for m in members]
    logs = [_ModelLog(m, data, train_rows, test_rows, d, t.total_steps)
            for m, d, t in zip(members, log_dirs, trainer.members)]

    node_id = ray.get_runtime_context().get_node_id()  # which machine ran it, in every report
    started = time.perf_counter()
    if not _restore(trainer, logs):
        _train(trainer, logs, first.evaluation.report_every, run_info.get("checkpoint_every", 0), node_id,
               run_info.get("checkpoint_seconds", 0.0))
    results = _finish(trainer, logs, members, data, split, cpus, time.perf_counter() - started, reference)
    part = write_history(run_info["experiment_dir"], logs, results)

    final = {"step": max(m.step for m in trainer.members), "done": True, "members": results,
             "results_part": part, "node_id": node_id, **provenance(trainer.device)}
    if len(members) == 1 and "error" not in results[0]:  # its metrics for Optuna, ASHA and Tune's table
        final.update({k: v for k, v in results[0].items() if k != "config"})
    with tempfile.TemporaryDirectory() as folder:
        trainer_file.save_final(folder, [m.model.state_dict() for m in trainer.members],
                                [m.step for m in trainer.members], trainer.errors,
                                [log.history for log in logs], {"members": [m.to_dict() for m in members]})
        tune.report(final, checkpoint=tune.Checkpoint.from_directory(folder))
