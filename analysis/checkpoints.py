"""Trained models from a sweep's checkpoints, and the figures that need them: reconstruction grids
of training and held-out images, and latent traversals. Imports torch (through ``models``).

Every way a checkpoint can fail to load (missing, truncated, corrupt, or one that would need
pickle) raises :class:`CheckpointError` with a reason a person can act on, so that the report can
skip that model, say why, and draw the rest.
"""

from __future__ import annotations

import glob
import json
import os

import numpy as np

from analysis.figures import hinton, reconstruction_figure, traversal_figure
from analysis.metrics.dci import dci
from models.checkpoint import CHECKPOINT_FILE, FORMAT, CheckpointError


def read_checkpoint(path: str) -> dict:
    """The state dict saved in a ``trainer.pt``, read as data only (``weights_only=True``: no code
    in a checkpoint runs; models/checkpoint.py defines the format)."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def _read(path: str) -> dict:
    """:func:`read_checkpoint`, with every failure turned into a :class:`CheckpointError`."""
    import pickle
    import zipfile

    if not os.path.exists(path):
        raise CheckpointError(f"missing: no checkpoint file {path}")
    if os.path.getsize(path) == 0:
        raise CheckpointError(f"truncated: {path} is empty")
    try:
        state = read_checkpoint(path)
    except pickle.UnpicklingError as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        needs = [line for line in lines if "allowed global" in line or "Unsupported global" in line]
        if needs:
            raise CheckpointError(f"needs pickle: {path} holds objects a weights-only load refuses "
                                  f"({needs[0][:300]})") from error
        detail = next((line for line in lines if "WeightsUnpickler error" in line or "load key" in line),
                      lines[0] if lines else repr(error))
        raise CheckpointError(f"corrupt: {path} cannot be unpickled ({detail[:300]})") from error
    except (EOFError, zipfile.BadZipFile) as error:
        raise CheckpointError(f"truncated: {path} ends early ({error!r})") from error
    except Exception as error:  # torch raises RuntimeError for a damaged zip archive, among others
        message = str(error).splitlines()[0] if str(error) else repr(error)
        kind = "truncated" if "central directory" in message or "EOF" in message else "corrupt"
        raise CheckpointError(f"{kind}: {path} cannot be read ({message})") from error
    if not isinstance(state, dict):
        raise CheckpointError(f"corrupt: {path} holds a {type(state).__name__}, not a checkpoint")
    if state.get("format") != FORMAT:
        raise CheckpointError(f"old format: {path} was written by an older disgen; if you trust it, convert "
                              f"it: python -m models.checkpoint --convert {path}")
    if isinstance(state.get("config"), str):
        state["config"] = json.loads(state["config"])
    return state


def find_checkpoints(experiment_dir: str) -> list[str]:
    """The last checkpoint file of each trial folder under ``experiment_dir``."""
    found = []
    for trial in sorted(glob.glob(os.path.join(experiment_dir, "*", ""))):
        files = sorted(glob.glob(os.path.join(trial, "checkpoint_*", CHECKPOINT_FILE)))
        if files:
            found.append(files[-1])
    return found


def _trained_weights(state: dict, path: str) -> list[tuple[dict, dict]]:
    """(member config, model weights) of each model a final checkpoint holds (models.checkpoint)."""
    if not state.get("final"):
        raise CheckpointError(f"{path}: not a final trial checkpoint (the trial had not finished)")
    configs = state["config"]["members"]
    errors = {int(k) for k in state.get("errors", {})}
    # the figures here need an encoder: the ground-truth decoder and composition tasks are left out
    return [(c, w) for k, (c, w) in enumerate(zip(configs, state["models"]))
            if k not in errors and c.get("task", "vae") == "vae"]


def count_models(path: str) -> int:
    """How many trained models a ``trainer.pt`` holds (0 if it is not a final checkpoint); a
    :class:`CheckpointError` if it cannot be read."""
    try:
        return len(_trained_weights(_read(path), path))
    except CheckpointError as error:
        if "not a final trial checkpoint" in str(error):
            return 0
        raise


def member_keys(path: str) -> list[str | None]:
    """The trial key of each trained model in a ``trainer.pt``, in member order."""
    return [config.get("trial_key") for config, _ in _trained_weights(_read(path), path)]


def load_checkpoints(path: str) -> list[tuple]:
    """[(model, config, dataset)] of every trained model in a ``trainer.pt`` written by
    ``sweeps/trainable.py``: one, or one per member of a pack (members that failed, and models of
    the ground-truth decoder and composition tasks, are left out).

    The dataset is rebuilt procedurally from the configuration (dataset, n_images, data_seed).
    """
    from data_pipeline import load_procedural
    from models import ModelConfig, build

    state = _read(path)
    loaded, datasets = [], {}
    for config, weights in _trained_weights(state, path):
        key = (config["dataset"], config.get("n_images"), config.get("data_seed", 0))
        if key not in datasets:
            datasets[key] = load_procedural(key[0], key[1], seed=key[2])
        data = datasets[key]
        model = build(ModelConfig.from_dict({**config, "channels": data.channels}))
        try:
            model.load_state_dict(weights)
        except (RuntimeError, TypeError, AttributeError) as error:
            raise CheckpointError(f"corrupt: {path}: the weights do not fit the model its config "
                                  f"describes ({str(error).splitlines()[0]})") from error
        model.eval()
        loaded.append((model, config, data))
    return loaded


def load_checkpoint(path: str, member: int = 0):
    """(model, config, dataset) of one model of a ``trainer.pt`` (``member``: which, in a pack)."""
    loaded = load_checkpoints(path)
    if not 0 <= member < len(loaded):
        raise CheckpointError(f"missing: {path} holds {len(loaded)} trained model(s), not member {member}")
    return loaded[member]


def model_figures(
    path: str,
    out_dir: str,
    *,
    n_images: int = 8,
    n_steps: int = 9,
    span: float = 2.0,
    n_codes: int = 1000,
    seed: int = 0,
    member: int = 0,
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

    model, config, data = load_checkpoint(path, member)
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
