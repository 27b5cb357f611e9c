"""The Ray Tune trainable: the only place that touches Ray's trial API.

One call trains one model: data from ``data_pipeline``, the model and its training loop from
``models``, evaluation from ``analysis``. It reports loss terms as it goes, writes TensorBoard
scalars and reconstruction grids, checkpoints so a failed trial resumes where it stopped, and
ends with one report that holds the final metrics and the trial's loss history.
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

from analysis.evaluation import evaluate
from analysis.figures import reconstruction_grid
from data_pipeline.splits import get_split
from models import ModelConfig, Trainer, build, reconstruct
from sweeps.data import data_key
from sweeps.grid import complete_config, trial_dirname

CHECKPOINT_FILE = "trainer.pt"
N_GRID_IMAGES = 8


def _log_reconstructions(writer, model, data, rows, tag, step):
    if len(rows):
        originals = data.images[rows]
        writer.add_image(tag, reconstruction_grid(originals, reconstruct(model, originals)), step)


def train_trial(config: dict, datasets: dict, run_info: dict) -> None:
    """Train, evaluate and report one trial. ``datasets`` maps ``data_key`` to a shared dataset;
    ``run_info`` holds the experiment folder and the CPUs per trial."""
    torch.set_num_threads(max(1, int(run_info["cpus_per_trial"])))
    config = complete_config(config)
    if data_key(config) not in datasets:
        raise RuntimeError(f"trial {config['trial_key']} needs {config['data_source']} "
                           f"{config['dataset']} data that the driver did not load; resume with the "
                           "same --data-source/--data-dir options the experiment started with")
    data = datasets[data_key(config)]
    split = get_split(config["dataset"], config["split"])
    train_rows, test_rows = split.train_test_indices(data.classes, data.factor_space)
    model_config = ModelConfig.from_dict({**config, "channels": data.channels})
    # Objectives on pairs (Ada-GVAE) draw them from the factor classes; the others ignore them.
    trainer = Trainer(build(model_config), data.images, train_rows, model_config, factors=data.classes)

    history: list[dict] = []
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            state = torch.load(os.path.join(folder, CHECKPOINT_FILE), weights_only=False)
        if state.get("final"):  # training had finished: evaluate and report again, train nothing
            trainer.model.load_state_dict(state["model"])
            trainer.step = state["step"]
        else:
            trainer.load_state_dict(state["trainer"])
        history = state["history"]

    root = run_info["tensorboard_root"]
    log_dir = os.path.join(root, trial_dirname(config)) if root else os.getcwd()
    writer = SummaryWriter(log_dir)
    rng = np.random.default_rng(config["seed"])
    shown = {"train": np.sort(rng.choice(train_rows, min(N_GRID_IMAGES, len(train_rows)), replace=False)),
             "test": np.sort(rng.choice(test_rows, min(N_GRID_IMAGES, len(test_rows)), replace=False))}
    checkpoint_every = run_info.get("checkpoint_every", 0)
    # Reconstructions of the same training images about five times during training, then at the end.
    image_every = max(1, trainer.total_steps // config["report_every"] // 5)
    node_id = ray.get_runtime_context().get_node_id()  # which machine ran it, in every report
    started = time.perf_counter()

    for progress in trainer.run(report_every=config["report_every"]):
        step = progress["step"]
        history.append(progress)
        for name, value in progress.items():
            if name != "step":
                writer.add_scalar(f"train/{name}", value, step)
        if len(history) % image_every == 0 and step < trainer.total_steps:  # the last comes below
            _log_reconstructions(writer, trainer.model, data, shown["train"], "reconstructions/train", step)
        saving = checkpoint_every and (step % checkpoint_every == 0) and step < trainer.total_steps
        if saving:
            with tempfile.TemporaryDirectory() as folder:
                torch.save({"trainer": trainer.state_dict(), "history": history},
                           os.path.join(folder, CHECKPOINT_FILE))
                tune.report({**progress, "node_id": node_id},
                            checkpoint=tune.Checkpoint.from_directory(folder))
        else:
            tune.report({**progress, "node_id": node_id})
    train_seconds = time.perf_counter() - started

    for side, rows in shown.items():
        _log_reconstructions(writer, trainer.model, data, rows, f"reconstructions/{side}", trainer.step)
    started = time.perf_counter()
    metrics = evaluate(trainer.model, data, split, n_nll=config["n_nll"],
                       n_metric=config["n_metric"], seed=config["seed"],
                       n_jobs=max(1, int(run_info["cpus_per_trial"])),
                       dci_estimator=None if config.get("dci_estimator") == "none"
                       else config.get("dci_estimator", "gbt"),
                       **({"metrics": tuple(config["metrics"])} if "metrics" in config else {}))
    metrics.update(train_seconds=train_seconds, eval_seconds=time.perf_counter() - started)
    for name, value in metrics.items():
        writer.add_scalar(f"eval/{name}", value, trainer.step)
    hparams = {k: v for k, v in config.items() if isinstance(v, (int, float, str, bool))}
    writer.add_hparams(hparams, {f"hparam/{k}": v for k, v in metrics.items()}, run_name=".",
                       global_step=trainer.step)
    writer.close()

    # The final checkpoint holds the trained weights only (a third of the size with Adam's state):
    # nothing resumes training from it; a trial restored from it is evaluated again, not retrained.
    with tempfile.TemporaryDirectory() as folder:
        torch.save({"model": trainer.model.state_dict(), "step": trainer.step, "history": history,
                    "config": config, "final": True}, os.path.join(folder, CHECKPOINT_FILE))
        tune.report({"step": trainer.step, **metrics, "history": history, "done": True,
                     "node_id": node_id, "device": str(trainer.device)},
                    checkpoint=tune.Checkpoint.from_directory(folder))
