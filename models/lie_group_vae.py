"""LieGroupVAE (Zhu, Xu & Tao 2021, "Commutative Lie Group VAE for Disentanglement Learning"),
as Montero et al. 2022 ran it: one group of m×m matrices (m = ``lie_matrix_size``, M22: 10),
K = ``latent_dim`` latents (M22: 10), squared-error reconstruction.

The model:
- the architecture's encoder gives m² **group features** g_E (its last layer's outputs, which
  for the other models are the mean and log-variance, read as one vector);
- two small networks (m² → 4m² → K, ReLU) give the posterior mean and log-variance of z;
- the code is mapped to a group element through a learned Lie-algebra basis A_1..A_K (m×m each,
  initialised N(0, ``lie_basis_init_std``²)): g(z) = exp(Σ_k z_k A_k), the matrix exponential;
- the decoder reads the m² entries of g(z). On a random ``encoder_group_probability`` of the
  training steps (M22: 0.2) it reads the encoder's g_E instead, which trains the decoder on the
  encoder's group features directly.

Loss = reconstruction + β·w·KL(q(z|x) ‖ N(0, I)) + group_reconstruction_weight·‖g_E − g(z)‖²
       + hessian_weight·H + commutator_weight·C,

with ‖g_E − g(z)‖² summed over the m² entries and averaged over the batch, and, over the K² pairs
of basis elements (the diagonal counting as zero, as in the authors' code):

- H = (1/K²)·Σ_{i≠j} ‖A_i A_j‖²_F, the bound on the decoder's Hessian penalty that Zhu et al.
  derive (zero when each pair of basis elements multiplies to zero, which also makes them commute);
- C = (1/K²)·Σ_{i≠j} ‖A_i A_j − A_j A_i‖²_F, the paper's commutator penalty. The authors' and
  M22's code compute A_i A_j − (A_i A_j)ᵀ instead; M22 ran it with weight 0, so nothing here rests
  on the difference.

M22's loss is reconstruction + γ·|KL − C| + 0.1·‖g_E − g(z)‖² + 40·H with γ = 1 and C = 0, which is
the loss above with β = 1 and no warm-up (the defaults). Simplification: one group (M22 used
one); the paper's several subgroups, each with its own latents, are not implemented.

``encode`` returns the posterior mean and log-variance of z, and ``decode(z)`` decodes g(z), so
the evaluation hooks read z. Randomness (the reparameterisation noise and which group the decoder
reads) is drawn up front by ``draw_noise``; ``forward`` is a pure function of its inputs.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from models.architectures import ARCHITECTURES, decoder_factory, initialise
from models.objectives import RECONSTRUCTION, Objective, Schedule, gaussian_kl, posterior_sample

# ----------------------------------------------------------------------------------------------
# the mathematics


def exponential_map(z: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """exp(Σ_k z_k A_k) for each row of ``z`` (B, K), ``basis`` (K, m, m): shape (B, m, m)."""
    return torch.linalg.matrix_exp(torch.einsum("bk,kij->bij", z, basis))


def basis_products(basis: torch.Tensor) -> torch.Tensor:
    """A_i A_j for every pair of basis elements, zero where i = j: shape (K, K, m, m)."""
    products = torch.einsum("iab,jbc->ijac", basis, basis)
    off_diagonal = 1.0 - torch.eye(basis.shape[0], dtype=basis.dtype, device=basis.device)
    return products * off_diagonal[:, :, None, None]


def hessian_penalty(basis: torch.Tensor) -> torch.Tensor:
    """(1/K²)·Σ_{i≠j} ‖A_i A_j‖²_F."""
    return basis_products(basis).pow(2).sum((2, 3)).mean()


def commutator_penalty(basis: torch.Tensor) -> torch.Tensor:
    """(1/K²)·Σ_{i≠j} ‖A_i A_j − A_j A_i‖²_F."""
    products = basis_products(basis)
    return (products - products.transpose(0, 1)).pow(2).sum((2, 3)).mean()


# ----------------------------------------------------------------------------------------------
# the model


def _posterior_head(features: int, latent_dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(features, 4 * features), nn.ReLU(), nn.Linear(4 * features, latent_dim))


class LieGroupVAE(nn.Module):
    """Encoder to group features, posterior heads, Lie-algebra basis, decoder of group elements."""

    def __init__(self, network, loss):
        """``network``: a ``NetworkConfig``; ``loss``: a ``LossConfig`` (the group's matrix size
        and the basis's initial scale)."""
        super().__init__()
        encoder, decoder = ARCHITECTURES[network.architecture][0], decoder_factory(network.architecture,
                                                                                   network.decoder)
        self.network = network
        self.matrix_size = loss.lie_matrix_size
        self.group_features = self.matrix_size ** 2
        # the architecture's last layer has 2·⌈m²/2⌉ outputs; the first m² are the group features
        self.encoder = encoder(network.channels, math.ceil(self.group_features / 2), network.image_size)
        self.posterior_mean = _posterior_head(self.group_features, network.latent_dim)
        self.posterior_logvar = _posterior_head(self.group_features, network.latent_dim)
        self.decoder = decoder(network.channels, self.group_features, network.image_size)
        initialise(self)
        self.lie_basis = nn.Parameter(
            loss.lie_basis_init_std * torch.randn(network.latent_dim, self.matrix_size, self.matrix_size))

    def encode_group(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The encoder's group features g_E (B, m²) and the posterior mean and log-variance of z."""
        first, second = self.encoder(x)
        group = torch.cat([first, second], 1)[:, :self.group_features]
        return group, self.posterior_mean(group), self.posterior_logvar(group)

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mean and log-variance of z."""
        _, mean, logvar = self.encode_group(x)
        return mean, logvar

    def group_element(self, z: torch.Tensor) -> torch.Tensor:
        """g(z) = exp(Σ_k z_k A_k), flattened to (B, m²)."""
        return exponential_map(z, self.lie_basis.to(z.dtype)).flatten(1)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Logits of the images the codes ``z`` decode to, through their group elements."""
        return self.decoder(self.group_element(z))


# ----------------------------------------------------------------------------------------------
# the objective


class LieGroupVAEObjective(Objective):
    """See the module docstring. Terms: ``group_reconstruction`` (‖g_E − g(z)‖², unweighted),
    ``hessian_penalty`` (H) and ``commutator_penalty`` (C)."""

    loss_terms = ("reconstruction", "kl", "group_reconstruction", "hessian_penalty", "commutator_penalty")
    default_likelihood = "mse"
    model_class = LieGroupVAE

    def __init__(self, config, latent_dim: int, dataset_size: int = 1):
        super().__init__(config, latent_dim, dataset_size)
        self.hyperparameter("beta", config.beta)
        self.hyperparameter("group_reconstruction_weight", config.group_reconstruction_weight)
        self.hyperparameter("hessian_weight", config.hessian_weight)
        self.hyperparameter("commutator_weight", config.commutator_weight)
        self.hyperparameter("encoder_group_probability", config.encoder_group_probability)

    def draw_noise(self, generator, rows, device, members=None):
        noise = super().draw_noise(generator, rows, device, members)
        noise["group_choice"] = torch.rand(() if members is None else (members,), generator=generator,
                                           device=device)
        return noise

    def forward(self, model, x, x_in, noise, schedule: Schedule) -> dict:
        group_encoder, mean, logvar = model.encode_group(x_in)
        group_encoder, mean, logvar = group_encoder.float(), mean.float(), logvar.float()
        z = posterior_sample(mean, logvar, noise["posterior"])
        group_exp = model.group_element(z)
        read_encoder = noise["group_choice"] < self.encoder_group_probability
        logits = model.decoder(torch.where(read_encoder, group_encoder, group_exp)).float()
        reconstruction = RECONSTRUCTION[self.likelihood](logits, x).mean()
        kl = gaussian_kl(mean, logvar).sum(1).mean()
        group_reconstruction = (group_encoder - group_exp).pow(2).sum(1).mean()
        basis = model.lie_basis.float()
        hessian, commutator = hessian_penalty(basis), commutator_penalty(basis)
        loss = (reconstruction + self.beta * schedule.kl_weight * kl
                + self.group_reconstruction_weight * group_reconstruction
                + self.hessian_weight * hessian + self.commutator_weight * commutator)
        return {"loss": loss, "reconstruction": reconstruction, "kl": kl,
                "group_reconstruction": group_reconstruction, "hessian_penalty": hessian,
                "commutator_penalty": commutator}
