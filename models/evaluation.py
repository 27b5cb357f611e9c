"""Evaluation hooks that ``analysis`` calls: encode to means, reconstruct, NLL per image."""

from __future__ import annotations

import numpy as np
import torch

from models.engine import to_float
from models.objectives import bernoulli_nll


def _batches(images: np.ndarray, indices: np.ndarray, batch_size: int):
    for start in range(0, len(indices), batch_size):
        yield images[indices[start:start + batch_size]]


def _device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def encode_means(model, images: np.ndarray, indices: np.ndarray, batch_size: int = 512) -> np.ndarray:
    """Posterior means (len(indices), K) of the rows ``indices``, in that order."""
    model.eval()
    device = _device(model)
    out = [model.encode(to_float(b, device))[0].cpu() for b in _batches(images, indices, batch_size)]
    return torch.cat(out).numpy() if out else np.zeros((0, model.config.latent_dim), np.float32)


@torch.no_grad()
def reconstruct(model, images: np.ndarray) -> np.ndarray:
    """Reconstructions (pixel probabilities in [0, 1]) of a uint8 batch, decoding the means."""
    model.eval()
    device = _device(model)
    mean, _ = model.encode(to_float(images, device))
    return torch.sigmoid(model.decode(mean)).cpu().numpy()


@torch.no_grad()
def nll_per_image(model, images: np.ndarray, indices: np.ndarray, batch_size: int = 512) -> np.ndarray:
    """Bernoulli NLL (nats, summed over pixels) of each row's reconstruction from its mean code."""
    model.eval()
    device = _device(model)
    out = []
    for batch in _batches(images, indices, batch_size):
        x = to_float(batch, device)
        mean, _ = model.encode(x)
        out.append(bernoulli_nll(model.decode(mean), x).cpu())
    return torch.cat(out).numpy() if out else np.zeros(0, np.float32)
