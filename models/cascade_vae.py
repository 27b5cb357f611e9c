"""CascadeVAE (Jeong & Song 2019, "Learning Discrete and Continuous Factors of Data via
Alternating Disentanglement"), the "InfoCascade" model Montero et al. 2022 ran.

The latent code is ``latent_dim`` continuous Gaussian dimensions followed by a one-hot discrete
category of ``discrete_categories`` values; the decoder reads both (M22: 6 continuous, 3
categories, so the decoder takes 9 numbers).

**Information cascade.** Every continuous dimension's KL starts under a high weight β_high; the
dimensions are released to β_low one at a time, dimension d (0-based) at step (d + 1)·
``cascade_steps`` (M22: β (2, 10), 20,000 steps each), so information flows into them in turn.
Loss = reconstruction + w·Σ_d β_d(step)·KL_d, w the engine's KL warm-up weight.

**Discrete inference (alternating).** The category is not inferred by the encoder. At each step,
with the continuous codes z sampled, the decoder reconstructs every image under every category
(no gradients), giving a cost table u[i, k] (the reconstruction cost of image i under category
k). The batch's categories are the assignment that minimises

    Σ_i u[i, d_i] + λ·Σ_k n_k(n_k − 1)/2,

n_k the number of rows given category k and λ = ``duplicate_penalty`` (the paper's pairwise term
that stops every image taking one category). Jeong & Song solve this with a minimum-cost-flow
solver; the per-category costs λ·0, λ·1, λ·2, … of successive members rise, so the same optimum is
an assignment problem over B rows × (K·B) category slots, which ``match_categories`` solves exactly
with ``scipy.optimize.linear_sum_assignment``. Then the model takes its gradient step with those
categories held fixed. Before ``discrete_warmup_steps`` the category code is all zeros (0, the
default, starts the matching at once; M22's CascadeVAE config holds it for 80,000 steps,
``disc_warmup = 8e4`` in their ``scripts/configs/vaes.py``, which the montero2022 preset sets).

**The code for the metrics** (``encode``, so ``models.inference.encode_means``): the continuous
posterior means followed by the one-hot category that reconstructs the image best from those means
(the argmin of u for that one image; no batch matching, so each image's code depends on it alone).
Its second output pads the continuous log-variances with zeros for the category.

The matching runs on the CPU and branches on the step, so this objective does not pack with
``torch.func.vmap`` (``vmappable = False``).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from scipy.optimize import linear_sum_assignment
from torch import nn

from models.architectures import ARCHITECTURES, decoder_factory, initialise
from models.objectives import RECONSTRUCTION, Objective, Schedule, gaussian_kl, posterior_sample

# ----------------------------------------------------------------------------------------------
# the mathematics


def released_dimensions(step: int, dims: int, cascade_steps: int) -> torch.Tensor:
    """Which continuous dimensions the cascade has released at ``step``: dimension d (0-based)
    from step (d + 1)·cascade_steps on. Boolean, shape (dims,)."""
    return step >= (torch.arange(dims) + 1) * cascade_steps


def cascade_betas(released: torch.Tensor, beta_low, beta_high) -> torch.Tensor:
    """Each continuous dimension's KL weight: β_low where released, β_high before."""
    return torch.where(released, beta_low, beta_high)


def match_categories(costs: np.ndarray, duplicate_penalty: float) -> np.ndarray:
    """The category of each row (B,) minimising Σ_i costs[i, d_i] + λ·Σ_k n_k(n_k − 1)/2.

    Exact: the m-th row to join category k adds λ·m, so the problem is an assignment of B rows
    to K·B slots, slot (k, m) costing costs[i, k] + λ·m for row i.
    """
    costs = np.asarray(costs, dtype=np.float64)
    rows, categories = costs.shape
    slot_cost = duplicate_penalty * np.arange(rows)  # the m-th member's extra cost
    table = (costs[:, :, None] + slot_cost[None, None, :]).reshape(rows, categories * rows)
    row_index, slot = linear_sum_assignment(table)
    chosen = np.empty(rows, dtype=np.int64)
    chosen[row_index] = slot // rows
    return chosen


# ----------------------------------------------------------------------------------------------
# the model


class CascadeVAE(nn.Module):
    """Encoder of ``latent_dim`` Gaussian dimensions; decoder of those plus a one-hot category."""

    def __init__(self, network, loss):
        """``network``: a ``NetworkConfig``; ``loss``: a ``LossConfig`` (its category count and
        likelihood)."""
        super().__init__()
        encoder, decoder = ARCHITECTURES[network.architecture][0], decoder_factory(network.architecture,
                                                                                   network.decoder)
        self.network = network
        self.categories = loss.discrete_categories
        self.likelihood = loss.resolved_likelihood
        self.encoder = encoder(network.channels, network.latent_dim, network.image_size)
        self.decoder = decoder(network.channels, network.latent_dim + self.categories, network.image_size)
        initialise(self)

    def encode_continuous(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mean and log-variance of the continuous dimensions."""
        return self.encoder(x)

    def category_costs(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """(B, K): the reconstruction cost of each image of ``x`` decoded from its code ``z`` under
        each category."""
        batch, k = z.shape[0], self.categories
        one_hot = torch.eye(k, device=z.device, dtype=z.dtype)
        codes = torch.cat([z.repeat_interleave(k, 0), one_hot.repeat(batch, 1)], dim=1)
        logits = self.decoder(codes).float()
        return RECONSTRUCTION[self.likelihood](logits, x.repeat_interleave(k, 0)).view(batch, k)

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The code the metrics see: [continuous means, one-hot best category], and the continuous
        log-variances padded with zeros (see the module docstring)."""
        mean, logvar = self.encode_continuous(x)
        best = self.category_costs(mean, x).argmin(1)
        one_hot = F.one_hot(best, self.categories).to(mean.dtype)
        return torch.cat([mean, one_hot], 1), torch.cat([logvar, torch.zeros_like(one_hot)], 1)

    def decode(self, code: torch.Tensor) -> torch.Tensor:
        """Logits of the images a batch of codes [continuous, one-hot category] decodes to."""
        return self.decoder(code)


# ----------------------------------------------------------------------------------------------
# the objective


class CascadeVAEObjective(Objective):
    """Reconstruction + w·Σ_d β_d(step)·KL_d with the categories matched over the batch (see the
    module docstring). Terms: ``weighted_kl`` (Σ_d β_d·KL_d), ``released_dimensions`` (how many
    are at β_low) and ``duplicate_pairs`` (rows sharing a category; 0 before the matching starts)."""

    loss_terms = ("reconstruction", "kl", "weighted_kl", "released_dimensions", "duplicate_pairs")
    model_class = CascadeVAE
    vmappable = False

    def __init__(self, config, latent_dim: int, dataset_size: int = 1):
        super().__init__(config, latent_dim, dataset_size)
        self.hyperparameter("beta_low", config.beta_low)
        self.hyperparameter("beta_high", config.beta_high)
        self.cascade_steps = config.cascade_steps
        self.discrete_warmup_steps = config.discrete_warmup_steps
        self.duplicate_penalty = config.duplicate_penalty

    def infer_categories(self, model, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The batch's one-hot categories by the matching (no gradients)."""
        with torch.no_grad():
            costs = model.category_costs(z, x)
        chosen = match_categories(costs.double().cpu().numpy(), self.duplicate_penalty)
        return F.one_hot(torch.from_numpy(chosen).to(z.device), model.categories).to(z.dtype)

    def forward(self, model, x, x_in, noise, schedule: Schedule) -> dict:
        mean, logvar = model.encode_continuous(x_in)
        mean, logvar = mean.float(), logvar.float()
        z = posterior_sample(mean, logvar, noise["posterior"])
        if int(schedule.step) >= self.discrete_warmup_steps:
            category = self.infer_categories(model, z, x)
        else:
            category = torch.zeros((z.shape[0], model.categories), device=z.device, dtype=z.dtype)
        logits = model.decode(torch.cat([z, category], 1)).float()
        reconstruction = RECONSTRUCTION[self.likelihood](logits, x).mean()
        kl_per_dimension = gaussian_kl(mean, logvar).mean(0)
        released = released_dimensions(int(schedule.step), self.latent_dim, self.cascade_steps).to(z.device)
        weighted_kl = (cascade_betas(released, self.beta_low, self.beta_high) * kl_per_dimension).sum()
        counts = category.sum(0)
        return {"loss": reconstruction + schedule.kl_weight * weighted_kl,
                "reconstruction": reconstruction, "kl": kl_per_dimension.sum(), "weighted_kl": weighted_kl,
                "released_dimensions": released.float().sum(),
                "duplicate_pairs": (counts * (counts - 1) / 2).sum()}
