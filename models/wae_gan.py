"""WAE-GAN (Tolstikhin et al. 2018, "Wasserstein Auto-Encoders", Algorithm 2).

The encoder's codes are pushed towards the prior by an adversary in latent space: a small network
D that tells prior samples z ~ N(0, σ²I) (σ = ``prior_std``) from the codes z̃ of the batch. Its
output is one logit ℓ, with D(z) = sigmoid(ℓ(z)) the probability that z came from the prior.

- The model minimises   c(x, G(z̃)) + λ·(−log D(z̃))   per image, c the squared error summed over
  pixels, plus λ2·‖logvar‖₁ (``logvar_l1_weight``, as WAE-MMD here) because disgen's encoders are
  Gaussian and the paper's penalty alone lets their variances collapse.
- After the model's Adam step, the adversary takes one step of its own Adam (``adversary_lr``,
  betas (0.5, 0.9)) on the cross-entropy −log D(z) − log(1 − D(z̃)), the batch's codes held fixed.

The paper's adversary maximises λ·[log D(z) + log(1 − D(z̃))]; the constant λ only rescales its
gradient, which Adam undoes, so disgen leaves it out. Montero et al. 2022's code differs in three
ways we do not follow (say so when comparing): it penalises the log-odds log(D/(1 − D)) of the
codes (FactorVAE's form) rather than −log D, its adversary has two output logits, and its prior
samples are 2·N(0, I) (set ``prior_std=2`` for that).

Randomness (the reparameterisation noise and the prior samples) is drawn up front by
``draw_noise``; ``forward`` and ``own_loss`` are pure functions of their inputs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.objectives import RECONSTRUCTION, Objective, Schedule, gaussian_kl


class Adversary(nn.Sequential):
    """``layers`` linear layers, ``width`` wide with ReLU between, ending in one logit: the
    log-odds that a code was drawn from the prior (Tolstikhin et al.: 4 × 512 ReLU, then 1)."""

    def __init__(self, latent_dim: int, layers: int = 5, width: int = 512):
        modules, features = [], latent_dim
        for _ in range(layers - 1):
            modules += [nn.Linear(features, width), nn.ReLU()]
            features = width
        modules.append(nn.Linear(features, 1))
        super().__init__(*modules)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return super().forward(z).squeeze(-1)


def adversarial_penalty(code_logits: torch.Tensor) -> torch.Tensor:
    """The encoder's penalty −log D(z̃) = softplus(−ℓ(z̃)), averaged over the batch."""
    return F.softplus(-code_logits).mean()


def adversary_loss(prior_logits: torch.Tensor, code_logits: torch.Tensor) -> torch.Tensor:
    """The adversary's cross-entropy: −log D(z) over prior samples plus −log(1 − D(z̃)) over the
    codes, each averaged over its samples."""
    return F.softplus(-prior_logits).mean() + F.softplus(code_logits).mean()


class WAEGANObjective(Objective):
    """WAE-GAN: squared error + λ·(−log D(z̃)) + λ2·‖logvar‖₁, with the adversary D trained by its
    own Adam after each model step (see the module docstring)."""

    loss_terms = ("reconstruction", "kl", "adversarial_penalty", "logvar_l1", "adversary")
    default_likelihood = "mse"
    own_loss_name = "adversary"
    draws_prior = True

    def __init__(self, config, latent_dim: int, dataset_size: int = 1):
        super().__init__(config, latent_dim, dataset_size)
        self.hyperparameter("adversarial_weight", config.adversarial_weight)
        self.hyperparameter("logvar_l1_weight", config.logvar_l1_weight)
        self.hyperparameter("prior_std", config.prior_std)
        self.train_own("adversary", Adversary(latent_dim, config.adversary_layers, config.adversary_width),
                       lr=config.adversary_lr)

    def forward(self, model, x, x_in, noise, schedule: Schedule) -> dict:
        logits, mean, logvar, z = self.encode_sample_decode(model, x_in, noise)
        reconstruction = RECONSTRUCTION[self.likelihood](logits, x).mean()
        penalty = adversarial_penalty(self.adversary(z).float())
        logvar_l1 = logvar.abs().sum(1).mean()
        loss = reconstruction + self.adversarial_weight * penalty + self.logvar_l1_weight * logvar_l1
        return {"loss": loss, "reconstruction": reconstruction, "kl": gaussian_kl(mean, logvar).sum(1).mean(),
                "adversarial_penalty": penalty, "logvar_l1": logvar_l1, "_codes": z.detach()}

    def own_loss(self, aux: dict, noise: dict) -> torch.Tensor:
        codes = aux["_codes"]
        prior = self.prior_std * noise["prior"].to(codes.dtype)
        return adversary_loss(self.adversary(prior).float(), self.adversary(codes).float())
