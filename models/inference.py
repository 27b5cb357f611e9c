"""Inference with a trained model, the hooks ``analysis`` evaluates it through: encode to posterior
means, reconstruct, decode codes to pixel probabilities, NLL per image.

Each runs the model in eval mode and leaves it in the mode it found, so a hook can be called in
the middle of training.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from models.engine import to_float
from models.objectives import bernoulli_nll


def _batches(images: np.ndarray, indices: np.ndarray, batch_size: int):
    for start in range(0, len(indices), batch_size):
        yield images[indices[start:start + batch_size]]


def _device(model) -> torch.device:
    return next(model.parameters()).device


@contextlib.contextmanager
def evaluating(model):
    """Eval mode and no gradients for the block; the model's own mode afterwards."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def encode_means(model, images: np.ndarray, indices: np.ndarray, batch_size: int = 512) -> np.ndarray:
    """Posterior means (len(indices), K) of the rows ``indices``, in that order."""
    device = _device(model)
    with evaluating(model):
        out = [model.encode(to_float(b, device))[0].cpu() for b in _batches(images, indices, batch_size)]
    return torch.cat(out).numpy() if out else np.zeros((0, model.config.latent_dim), np.float32)


def reconstruct(model, images: np.ndarray) -> np.ndarray:
    """Reconstructions (pixel probabilities in [0, 1]) of a uint8 batch, decoding the means."""
    device = _device(model)
    with evaluating(model):
        mean, _ = model.encode(to_float(images, device))
        return torch.sigmoid(model.decode(mean)).cpu().numpy()


def decode_probabilities(model, codes: np.ndarray, batch_size: int = 512) -> np.ndarray:
    """Pixel probabilities (N, C, H, W) that an (N, K) array of codes decodes to."""
    device = _device(model)
    with evaluating(model):
        chunks = [torch.sigmoid(model.decode(torch.as_tensor(codes[i:i + batch_size], dtype=torch.float32,
                                                             device=device))).cpu().numpy()
                  for i in range(0, len(codes), batch_size)]
    return np.concatenate(chunks)


def nll_per_image(model, images: np.ndarray, indices: np.ndarray, batch_size: int = 512) -> np.ndarray:
    """Bernoulli NLL (nats, summed over pixels) of each row's reconstruction from its mean code."""
    device = _device(model)
    out = []
    with evaluating(model):
        for batch in _batches(images, indices, batch_size):
            x = to_float(batch, device)
            mean, _ = model.encode(x)
            out.append(bernoulli_nll(model.decode(mean), x).cpu())
    return torch.cat(out).numpy() if out else np.zeros(0, np.float32)
