"""Objectives. Each returns its loss terms by name; ``loss`` is the one to minimise.

Terms are means over the batch of per-image sums (over pixels for the reconstruction, over latent
dimensions for the KL), so the reconstruction term is the Bernoulli negative log-likelihood per
image, in nats.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def bernoulli_nll(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Per-image Bernoulli negative log-likelihood (nats), summed over pixels: shape (B,)."""
    return F.binary_cross_entropy_with_logits(logits, x, reduction="none").flatten(1).sum(1)


def gaussian_kl(mean: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """KL(N(mean, exp(logvar)) || N(0, I)) per latent dimension: shape (B, K)."""
    return 0.5 * (mean.pow(2) + logvar.exp() - logvar - 1.0)


def beta_vae(logits, x, mean, logvar, *, beta: float, kl_weight: float = 1.0) -> dict:
    """β-VAE (Higgins et al. 2017): reconstruction + β·KL. β = 1 is the plain VAE.

    ``kl_weight`` in [0, 1] scales the KL term for a linear warm-up.
    """
    reconstruction = bernoulli_nll(logits, x).mean()
    kl_per_dim = gaussian_kl(mean, logvar).mean(0)
    kl = kl_per_dim.sum()
    loss = reconstruction + beta * kl_weight * kl
    return {"loss": loss, "reconstruction": reconstruction, "kl": kl}


OBJECTIVES = {"vae": beta_vae, "beta_vae": beta_vae}


def loss_terms(config, logits, x, mean, logvar, kl_weight: float = 1.0) -> dict:
    """The loss terms of the config's objective."""
    beta = 1.0 if config.objective == "vae" else config.beta
    return OBJECTIVES[config.objective](logits, x, mean, logvar, beta=beta, kl_weight=kl_weight)
