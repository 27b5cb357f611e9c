"""DIP-VAE-I (Kumar et al. 2018): a VAE whose aggregate posterior means are pushed to be decorrelated.

loss = reconstruction + w·KL + λ_od·Σ_{i≠j} C_ij² + λ_d·Σ_i (C_ii − 1)², where C is the covariance
of the posterior means over the batch (the 1/B estimate) and w the KL warm-up weight. λ_od is the
config's ``gamma`` (default 10) and λ_d = 10·λ_od, disentanglement_lib's DIP-VAE-I setting.
"""

from __future__ import annotations

import torch

from models.objectives import Objective, Schedule, beta_vae


def covariance_penalties(mean: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(Σ_{i≠j} C_ij², Σ_i (C_ii − 1)²) for the covariance C of ``mean`` (B, K) over the batch."""
    centred = mean - mean.mean(0, keepdim=True)
    covariance = centred.T @ centred / mean.shape[0]
    diagonal = torch.diagonal(covariance)
    return covariance.pow(2).sum() - diagonal.pow(2).sum(), (diagonal - 1).pow(2).sum()


class DIPVAEObjective(Objective):
    """DIP-VAE-I; see the module docstring."""

    loss_terms = ("reconstruction", "kl", "dip_off_diagonal", "dip_diagonal")
    default_gamma = 10.0

    def __init__(self, config, latent_dim: int, dataset_size: int = 1):
        super().__init__(config, latent_dim, dataset_size)
        self.hyperparameter("lambda_off_diagonal", config.resolved_gamma)
        self.hyperparameter("lambda_diagonal", 10 * config.resolved_gamma)

    def forward(self, model, x, x_in, noise, schedule: Schedule) -> dict:
        logits, mean, logvar, _ = self.encode_sample_decode(model, x_in, noise)
        terms = beta_vae(logits, x, mean, logvar, beta=1.0, kl_weight=schedule.kl_weight,
                         likelihood=self.likelihood)
        off_diagonal, diagonal = covariance_penalties(mean)
        penalty = self.lambda_off_diagonal * off_diagonal + self.lambda_diagonal * diagonal
        terms["loss"] = terms["loss"] + penalty
        terms["dip_off_diagonal"], terms["dip_diagonal"] = off_diagonal, diagonal
        return terms
