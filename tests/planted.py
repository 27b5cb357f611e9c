"""A planted model for evaluation tests: a tiny full-grid dataset whose images carry their factor
classes in their first pixels, and a "model" whose codes are a chosen function of those classes.
The real evaluation path (``analysis.evaluation.evaluate``) then runs on codes with known answers."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

from data_pipeline.datasets import GroundTruthDataset
from data_pipeline.factors import FactorSpace
from data_pipeline.splits.rules import Split

SIZES = (5, 4, 6)
NAMES = ("a", "b", "object_hue")
SIDE = 4  # images are 1 × 4 × 4


def dataset(sizes=SIZES, names=NAMES, kinds=None, space=None) -> GroundTruthDataset:
    """The full grid of ``sizes`` (every factor categorical unless ``kinds`` says otherwise), or of
    the given factor ``space``."""
    if space is None:
        kinds = ("categorical",) * len(sizes) if kinds is None else tuple(kinds)
        values = tuple(np.arange(s, dtype=float) for s in sizes)
        space = FactorSpace(tuple(names), tuple(sizes), values, kinds)
    names, sizes = space.names, space.sizes
    classes = np.stack(np.unravel_index(np.arange(int(np.prod(sizes))), sizes), axis=1)
    images = np.zeros((len(classes), 1, SIDE, SIDE), np.uint8)
    images[:, 0, 0, : len(sizes)] = classes  # the classes, read back by the planted encoder
    images[:, 0, 3, 3] = 255  # one on-pixel, so that the NLL depends on the pixel values

    def observe(wanted):
        flat = np.ravel_multi_index(tuple(np.asarray(wanted).T), sizes)
        return images[flat]

    return GroundTruthDataset("planted", images, classes, space, observe)


def split(held_class=4) -> Split:
    """Factor a's class ``held_class`` together with b's class 3 is never seen in training."""
    return Split("planted_corner", "planted", "recombination_to_element", {"a": (held_class,), "b": (3,)})


class PlantedModel(nn.Module):
    """encode(x) = (code(classes), 0); decode(z) = constant logits ``logit`` for every pixel."""

    def __init__(self, code, latent_dim, likelihood="mse", logit=0.0, n_factors=3):
        super().__init__()
        self.code, self.n_factors, self.logit = code, n_factors, logit
        self.anchor = nn.Parameter(torch.zeros(()))  # gives the model a device
        self.config = SimpleNamespace(latent_dim=latent_dim, resolved_likelihood=likelihood)

    def encode(self, x):
        classes = torch.round(x[:, 0, 0, : self.n_factors] * 255).cpu().numpy().astype(int)
        mean = torch.as_tensor(self.code(classes), dtype=torch.float32, device=x.device)
        return mean, torch.zeros_like(mean)

    def decode(self, z):
        return torch.full((z.shape[0], 1, SIDE, SIDE), self.logit, dtype=torch.float32, device=z.device)


def factors_as_codes(classes):
    """Codes = the factor classes (a tiny jitter, so that no code is constant on a small sample)."""
    return classes.astype(float) + 1e-3 * np.sin(np.arange(classes.size)).reshape(classes.shape)


def noise_codes(classes, k=3):
    """Codes independent of the factors: a fixed random function of nothing but the call's order."""
    rng = np.random.default_rng(len(classes) * 7919 + int(classes.sum()))
    return rng.standard_normal((len(classes), k))


def duplicated_first_factor(classes):
    """Codes = factors, with the first factor's code duplicated: MIG's gap for that factor is 0,
    modularity stays 1 (each code informs one factor), completeness drops."""
    codes = factors_as_codes(classes)
    return np.concatenate([codes, codes[:, :1]], axis=1)
