"""The Ray Tune trainable: the only place that touches Ray's trial API.

One call trains one model, or one pack of models (``sweeps.packing``): data from
``data_pipeline``, the models and their training loop from ``models`` (``PackedTrainer``, which
for one model is the plain ``Trainer`` loop), evaluation from ``analysis``. It reports loss terms
as it goes, writes each model's TensorBoard scalars and reconstruction grids, checkpoints so a
failed trial resumes where it stopped, and ends with one report that holds the final metrics and
the loss history: of the model, or of each member of the pack under ``members``.
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
import ray
import torch
from ray import tune
from torch.utils.tensorboard import SummaryWriter

from analysis.figures import reconstruction_grid
from analysis.task_evaluation import evaluate_task
from data_pipeline.splits import get_split
from models import ModelConfig, NonFiniteLossError, reconstruct
from models.packed import PackedTrainer
from sweeps.data import data_key
from sweeps.grid import complete_config, trial_dirname
from sweeps.packing import is_pack

CHECKPOINT_FILE = "trainer.pt"
N_GRID_IMAGES = 8


class _ModelLog:
    """One model's TensorBoard folder, the training and held-out images its grids show, and its
    loss history."""

    def __init__(self, config: dict, data, train_rows, test_rows, log_dir: str, total_steps: int):
        self.config, self.data, self.history = config, data, []
        self.writer = SummaryWriter(log_dir)
        rng = np.random.default_rng(config["seed"])
        self.shown = {side: np.sort(rng.choice(rows, min(N_GRID_IMAGES, len(rows)), replace=False))
                      for side, rows in (("train", train_rows), ("test", test_rows))}
        # reconstructions of the same training images about five times during training, then at the end
        self.image_every = max(1, total_steps // config["report_every"] // 5)
        self.total_steps = total_steps

    def reconstructions(self, model, side: str, step: int) -> None:
        rows = self.shown[side]
        # the ground-truth decoder has no encoder, and CompositionNet's reconstruction skips its latent op
        if len(rows) and self.config.get("task", "vae") == "vae":
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
        hparams = {k: v for k, v in self.config.items() if isinstance(v, (int, float, str, bool))}
        self.writer.add_hparams(hparams, {f"hparam/{k}": v for k, v in metrics.items()}, run_name=".",
                                global_step=step)
        self.writer.close()


def _evaluate(trainer, data, split, config: dict, run_info: dict) -> dict:
    started = time.perf_counter()
    metrics = evaluate_task(trainer, data, split, n_nll=config["n_nll"], seed=config["seed"],
                            n_metric=config["n_metric"], n_jobs=max(1, int(run_info["cpus_per_trial"])),
                            dci_estimator=None if config.get("dci_estimator") == "none"
                            else config.get("dci_estimator", "gbt"),
                            **({"metrics": tuple(config["metrics"])} if "metrics" in config else {}))
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


def train_trial(config: dict, datasets: dict, run_info: dict) -> None:
    """Train, evaluate and report one trial: a model, or a pack of models (``{"pack": [...]}``).
    ``datasets`` maps ``data_key`` to a shared dataset; ``run_info`` holds the experiment folder,
    the CPUs per trial and the checkpoint interval."""
    torch.set_num_threads(max(1, int(run_info["cpus_per_trial"])))
    packed = is_pack(config)
    members = [complete_config(m) for m in config["pack"]] if packed else [complete_config(config)]
    first = members[0]
    if data_key(first) not in datasets:
        raise RuntimeError(f"trial {first['trial_key']} needs {first['data_source']} {first['dataset']} data "
                           "that the driver did not load; resume with the same --data-source/--data-dir "
                           "options the experiment started with")
    data = datasets[data_key(first)]
    split = get_split(first["dataset"], first["split"])
    train_rows, test_rows = split.train_test_indices(data.classes, data.factor_space)
    model_configs = [ModelConfig.from_dict({**m, "channels": data.channels}) for m in members]
    # Objectives on pairs (Ada-GVAE) draw them from the factor classes; the others ignore them.
    trainer = PackedTrainer(model_configs, data.images, train_rows, factors=data.classes,
                            factor_space=data.factor_space, mode=run_info.get("pack_mode", "auto"))

    root = run_info["tensorboard_root"]
    working = os.getcwd()
    log_dirs = [os.path.join(root, trial_dirname(m)) if root
                else (os.path.join(working, trial_dirname(m)) if packed else working) for m in members]
    logs = [_ModelLog(m, data, train_rows, test_rows, d, t.total_steps)
            for m, d, t in zip(members, log_dirs, trainer.members)]

    finished = False
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            state = torch.load(os.path.join(folder, CHECKPOINT_FILE), weights_only=False)
        finished = bool(state.get("final"))
        if finished:  # training had finished: evaluate and report again, train nothing
            for member, weights, step in zip(trainer.members, state["models"], state["steps"]):
                member.model.load_state_dict(weights)
                member.step = step
            trainer.errors = dict(state.get("errors", {}))
        else:
            trainer.load_state_dict(state["trainer"])
        for log, history in zip(logs, state["histories"]):
            log.history = history

    checkpoint_every = run_info.get("checkpoint_every", 0)
    node_id = ray.get_runtime_context().get_node_id()  # which machine ran it, in every report
    started = time.perf_counter()
    for reports in ([] if finished else trainer.run(report_every=first["report_every"])):
        for k, report in reports.items():
            if "error" in report:
                if not packed:  # a lone model fails its trial, which Tune retries or records
                    raise NonFiniteLossError(report["error"])
                continue
            logs[k].progress(report, trainer.members[k].model)
        progress = {**_pack_progress(reports, len(members)), "node_id": node_id}
        step = progress["step"]
        if checkpoint_every and step % checkpoint_every == 0 and step < trainer.total_steps:
            with tempfile.TemporaryDirectory() as folder:
                torch.save({"trainer": trainer.state_dict(), "histories": [log.history for log in logs]},
                           os.path.join(folder, CHECKPOINT_FILE))
                tune.report(progress, checkpoint=tune.Checkpoint.from_directory(folder))
        else:
            tune.report(progress)
    train_seconds = time.perf_counter() - started

    results = []
    for k, (member, log, config_k) in enumerate(zip(trainer.members, logs, members)):
        if k in trainer.errors:
            results.append({"config": config_k, "error": trainer.errors[k], "history": log.history})
            continue
        metrics = _evaluate(member, data, split, config_k, run_info)
        # members of a pack train together: each is credited an equal share of the pack's time
        metrics["train_seconds"] = train_seconds / len(members)
        log.final(member.model, member.step, metrics)
        results.append({"config": config_k, **metrics, "history": log.history, "step": member.step})

    # The final checkpoint holds the trained weights only (a third of the size with Adam's state):
    # nothing resumes training from it; a trial restored from it is evaluated again, not retrained.
    device = str(trainer.device)
    with tempfile.TemporaryDirectory() as folder:
        torch.save({"final": True, "models": [m.model.state_dict() for m in trainer.members],
                    "steps": [m.step for m in trainer.members], "errors": trainer.errors,
                    "histories": [log.history for log in logs], "config": config},
                   os.path.join(folder, CHECKPOINT_FILE))
        if packed:
            final = {"step": max(m.step for m in trainer.members), "done": True, "members": results,
                     "node_id": node_id, "device": device}
        else:
            final = {**{k: v for k, v in results[0].items() if k != "config"}, "done": True,
                     "node_id": node_id, "device": device}
        tune.report(final, checkpoint=tune.Checkpoint.from_directory(folder))
