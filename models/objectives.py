"""Objectives. Each returns its loss terms by name; ``loss`` is the one to minimise.

Terms are means over the batch of per-image sums (over pixels for the reconstruction, over latent
dimensions for the KL), so the reconstruction term is the negative log-likelihood per image, in
nats. Every objective also reports ``kl`` (the KL of the posterior to the N(0, I) prior), even
where the loss does not use it, so runs can be compared on one column.

The pure functions (``gaussian_kl``, ``permute_dims``, ``mmd_unbiased``, ``ada_gvae_aggregate``,
``total_correlation_decomposition``...) hold the mathematics and are tested in closed form. The
``Objective`` modules wrap them for the training engine. Their contract, which lets the engine
train one model alone or many packed with ``torch.func.vmap`` (models/packed.py) and get the same
numbers:

- ``draw_noise(generator, rows, device)`` draws every random number one step needs (the
  reparameterisation noise, WAE's prior samples, FactorVAE's permutation keys) from the model's
  seeded generator, in a fixed order, into a dict of tensors. With ``members=K`` it draws the
  numbers of K models at once, each tensor with a leading dimension of K, one draw per tensor (a
  vmapped pack's ``device_sampling``, models/packed.py).
- ``forward(model, x, x_in, noise, schedule)`` is a pure function of its inputs: the model, the
  clean batch (the reconstruction target), the encoder's input (the same batch, perhaps with input
  noise), that noise dict and the ``Schedule``. It draws nothing and changes nothing; it returns
  the loss terms, plus any tensors ``after_step`` needs under keys that start with ``_``.
- Scalar hyperparameters (β, γ, λ…) are buffers, so members of a pack can hold different values.
- An objective with an optimiser of its own (FactorVAE's discriminator) names the parameters it
  trains in ``own_parameters`` and their Adam settings in ``own_adam``, and gives the loss to
  minimise as a pure ``own_loss(aux, noise)``. ``after_step`` takes that optimiser's step after
  the model's.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from models.vae import VAE

# ----------------------------------------------------------------------------------------------
# the mathematics


def bernoulli_nll(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Per-image Bernoulli negative log-likelihood (nats), summed over pixels: shape (B,)."""
    return F.binary_cross_entropy_with_logits(logits, x, reduction="none").flatten(1).sum(1)


def squared_error(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Per-image squared error between the decoded pixels (sigmoid of the logits) and the image,
    summed over pixels: shape (B,). WAE-MMD's reconstruction cost."""
    return (torch.sigmoid(logits) - x).pow(2).flatten(1).sum(1)


RECONSTRUCTION = {"bernoulli": bernoulli_nll, "mse": squared_error}


def gaussian_kl(mean: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """KL(N(mean, exp(logvar)) || N(0, I)) per latent dimension: shape (B, K)."""
    return 0.5 * (mean.pow(2) + logvar.exp() - logvar - 1.0)


def gaussian_kl_between(mean1, logvar1, mean2, logvar2) -> torch.Tensor:
    """KL(N(mean1, exp(logvar1)) || N(mean2, exp(logvar2))) per dimension."""
    return 0.5 * (logvar2 - logvar1 + (logvar1.exp() + (mean1 - mean2).pow(2)) / logvar2.exp() - 1.0)


def gaussian_log_density(z: torch.Tensor, mean: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """log N(z; mean, exp(logvar)) per dimension (broadcasting)."""
    return -0.5 * (math.log(2 * math.pi) + logvar + (z - mean).pow(2) * torch.exp(-logvar))


def posterior_sample(mean: torch.Tensor, logvar: torch.Tensor, noise) -> torch.Tensor:
    """One reparameterised sample of N(mean, exp(logvar)): ``noise`` is standard normal noise of
    ``mean``'s shape, or a generator to draw it from."""
    if isinstance(noise, torch.Generator):
        noise = torch.randn(mean.shape, generator=noise, device=mean.device, dtype=mean.dtype)
    return mean + noise.to(mean.dtype) * torch.exp(0.5 * logvar)


def beta_vae(logits, x, mean, logvar, *, beta: float, kl_weight: float = 1.0,
             likelihood: str = "bernoulli") -> dict:
    """β-VAE (Higgins et al. 2017): reconstruction + β·KL. β = 1 is the plain VAE.

    ``kl_weight`` in [0, 1] scales the KL term for a linear warm-up.
    """
    if likelihood == "bernoulli":  # the same value as bernoulli_nll(...).mean(), in one fused reduction
        reconstruction = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / x.shape[0]
    else:
        reconstruction = RECONSTRUCTION[likelihood](logits, x).mean()
    kl = gaussian_kl(mean, logvar).sum(1).mean()
    loss = reconstruction + beta * kl_weight * kl
    return {"loss": loss, "reconstruction": reconstruction, "kl": kl}


def annealed_capacity(logits, x, mean, logvar, *, gamma: float, capacity: float,
                      likelihood: str = "bernoulli") -> dict:
    """Annealed capacity / CCI-VAE (Burgess et al. 2018): reconstruction + γ·|KL − C|."""
    reconstruction = RECONSTRUCTION[likelihood](logits, x).mean()
    kl = gaussian_kl(mean, logvar).sum(1).mean()
    loss = reconstruction + gamma * (kl - capacity).abs()
    # a number (one model) becomes a tensor by a fill on the device, not a copy the GPU waits for
    if isinstance(capacity, torch.Tensor):
        capacity = torch.as_tensor(capacity, dtype=kl.dtype, device=kl.device)
    else:
        capacity = torch.full((), capacity, dtype=kl.dtype, device=kl.device)
    return {"loss": loss, "reconstruction": reconstruction, "kl": kl, "capacity": capacity}


def permute_dims(z: torch.Tensor, keys) -> torch.Tensor:
    """Kim & Mnih's permutation: each latent dimension shuffled independently across the batch,
    which samples from the product of the marginals q(z_1)···q(z_K). ``keys`` are uniform random
    numbers of ``z``'s shape (each column's order is their argsort), or a generator to draw them."""
    if isinstance(keys, torch.Generator):
        keys = torch.rand(z.shape, generator=keys, device=z.device)
    return z.gather(0, keys.argsort(dim=0))


def inverse_multiquadric(a: torch.Tensor, b: torch.Tensor, c: float = 10.0,
                         scales=(0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)) -> torch.Tensor:
    """Σ_s C·s / (C·s + ‖a_i − b_j‖²): the kernel matrix (len(a), len(b)) WAE-MMD uses."""
    distances = torch.cdist(a, b).pow(2)
    return sum(c * s / (c * s + distances) for s in scales)


def mmd_unbiased(z: torch.Tensor, prior: torch.Tensor, **kernel) -> torch.Tensor:
    """The unbiased estimate of MMD² between the samples ``z`` and ``prior`` (each (n, K)):
    the mean of k over pairs of distinct z, plus over distinct prior samples, minus twice the
    mean over all cross pairs."""
    n = z.shape[0]
    off_diagonal = 1.0 - torch.eye(n, device=z.device, dtype=z.dtype)
    k_zz = (inverse_multiquadric(z, z, **kernel) * off_diagonal).sum() / (n * (n - 1))
    k_pp = (inverse_multiquadric(prior, prior, **kernel) * off_diagonal).sum() / (n * (n - 1))
    k_zp = inverse_multiquadric(z, prior, **kernel).mean()
    return k_zz + k_pp - 2.0 * k_zp


def mmd_m22_code(z: torch.Tensor, prior: torch.Tensor, c: float = 10.0,
                 scales=(0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)) -> torch.Tensor:
    """The MMD term as Montero et al. 2022's code computes it (mmrl/lost-in-latent-space
    src/training/math.py lines 15-46, ``inv_multiquad_sum`` and ``min_mean_discrepancy``): the
    kernel's squared distances are summed over every pair of the batch into one scalar before the
    kernel is applied, and each sum is divided by 2 (the length of its tuple of index lists):

        k(Q) = Σ_s C·s / (C·s + Q),
        MMD = [k(Σ_{i<j}‖p_i − p_j‖²) + k(Σ_{i<j}‖z_i − z_j‖²)] / 2 − k(Σ_{i,j}‖z_i − p_j‖²).

    With a batch of 64 ten-dimensional codes the sums are in the thousands, so every k is near 0
    and so is the term: it hardly regularises. Kept to reproduce M22's numbers; ``mmd_unbiased``
    is the correct estimate. ``z`` and ``prior`` are (n, K) (rows may hold several codes)."""
    def kernel(quadratic):
        return sum(c * s / (c * s + quadratic) for s in scales)

    n = z.shape[0]
    upper = torch.triu(torch.ones(n, n, device=z.device, dtype=torch.bool), diagonal=1)
    intra_z = (torch.cdist(z, z).pow(2) * upper).sum()
    intra_p = (torch.cdist(prior, prior).pow(2) * upper).sum()
    cross = torch.cdist(z, prior).pow(2).sum()
    return (kernel(intra_p) + kernel(intra_z)) / 2 - kernel(cross)


def ada_gvae_aggregate(mean1, logvar1, mean2, logvar2, divergence: str = "symmetric_kl"):
    """Ada-GVAE (Locatello et al. 2020): find each pair's shared dimensions and average them.

    Per pair, the divergence between the two posteriors of each dimension is compared with a
    threshold halfway between its smallest and largest value over the dimensions; dimensions below
    it are shared, and both images get the shared posterior there (mean of the means, mean of the
    variances). ``divergence`` is "symmetric_kl" (Dittadi et al. 2021: ½(KL(q1‖q2) + KL(q2‖q1)))
    or "kl" (disentanglement_lib's original: 2·KL(q1‖q2)).

    Returns (mean1, logvar1, mean2, logvar2, shared), ``shared`` a boolean (B, K) mask.
    """
    forward = gaussian_kl_between(mean1, logvar1, mean2, logvar2)
    if divergence == "symmetric_kl":
        delta = 0.5 * (forward + gaussian_kl_between(mean2, logvar2, mean1, logvar1))
    elif divergence == "kl":
        delta = 2.0 * forward
    else:
        raise ValueError(f"pair_divergence: unknown {divergence!r}; choose symmetric_kl or kl")
    threshold = 0.5 * (delta.amax(1, keepdim=True) + delta.amin(1, keepdim=True))
    shared = delta < threshold
    shared_mean = 0.5 * (mean1 + mean2)
    shared_logvar = torch.log(0.5 * (logvar1.exp() + logvar2.exp()))
    mean1, mean2 = torch.where(shared, shared_mean, mean1), torch.where(shared, shared_mean, mean2)
    logvar1 = torch.where(shared, shared_logvar, logvar1)
    logvar2 = torch.where(shared, shared_logvar, logvar2)
    return mean1, logvar1, mean2, logvar2, shared


def total_correlation_decomposition(z, mean, logvar, dataset_size: int):
    """β-TCVAE's decomposition of the KL (Chen et al. 2018), estimated on the batch with
    minibatch-weighted sampling: (mutual information, total correlation, dimension-wise KL),
    each a scalar averaged over the batch."""
    batch = z.shape[0]
    pairwise = gaussian_log_density(z.unsqueeze(1), mean.unsqueeze(0), logvar.unsqueeze(0))  # (B, B, K)
    log_norm = math.log(batch * dataset_size)
    log_qz = torch.logsumexp(pairwise.sum(2), dim=1) - log_norm
    log_prod_qz = (torch.logsumexp(pairwise, dim=1) - log_norm).sum(1)
    log_qz_given_x = gaussian_log_density(z, mean, logvar).sum(1)
    log_pz = gaussian_log_density(z, torch.zeros_like(z), torch.zeros_like(z)).sum(1)
    mutual_information = (log_qz_given_x - log_qz).mean()
    total_correlation = (log_qz - log_prod_qz).mean()
    dimension_wise_kl = (log_prod_qz - log_pz).mean()
    return mutual_information, total_correlation, dimension_wise_kl


# ----------------------------------------------------------------------------------------------
# the objectives the engine trains with


class Schedule(NamedTuple):
    """Where the run is: the step about to be taken, the KL warm-up weight and the capacity.
    The weights may be floats or 0-d tensors (one per member, inside a vmapped pack)."""

    step: int
    kl_weight: float | torch.Tensor = 1.0
    capacity: float | torch.Tensor = 0.0


class Objective(nn.Module):
    """One image batch → its loss terms. Subclasses override ``forward`` (see the module's
    docstring for the contract) and, if they need more randomness, ``draw_noise``."""

    # What the registry (models.registry) and the config read of an objective:
    loss_terms: tuple[str, ...] = ("reconstruction", "kl")  # the terms it reports besides "loss"
    default_likelihood = "bernoulli"  # the reconstruction term when ``likelihood`` is unset
    default_gamma: float | None = None  # γ when ``gamma`` is unset (if it has a γ)
    model_class = VAE  # the model it trains (CascadeVAE and LieGroupVAE have their own latents)
    needs_pairs = False
    draws_prior = False  # whether each step also draws N(0, I) prior samples (WAE-MMD, WAE-GAN)
    reads_dataset_size = False  # whether the loss reads the training set's size (β-TCVAE's estimator)
    own_adam: dict | None = None  # Adam settings of the objective's own optimiser, if it has one
    own_module: str | None = None  # the attribute holding the module it trains

    def __init__(self, config, latent_dim: int, dataset_size: int = 1):
        """``config``: a ``models.config.LossConfig`` (a ``ModelConfig``'s ``loss``), the objective
        and its hyperparameters; ``latent_dim``: the size of the codes it draws noise for;
        ``dataset_size``: the number of training rows (β-TCVAE's estimator)."""
        super().__init__()
        self.config = config
        self.dataset_size = dataset_size
        self.likelihood = config.likelihood or self.default_likelihood
        self.latent_dim = latent_dim
        self._own_optimizer: torch.optim.Optimizer | None = None

    def hyperparameter(self, name: str, value: float) -> None:
        """Hold a scalar hyperparameter as a buffer (not saved: it comes from the config)."""
        self.register_buffer(name, torch.tensor(float(value)), persistent=False)

    def draw_noise(self, generator: torch.Generator, rows: int, device,
                   members: int | None = None) -> dict[str, torch.Tensor]:
        """The step's random numbers: the reparameterisation noise of ``rows`` codes, and prior
        samples for the objectives that compare codes with the prior. With ``members``, those of
        that many models in one draw per tensor, each of shape (members, ...)."""
        lead = () if members is None else (members,)
        noise = {"posterior": torch.randn((*lead, rows, self.latent_dim), generator=generator, device=device)}
        if self.draws_prior:
            noise["prior"] = torch.randn((*lead, rows, self.latent_dim), generator=generator, device=device)
        return noise

    def encode_sample_decode(self, model, x_in, noise: dict):
        mean, logvar = model.encode(x_in)
        mean, logvar = mean.float(), logvar.float()
        z = posterior_sample(mean, logvar, noise["posterior"])
        return model.decode(z).float(), mean, logvar, z

    # -- an optimiser of the objective's own ---------------------------------------------------

    def train_own(self, attribute: str, module: nn.Module, lr: float, betas=(0.5, 0.9)) -> None:
        """Hold ``module`` (a discriminator, an adversary) as ``attribute`` and give it an Adam of
        the objective's own, stepped by ``after_step`` on ``own_loss``."""
        setattr(self, attribute, module)
        self.own_module = attribute
        self.own_adam = {"lr": lr, "betas": betas}
        self._own_optimizer = torch.optim.Adam(self.own_parameters(), **self.own_adam)

    def own_parameters(self) -> list[nn.Parameter]:
        """The parameters the objective trains itself (none by default)."""
        return [] if self.own_module is None else list(getattr(self, self.own_module).parameters())

    def own_loss(self, aux: dict, noise: dict) -> torch.Tensor:
        raise NotImplementedError

    def after_step(self, aux: dict, noise: dict) -> dict:
        """After the model's optimiser step: one step of the objective's own optimiser, if any;
        returns its loss as an extra term. ``aux`` holds ``forward``'s ``_`` entries."""
        if self.own_adam is None:
            return {}
        if self._own_optimizer is None:
            self._own_optimizer = torch.optim.Adam(self.own_parameters(), **self.own_adam)
        loss = self.own_loss(aux, noise)
        self._own_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self._own_optimizer.step()
        return {self.own_loss_name: loss.detach()}

    own_loss_name = "own_loss"

    def get_extra_state(self):
        if self._own_optimizer is None:
            return {}
        return {"own_optimizer": self._own_optimizer.state_dict()}

    def set_extra_state(self, state):
        saved = state.get("own_optimizer", state.get("discriminator_optimizer"))
        if saved is not None and self.own_adam is not None:
            self._own_optimizer = torch.optim.Adam(self.own_parameters(), **self.own_adam)
            self._own_optimizer.load_state_dict(saved)


class VAEObjective(Objective):
    """VAE and β-VAE: reconstruction + β·w·KL, w the KL warm-up weight."""

    def __init__(self, config, latent_dim: int, dataset_size: int = 1):
        super().__init__(config, latent_dim, dataset_size)
        self.hyperparameter("beta", 1.0 if config.objective == "vae" else config.beta)

    def forward(self, model, x, x_in, noise, schedule: Schedule) -> dict:
        logits, mean, logvar, _ = self.encode_sample_decode(model, x_in, noise)
        return beta_vae(logits, x, mean, logvar, beta=self.beta, kl_weight=schedule.kl_weight,
                        likelihood=self.likelihood)


class AnnealedCapacityObjective(Objective):
    """CCI-VAE / annealed capacity: reconstruction + γ·|KL − C(step)|."""

    loss_terms = ("reconstruction", "kl", "capacity")
    default_gamma = 1000.0  # Burgess et al. 2018

    def __init__(self, config, latent_dim: int, dataset_size: int = 1):
        super().__init__(config, latent_dim, dataset_size)
        self.hyperparameter("gamma", config.resolved_gamma)

    def forward(self, model, x, x_in, noise, schedule: Schedule) -> dict:
        logits, mean, logvar, _ = self.encode_sample_decode(model, x_in, noise)
        return annealed_capacity(logits, x, mean, logvar, gamma=self.gamma,
                                 capacity=schedule.capacity, likelihood=self.likelihood)


class Discriminator(nn.Sequential):
    """FactorVAE's discriminator: ``layers`` linear layers (``width`` wide, leaky ReLU between)
    giving two logits: [the code came from q(z), it came from the product of marginals]."""

    def __init__(self, latent_dim: int, layers: int = 6, width: int = 1000, negative_slope: float = 0.01):
        modules, features = [], latent_dim
        for _ in range(layers - 1):
            modules += [nn.Linear(features, width), nn.LeakyReLU(negative_slope)]
            features = width
        modules.append(nn.Linear(features, 2))
        super().__init__(*modules)


class FactorVAEObjective(Objective):
    """FactorVAE (Kim & Mnih 2018): reconstruction + w·KL + γ·TC.

    TC is estimated by the discriminator's log-odds on the batch's codes. After the model's step,
    the discriminator takes one step of its own Adam (lr ``discriminator_lr``, betas (0.5, 0.9)):
    the first half of the batch's codes are "joint" samples, the second half, each dimension
    permuted independently across it, are "product of marginals" samples (M21: batch 128, two
    halves of 64).
    """

    loss_terms = ("reconstruction", "kl", "total_correlation", "discriminator")
    default_gamma = 35.0  # Kim & Mnih 2018 on dSprites

    own_loss_name = "discriminator"

    def __init__(self, config, latent_dim: int, dataset_size: int = 1):
        super().__init__(config, latent_dim, dataset_size)
        self.hyperparameter("gamma", config.resolved_gamma)
        self.train_own("discriminator", Discriminator(latent_dim, config.discriminator_layers,
                                                      config.discriminator_width,
                                                      config.discriminator_negative_slope),
                       lr=config.discriminator_lr)

    def draw_noise(self, generator, rows, device, members=None):
        noise = super().draw_noise(generator, rows, device, members)
        lead = () if members is None else (members,)
        noise["permutation"] = torch.rand((*lead, rows - rows // 2, self.latent_dim), generator=generator,
                                          device=device)
        return noise

    def forward(self, model, x, x_in, noise, schedule: Schedule) -> dict:
        logits, mean, logvar, z = self.encode_sample_decode(model, x_in, noise)
        terms = beta_vae(logits, x, mean, logvar, beta=1.0, kl_weight=schedule.kl_weight,
                         likelihood=self.likelihood)
        odds = self.discriminator(z).float()
        total_correlation = (odds[:, 0] - odds[:, 1]).mean()
        terms["loss"] = terms["loss"] + self.gamma * total_correlation
        terms["total_correlation"] = total_correlation
        terms["_codes"] = z.detach()
        return terms

    def own_loss(self, aux: dict, noise: dict) -> torch.Tensor:
        codes = aux["_codes"]
        half = codes.shape[0] // 2
        keys = noise["permutation"][:half]
        joint, marginals = codes[:half], permute_dims(codes[half:2 * half], keys)
        odds = self.discriminator(torch.cat([joint, marginals])).float()
        labels = torch.cat([torch.zeros(half, dtype=torch.long, device=odds.device),
                            torch.ones(half, dtype=torch.long, device=odds.device)])
        return F.cross_entropy(odds, labels)


class BetaTCVAEObjective(Objective):
    """β-TCVAE (Chen et al. 2018): reconstruction + w·(MI + β·TC + dimension-wise KL), each
    estimated on the batch with minibatch-weighted sampling over the training set's size."""

    loss_terms = ("reconstruction", "kl", "mutual_information", "total_correlation", "dimension_wise_kl")
    reads_dataset_size = True

    def __init__(self, config, latent_dim: int, dataset_size: int = 1):
        super().__init__(config, latent_dim, dataset_size)
        self.hyperparameter("beta", config.beta)

    def forward(self, model, x, x_in, noise, schedule: Schedule) -> dict:
        logits, mean, logvar, z = self.encode_sample_decode(model, x_in, noise)
        reconstruction = RECONSTRUCTION[self.likelihood](logits, x).mean()
        mi, tc, dwkl = total_correlation_decomposition(z, mean, logvar, self.dataset_size)
        loss = reconstruction + schedule.kl_weight * (mi + self.beta * tc + dwkl)
        return {"loss": loss, "reconstruction": reconstruction, "kl": gaussian_kl(mean, logvar).sum(1).mean(),
                "mutual_information": mi, "total_correlation": tc, "dimension_wise_kl": dwkl}


class WAEMMDObjective(Objective):
    """WAE-MMD (Tolstikhin et al. 2018) with Rubenstein et al.'s λ2·‖logvar‖₁ term, Montero et al.
    2022's loss: squared error + λ1·MMD(q(z), N(0, prior_std² I)) (inverse multiquadric kernel) +
    λ2·‖logvar‖₁. The MMD is the unbiased estimate of MMD² by default; ``mmd_estimator:
    m22_code`` computes what M22's code computes instead (``mmd_m22_code``, near 0), and M22's
    prior is ``prior_std: 2`` (docs/models.md, "WAE-MMD two ways")."""

    loss_terms = ("reconstruction", "kl", "mmd", "logvar_l1")
    default_likelihood = "mse"

    draws_prior = True

    def __init__(self, config, latent_dim: int, dataset_size: int = 1):
        super().__init__(config, latent_dim, dataset_size)
        self.hyperparameter("mmd_weight", config.mmd_weight)
        self.hyperparameter("logvar_l1_weight", config.logvar_l1_weight)
        self.hyperparameter("prior_std", config.prior_std)
        self.mmd = mmd_m22_code if config.mmd_estimator == "m22_code" else mmd_unbiased

    def forward(self, model, x, x_in, noise, schedule: Schedule) -> dict:
        logits, mean, logvar, z = self.encode_sample_decode(model, x_in, noise)
        reconstruction = RECONSTRUCTION[self.likelihood](logits, x).mean()
        mmd = self.mmd(z, self.prior_std * noise["prior"].to(z.dtype))
        logvar_l1 = logvar.abs().sum(1).mean()
        loss = reconstruction + self.mmd_weight * mmd + self.logvar_l1_weight * logvar_l1
        return {"loss": loss, "reconstruction": reconstruction, "kl": gaussian_kl(mean, logvar).sum(1).mean(),
                "mmd": mmd, "logvar_l1": logvar_l1}


class AdaGVAEObjective(Objective):
    """Ada-GVAE (Locatello et al. 2020; Dittadi et al. 2021's symmetrised-KL variant).

    The batch holds pairs: rows i and B/2 + i are one pair. Loss = ½(rec₁ + rec₂) + β·w·½(KL₁ +
    KL₂) with the shared dimensions' posteriors averaged (see ``ada_gvae_aggregate``).
    """

    loss_terms = ("reconstruction", "kl", "shared_dimensions")

    needs_pairs = True

    def __init__(self, config, latent_dim: int, dataset_size: int = 1):
        super().__init__(config, latent_dim, dataset_size)
        self.hyperparameter("beta", config.beta)

    def forward(self, model, x, x_in, noise, schedule: Schedule, pairs: bool = True) -> dict:
        if not pairs or x.shape[0] % 2:
            raise ValueError("objective: 'ada_gvae' trains on pairs of images (rows i and B/2 + i); "
                             "it was fed single images")
        mean, logvar = model.encode(x_in)
        m1, m2 = mean.float().chunk(2)
        lv1, lv2 = logvar.float().chunk(2)
        m1, lv1, m2, lv2, shared = ada_gvae_aggregate(m1, lv1, m2, lv2, self.config.pair_divergence)
        mean, logvar = torch.cat([m1, m2]), torch.cat([lv1, lv2])
        logits = model.decode(posterior_sample(mean, logvar, noise["posterior"])).float()
        terms = beta_vae(logits, x, mean, logvar, beta=self.beta, kl_weight=schedule.kl_weight,
                         likelihood=self.likelihood)
        terms["shared_dimensions"] = shared.float().sum(1).mean()
        return terms
