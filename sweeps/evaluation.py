"""A trained model's evaluation and its final TensorBoard record: in its trial, or off the GPU. A trial that
holds a GPU does not evaluate (DCI's boosted trees alone take minutes a model): it saves its trained models
in its final checkpoint and ends, and the driver evaluates each in a CPU-only Ray task
(``DeferredEvaluations``), then commits them (docs/sweeps.md, "Evaluation off the GPU")."""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Iterator, Sequence

import numpy as np
from torch.utils.tensorboard import SummaryWriter

from analysis import storage
from analysis.evaluation import evaluate
from analysis.trained_models import reconstruction_grid
from data_pipeline.in_distribution import training_rows
from data_pipeline.splits import get_split
from models import reconstruct
from sweeps.outcome import ModelOutcome, TrialOutcome
from sweeps.packing import tensorboard_folder
from sweeps.trials import TrialConfig

N_GRID_IMAGES = 8


def split_rows(trial: TrialConfig, data) -> tuple:
    """(split, training rows, held-out rows) of ``trial`` on ``data``, less the in-distribution control."""
    split = get_split(trial.data.dataset, trial.data.split)
    train, _, test = training_rows(data, split, trial.data.data_seed)
    return split, train, test


class ModelLog:
    """One model's TensorBoard folder, the training and held-out images its grids show, its loss history."""

    def __init__(self, trial: TrialConfig, data, train_rows, test_rows, log_dir: str, total_steps: int):
        self.trial, self.data, self.history = trial, data, []
        self.log_dir, self._writer = log_dir, None
        # set on a restore: TensorBoard drops an earlier worker's events from here on (no curve doubles back)
        self.purge_step = 1
        rng = np.random.default_rng(trial.model.seed)
        self.shown = {side: np.sort(rng.choice(rows, min(N_GRID_IMAGES, len(rows)), replace=False))
                      for side, rows in (("train", train_rows), ("test", test_rows))}
        # reconstructions of the same training images about five times during training, then at the end
        self.image_every = max(1, total_steps // trial.evaluation.report_every // 5)
        self.total_steps = total_steps

    @property
    def writer(self) -> SummaryWriter:
        """Opened at the first event, after a restore has set ``purge_step``."""
        if self._writer is None:
            self._writer = SummaryWriter(self.log_dir, purge_step=self.purge_step)
        return self._writer

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def reconstructions(self, model, side: str, step: int) -> None:
        rows = self.shown[side]
        # the ground-truth decoder has no encoder, and CompositionNet's reconstruction skips its latent op
        if len(rows) and self.trial.model.task == "vae":
            originals = self.data.images[rows]
            grid = reconstruction_grid(originals, reconstruct(model, originals))
            self.writer.add_image(f"reconstructions/{side}", grid, step)

    def progress(self, report: dict, current_model) -> None:
        """Record a progress report; every ``image_every`` reports, reconstructions by ``current_model()``."""
        step = report["step"]
        self.history.append(report)
        for name, value in report.items():
            if name != "step":
                self.writer.add_scalar(f"train/{name}", value, step)
        if len(self.history) % self.image_every == 0 and step < self.total_steps:  # the last comes at the end
            self.reconstructions(current_model(), "train", step)

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

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


# what a row records beside the metrics, not TensorBoard scalars
_NOT_SCALARS = ("eval_started_at", "eval_ended_at")


def model_logs(members: Sequence[TrialConfig], data, rows: list[tuple], trainer, root: str,
               separate: bool) -> list[ModelLog]:
    """Each model's TensorBoard log: a folder of its own under ``root`` (the experiment's, where
    ``separate``; else the trial's working folder, which holds a lone model's log itself)."""
    folders = [os.path.join(root, m.dirname) if separate or len(members) > 1 else root for m in members]
    return [ModelLog(m, data, r[1], r[2], folder, t.total_steps)
            for m, r, folder, t in zip(members, rows, folders, trainer.members)]


def evaluate_model(model, trial: TrialConfig, data, split, cpus: float,
                   ood2_sets: dict | None = None) -> dict:
    """``trial``'s metrics of a trained ``model`` (and OOD2 sets), with ``eval_seconds``, start and end."""
    began, started = time.time(), time.perf_counter()
    metrics = evaluate(model, data, split, trial.evaluation, seed=trial.model.seed, n_jobs=max(1, int(cpus)),
                       data_seed=trial.data.data_seed, ood2_sets=ood2_sets)
    metrics["eval_seconds"] = time.perf_counter() - started
    metrics.update(eval_started_at=began, eval_ended_at=time.time())
    return metrics


def write_final(log: ModelLog, model, step: int, metrics: dict) -> None:
    """The model's last reconstructions, its metrics and hyperparameters, into its TensorBoard folder."""
    log.final(model, step, {k: v for k, v in metrics.items() if k not in _NOT_SCALARS})


# -- evaluation off the GPU ------------------------------------------------------------------------

def _final_member(location: str, position: int) -> tuple[dict, list[dict], int]:
    """(weights, history, step) of member ``position`` of a final checkpoint, its files checked by seal."""
    from models import checkpoint as trainer_file
    from sweeps.checkpoints import SEAL, check_files, read_local_seal
    names = (trainer_file.CHECKPOINT_FILE, trainer_file.member_file(position))
    with tempfile.TemporaryDirectory() as local:
        path = location
        if storage.is_remote(location):
            path = local
            for name in (*names, SEAL):
                storage.download_if_exists(storage.join(location, name), os.path.join(local, name))
        sealed = read_local_seal(path)
        if sealed is not None:  # each file read is the one its seal hashed (from before seals: as it is)
            check_files(path, sealed, names)
        member = trainer_file.load_member(path, position, mmap=True)
        weights = {name: tensor.clone() for name, tensor in member["weights"].items()}
        return weights, member["history"], int(member["step"])


def evaluate_saved(job: dict) -> dict:
    """One trained model's evaluation in a CPU-only Ray task, from its trial's final checkpoint."""
    import torch

    from data_pipeline.node_cache import DatasetReference, open_reference
    from models import build_task_model
    began = time.time()
    trial = TrialConfig(job["config"])
    torch.set_num_threads(max(1, int(job["cpus"])))
    weights, history, step = _final_member(job["checkpoint"], job["position"])
    reference = dict(job["reference"])
    ood2 = reference.pop("ood2", None) or {}
    data = open_reference(DatasetReference(**reference), trial.data.n_images, trial.data.data_seed)
    sets = {scenario: open_reference(DatasetReference(**ref))
            for scenario, ref in ood2.get(trial.trial_key, {}).items()}
    split, train_rows, test_rows = split_rows(trial, data)
    model = build_task_model(trial.model, data.classes, data.factor_space, train_rows)
    model.load_state_dict(weights)
    # a CPU trainer's layout (models.engine.Trainer): exactly the numbers the trial would have computed
    model = model.to(memory_format=torch.channels_last).eval()
    metrics = evaluate_model(model, trial, data, split, job["cpus"], sets)
    metrics["eval_started_at"] = began  # the task's start: reading the checkpoint and data included
    remote = storage.is_remote(job["tensorboard"])
    with tempfile.TemporaryDirectory() as local:
        log = ModelLog(trial, data, train_rows, test_rows, local if remote else job["tensorboard"], step)
        log.purge_step = step + 1  # beside the training's events, which stay (all at steps <= step)
        write_final(log, model, step, metrics)
        if remote:  # beside the training's event file, which Tune synced there
            for name in os.listdir(local):
                storage.upload(os.path.join(local, name), storage.join(job["tensorboard"], name))
    metrics["eval_ended_at"] = time.time()
    return {"metrics": metrics, "history": history, "step": step}


class DeferredEvaluations:
    """The driver's evaluations of trained models: a CPU-only task per model (``evaluate_saved``)."""

    def __init__(self, experiment_dir: str, tasks):
        self.experiment_dir = storage.normalise(experiment_dir)
        self.tasks = tasks
        self.pending: dict[str, dict] = {}  # trial id → {"outcome", "refs": {ref: position}, "done"}
        self.failed = 0  # evaluations that raised

    def __len__(self) -> int:
        return sum(len(p["refs"]) for p in self.pending.values())

    def in_flight(self) -> set[str]:
        """The trial keys of the models being evaluated."""
        return {p["outcome"].members[k].trial.trial_key for p in self.pending.values()
                for k in p["refs"].values()}

    def _checkpoint_location(self, path: str) -> str:
        """A final checkpoint's folder (its path on the experiment's file system) under the storage."""
        filesystem, inner = storage.resolve(self.experiment_dir)
        if not storage.is_remote(self.experiment_dir):
            return path
        if not path.startswith(inner + "/"):
            raise ValueError(f"checkpoint {path}: not under the experiment's storage {self.experiment_dir}")
        return storage.join(self.experiment_dir, path[len(inner) + 1:])

    def start(self, outcome: TrialOutcome, checkpoint: str | None, stored: set[str]) -> int:
        """Evaluate ``outcome``'s trained models with no row in ``stored``, none running; how many start."""
        if checkpoint is None:
            raise ValueError(f"trial {outcome.trial_id}: trained, but Tune holds no checkpoint of it")
        busy = stored | self.in_flight()
        location = self._checkpoint_location(checkpoint)
        remote = storage.is_remote(self.experiment_dir)
        refs = {}
        for position, member in enumerate(outcome.members):
            if member.failed or member.trial.trial_key in busy:
                continue
            folder = tensorboard_folder(outcome.trials, member.trial, remote)
            job = {"config": member.trial.to_dict(), "position": position, "checkpoint": location,
                   "reference": outcome.data_reference, "cpus": outcome.cpus_per_trial,
                   "tensorboard": storage.join(self.experiment_dir, folder)}
            task = self.tasks.submit(evaluate_saved, job, outcome.cpus_per_trial,
                                     f"evaluate {member.trial.trial_key}")
            refs[task] = position
        if refs:
            self.pending[outcome.trial_id or location] = {"outcome": outcome, "refs": refs, "done": {}}
        return len(refs)

    def finished(self, wait: bool = False) -> Iterator[TrialOutcome]:
        """The outcomes of trials whose evaluations all ended (``wait``: each as it ends)."""
        while self.pending:
            refs = [ref for p in self.pending.values() for ref in p["refs"] if ref not in p["done"]]
            ready = self.tasks.done(refs, wait)
            if not ready and not wait:
                return
            for ref in ready:
                owner = next(p for p in self.pending.values() if ref in p["refs"])
                try:
                    owner["done"][ref] = self.tasks.result(ref)
                except Exception as error:  # the task's own error (a metric's, a lost file's): recorded
                    self.failed += 1
                    owner["done"][ref] = {"error": f"evaluation failed: {type(error).__name__}: "
                                                   f"{str(error).strip().splitlines()[-1][:500]}"}
            for trial_id in [t for t, p in self.pending.items() if len(p["done"]) == len(p["refs"])]:
                yield self._evaluated(self.pending.pop(trial_id))
            if not wait:
                return

    @staticmethod
    def _evaluated(pending: dict) -> TrialOutcome:
        """The trial's outcome with its evaluated models only: metrics, step and history, or the error."""
        outcome, members = pending["outcome"], []
        for ref, position in pending["refs"].items():
            member, done = outcome.members[position], pending["done"][ref]
            if "error" in done:
                members.append(ModelOutcome(member.trial, error=done["error"]))
            else:
                members.append(dataclasses.replace(member, metrics={**member.metrics, **done["metrics"]},
                                                   history=done["history"], step=done["step"]))
        return dataclasses.replace(outcome, members=members, results_part=None, evaluated=True)
