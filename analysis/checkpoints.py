"""Trained models from a sweep's checkpoints, and the figures that need them: reconstruction grids
of training and held-out images, and latent traversals. Imports torch (through ``models``)."""

from __future__ import annotations

import glob
import os

import numpy as np

from analysis.figures import hinton, reconstruction_figure, traversal_figure
from analysis.metrics.dci import dci

CHECKPOINT_FILE = "trainer.pt"


def find_checkpoints(experiment_dir: str) -> list[str]:
    """The last checkpoint file of each trial folder under ``experiment_dir``."""
    found = []
    for trial in sorted(glob.glob(os.path.join(experiment_dir, "*", ""))):
        files = sorted(glob.glob(os.path.join(trial, "checkpoint_*", CHECKPOINT_FILE)))
        if files:
            found.append(files[-1])
    return found


def load_checkpoint(path: str):
    """(model, config, dataset) of a ``trainer.pt`` written by ``sweeps/trainable.py``.

    The dataset is rebuilt procedurally from the configuration (dataset, n_images, data_seed).
    """
    import torch

    from data_pipeline import load_procedural
    from models import ModelConfig, build

    state = torch.load(path, map_location="cpu", weights_only=False)
    if "config" not in state or "trainer" not in state:
        raise ValueError(f"{path}: not a final trial checkpoint (needs 'trainer' and 'config' keys)")
    config = state["config"]
    data = load_procedural(config["dataset"], config.get("n_images"), seed=config.get("data_seed", 0))
    model = build(ModelConfig.from_dict({**config, "channels": data.channels}))
    model.load_state_dict(state["trainer"]["model"])
    model.eval()
    return model, config, data


def model_figures(
    path: str,
    out_dir: str,
    *,
    n_images: int = 8,
    n_steps: int = 9,
    span: float = 2.0,
    n_codes: int = 1000,
    seed: int = 0,
) -> dict[str, str]:
    """Write, for the checkpoint at ``path``, ``<trial_key>_reconstructions.png`` (training and
    held-out images above their reconstructions), ``<trial_key>_traversal.png`` (each code swept
    over ±``span`` around the code of one training image) and ``<trial_key>_hinton.png`` (the
    Hinton diagram of the Lasso D-score's importance matrix on at most ``n_codes`` training
    images; the Lasso is used because it costs a second where the GBT costs ten).
    Returns {kind: png path}."""
    import torch

    from data_pipeline import get_split
    from models import encode_means, reconstruct

    model, config, data = load_checkpoint(path)
    split = get_split(config["dataset"], config["split"])
    train, test = split.train_test_indices(data.classes, data.factor_space)
    rng = np.random.default_rng(seed)
    panels = {}
    for name, rows in (("train", train), ("held out", test)):
        rows = np.sort(rng.choice(rows, min(n_images, len(rows)), replace=False))
        originals = data.images[rows]
        panels[f"{name} images (top) and reconstructions (bottom)"] = (
            originals,
            reconstruct(model, originals),
        )
    key = config.get("trial_key", os.path.basename(os.path.dirname(os.path.dirname(path))))
    os.makedirs(out_dir, exist_ok=True)
    label = (f"{config.get('split')} · {config.get('objective')} β={config.get('beta')} "
             f"· seed {config.get('seed')}")
    out = {
        "reconstructions": reconstruction_figure(
            panels, os.path.join(out_dir, f"{key}_reconstructions.png"), title=label
        )
    }

    code = encode_means(model, data.images, train[:1])[0]
    values = np.linspace(-span, span, n_steps)
    latents = np.repeat(code[None, None, :], code.size, axis=0).repeat(n_steps, axis=1)
    for i in range(code.size):
        latents[i, :, i] = code[i] + values
    with torch.no_grad():
        decoded = torch.sigmoid(
            model.decode(torch.as_tensor(latents.reshape(-1, code.size), dtype=torch.float32))
        )
    images = decoded.numpy().reshape(code.size, n_steps, *decoded.shape[1:])
    out["traversal"] = traversal_figure(
        images,
        os.path.join(out_dir, f"{key}_traversal.png"),
        values=values,
        title=f"Latent traversal, {label}",
    )
    rows = np.sort(rng.choice(train, min(n_codes, len(train)), replace=False))
    result = dci(
        encode_means(model, data.images, rows), data.classes[rows], estimator="lasso_m21", random_state=seed
    )
    out["hinton"] = hinton(
        result["importance_matrix"],
        os.path.join(out_dir, f"{key}_hinton.png"),
        column_labels=list(data.factor_space.names),
        title=f"Lasso importance (D = {result['disentanglement']:.2f})\n{label}",
    )
    return out
