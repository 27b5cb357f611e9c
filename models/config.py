"""The model-and-training configuration, validated on construction.

``ModelConfig`` is the flat record a YAML grid or a trial's config maps onto (and what checkpoints
and results store). It is made of three frozen, typed parts, each validating its own fields, and
each module takes the part it needs whole:

- ``NetworkConfig`` (``config.network``): the network's shape and the task it serves; the model
  builders (``models.vae``, ``models.architectures``, ``models.composition``) read it;
- ``LossConfig`` (``config.loss``): the objective and its hyperparameters; the objective classes
  read it (and CascadeVAE's and LieGroupVAE's models, the parts of it that shape them);
- ``OptimisationConfig`` (``config.optimisation``): Adam, the batch, the run's length and its
  schedules, the seed, input noise and bf16; the training engine reads it.

The rules that tie two parts together (FactorVAE's two half-batches, what the non-VAE tasks allow)
are ``ModelConfig``'s. The data and evaluation settings are the sweep's (``sweeps.trials``).

An objective's facts (its name and aliases, default likelihood and γ, whether it trains on pairs)
come from its class in ``models.registry``, the one table of objectives.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from models.registry import ALIASES, OBJECTIVES, objective_class

# architecture name → the image sizes it takes (see models.architectures)
IMAGE_SIZES = {
    "higgins": (64, 128),
    "burgess": (64, 128),
    "burgess_v2": (64, 128),
    "kim": (64, 128),
    "mpcnn": (64, 128),
    "montero": (64, 128),
    "abdi": (64, 128),
    "dittadi": (64, 128),
}
ARCHITECTURES = tuple(IMAGE_SIZES)

# objectives that train on pairs of images that differ in a few factors (weak supervision)
OBJECTIVES_ON_PAIRS = tuple(name for name, objective in OBJECTIVES.items() if objective.needs_pairs)
LIKELIHOODS = ("bernoulli", "mse")
PAIR_DIVERGENCES = ("symmetric_kl", "kl")
# what a run trains: a VAE on images (every objective above), Montero et al. 2021's ground-truth
# decoder (the true factor values → the image), or the composition network (M21 §2.3; M22)
TASKS = ("vae", "ground_truth_decoder", "composition")
TASK_ALIASES = {"gt_decoder": "ground_truth_decoder", "groundtruth_decoder": "ground_truth_decoder",
                "composition_net": "composition", "compositionnet": "composition"}
# the composition network's latent operations (models.composition)
LATENT_OPS = ("linear", "interpolation", "mlp")
# the objectives a composition network trains with: reconstruction of the target + β·KL
COMPOSITION_OBJECTIVES = ("vae", "beta_vae")


class ConfigError(ValueError):
    """An invalid config part; ``problems`` lists each, starting with the field it names."""

    def __init__(self, problems: list[str]):
        super().__init__("invalid model config: " + "; ".join(problems))
        self.problems = problems


def _type_problems(config) -> list[str]:
    """Each field against its declared type: whole numbers, finite numbers, strings, flags."""
    problems = []
    for field in fields(config):
        value, kind = getattr(config, field.name), str(field.type)
        if value is None and "None" in kind:
            continue
        if kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
            problems.append(f"{field.name}: expected a whole number; got {value!r}")
        elif kind.startswith("float") and (isinstance(value, bool)
                                           or not isinstance(value, (int, float))):
            problems.append(f"{field.name}: expected a number; got {value!r}")
        elif kind.startswith("float") and not math.isfinite(value):
            problems.append(f"{field.name}: must be a finite number; got {value!r}")
        elif kind.startswith("str") and not isinstance(value, str):
            problems.append(f"{field.name}: expected a name (text); got {value!r}")
        elif kind.startswith("bool") and not isinstance(value, bool):
            problems.append(f"{field.name}: expected true or false; got {value!r}")
        elif kind.startswith("tuple") and not (isinstance(value, (list, tuple)) and all(
                isinstance(m, int) and not isinstance(m, bool) for m in value)):
            problems.append(f"{field.name}: expected a list of whole numbers; got {value!r}")
    return problems


class _Part:
    """A part's validation: types first (TypeError), then ``_normalise`` and ``_problems``
    (``ConfigError``, a ValueError). The fields and their defaults are ``ModelConfig``'s."""

    def __post_init__(self) -> None:
        problems = _type_problems(self)
        if problems:
            raise TypeError("invalid model config: " + "; ".join(problems))
        self._normalise()
        problems = self._problems()
        if problems:
            raise ConfigError(problems)

    def _normalise(self) -> None:
        pass

    def _problems(self) -> list[str]:
        raise NotImplementedError


def _at_least(config, minimum, names) -> list[str]:
    return [f"{name}: must be at least {minimum}; got {getattr(config, name)}"
            for name in names if getattr(config, name) < minimum]


def _non_negative(config, names) -> list[str]:
    return [f"{name}: must be >= 0; got {getattr(config, name)}" for name in names
            if not getattr(config, name) >= 0]


def _positive(config, names) -> list[str]:
    return [f"{name}: must be > 0; got {getattr(config, name)}" for name in names
            if not getattr(config, name) > 0]


@dataclass(frozen=True)
class NetworkConfig(_Part):
    """The network: its architecture, its latent size, the images it reads, and the task it
    serves (a VAE, the ground-truth decoder, the composition network) with that task's options."""

    architecture: str
    latent_dim: int
    channels: int
    image_size: int
    task: str
    latent_op: str
    normalise_factors: bool

    def _normalise(self) -> None:
        object.__setattr__(self, "task", TASK_ALIASES.get(self.task, self.task))

    def _problems(self) -> list[str]:
        problems = []
        if self.architecture not in ARCHITECTURES:
            problems.append(
                f"architecture: unknown {self.architecture!r}; choose one of {', '.join(ARCHITECTURES)}"
            )
        elif self.image_size not in IMAGE_SIZES[self.architecture]:
            sizes = " or ".join(map(str, IMAGE_SIZES[self.architecture]))
            problems.append(f"image_size: {self.architecture} takes {sizes} px images; got {self.image_size}")
        problems += _at_least(self, 1, ("latent_dim",))
        if self.channels not in (1, 3):
            problems.append(f"channels: must be 1 or 3; got {self.channels}")
        if self.task not in TASKS:
            problems.append(f"task: unknown {self.task!r}; choose one of {', '.join(TASKS)}")
        elif self.latent_op not in LATENT_OPS:
            problems.append(f"latent_op: unknown {self.latent_op!r}; choose one of {', '.join(LATENT_OPS)}")
        return problems


@dataclass(frozen=True)
class LossConfig(_Part):
    """The objective and every hyperparameter of its loss, including the settings of the modules
    an objective trains itself (FactorVAE's discriminator, WAE-GAN's adversary) and of the models
    CascadeVAE and LieGroupVAE build (their category count, their Lie group)."""

    objective: str
    beta: float
    gamma: float | None
    capacity_max: float
    capacity_steps: int
    discriminator_lr: float
    discriminator_layers: int
    discriminator_width: int
    discriminator_negative_slope: float
    mmd_weight: float
    logvar_l1_weight: float
    pair_divergence: str
    pair_factors_changed: int
    adversarial_weight: float
    adversary_lr: float
    adversary_layers: int
    adversary_width: int
    prior_std: float
    beta_low: float
    beta_high: float
    cascade_steps: int
    discrete_categories: int
    discrete_warmup_steps: int
    duplicate_penalty: float
    lie_matrix_size: int
    group_reconstruction_weight: float
    hessian_weight: float
    commutator_weight: float
    lie_basis_init_std: float
    encoder_group_probability: float
    likelihood: str | None

    def _normalise(self) -> None:
        object.__setattr__(self, "objective", ALIASES.get(self.objective, self.objective))

    def _problems(self) -> list[str]:
        problems = []
        if self.objective not in OBJECTIVES:
            problems.append(f"objective: unknown {self.objective!r}; choose one of {', '.join(OBJECTIVES)}")
        problems += _non_negative(self, ("beta",))
        if self.gamma is not None and not self.gamma >= 0:
            problems.append(f"gamma: must be >= 0 or None; got {self.gamma}")
        problems += _non_negative(self, ("capacity_max", "capacity_steps"))
        problems += _positive(self, ("discriminator_lr",))
        if self.discriminator_layers < 1 or self.discriminator_width < 1:
            problems.append("discriminator_layers, discriminator_width: must be at least 1; got "
                            f"{self.discriminator_layers}, {self.discriminator_width}")
        problems += _non_negative(self, ("discriminator_negative_slope", "mmd_weight", "logvar_l1_weight"))
        if self.pair_divergence not in PAIR_DIVERGENCES:
            problems.append(f"pair_divergence: unknown {self.pair_divergence!r}; choose one of "
                            f"{', '.join(PAIR_DIVERGENCES)}")
        problems += _at_least(self, 1, ("pair_factors_changed",))
        # WAE-GAN's, CascadeVAE's and LieGroupVAE's fields
        problems += _non_negative(self, ("adversarial_weight", "beta_low", "duplicate_penalty",
                                         "group_reconstruction_weight", "hessian_weight", "commutator_weight",
                                         "lie_basis_init_std"))
        problems += _positive(self, ("adversary_lr", "prior_std"))
        problems += _at_least(self, 1, ("adversary_layers", "adversary_width", "lie_matrix_size"))
        problems += _non_negative(self, ("cascade_steps", "discrete_warmup_steps"))
        if not self.beta_high >= self.beta_low:
            problems.append(f"beta_high: must be >= beta_low ({self.beta_low}); got {self.beta_high}")
        problems += _at_least(self, 2, ("discrete_categories",))
        if not 0 <= self.encoder_group_probability <= 1:
            problems.append("encoder_group_probability: must be in [0, 1]; got "
                            f"{self.encoder_group_probability}")
        if self.likelihood is not None and self.likelihood not in LIKELIHOODS:
            problems.append(f"likelihood: unknown {self.likelihood!r}; choose one of "
                            f"{', '.join(LIKELIHOODS)} or None")
        return problems

    @property
    def resolved_gamma(self) -> float:
        """``gamma``, or the objective's default when unset."""
        default = objective_class(self.objective).default_gamma
        return self.gamma if self.gamma is not None else (1.0 if default is None else default)

    @property
    def resolved_likelihood(self) -> str:
        """``likelihood``, or the objective's default when unset."""
        if self.likelihood is not None:
            return self.likelihood
        return objective_class(self.objective).default_likelihood


@dataclass(frozen=True)
class OptimisationConfig(_Part):
    """How the model trains: Adam's learning rate and its schedule, the batch, the run's length,
    the KL warm-up, gradient clipping, the seed, Dittadi et al.'s input noise and bf16."""

    lr: float
    batch_size: int
    steps: int
    seed: int
    kl_warmup_steps: int
    grad_clip_norm: float | None
    epochs: float | None
    lr_milestones: tuple[int, ...]
    lr_decay: float
    input_noise_subpixel_std: float
    input_noise_greyscale_std: float
    bf16: bool | None

    def _normalise(self) -> None:
        object.__setattr__(self, "lr_milestones", tuple(int(m) for m in self.lr_milestones))

    def _problems(self) -> list[str]:
        problems = _positive(self, ("lr",)) + _at_least(self, 1, ("batch_size",))
        problems += _non_negative(self, ("steps",))
        if self.epochs is not None and not self.epochs > 0:
            problems.append(f"epochs: must be > 0 or None; got {self.epochs}")
        if any(b <= a for a, b in zip(self.lr_milestones, self.lr_milestones[1:])) or any(
                m < 1 for m in self.lr_milestones):
            problems.append(f"lr_milestones: must be increasing positive steps; got {self.lr_milestones}")
        if not 0 < self.lr_decay <= 1:
            problems.append(f"lr_decay: must be in (0, 1]; got {self.lr_decay}")
        problems += _non_negative(self, ("kl_warmup_steps",))
        if self.grad_clip_norm is not None and not self.grad_clip_norm > 0:
            problems.append(f"grad_clip_norm: must be > 0 or None; got {self.grad_clip_norm}")
        problems += _non_negative(self, ("input_noise_subpixel_std", "input_noise_greyscale_std"))
        return problems

    def total_steps(self, n_train: int) -> int:
        """The run's length in steps: ``steps``, or ``epochs`` passes over ``n_train`` rows."""
        if self.epochs is None:
            return self.steps
        return max(1, -(-int(round(self.epochs * n_train)) // self.batch_size))


PARTS = {"network": NetworkConfig, "loss": LossConfig, "optimisation": OptimisationConfig}


@dataclass(frozen=True)
class ModelConfig:
    """Everything that decides one model and how it trains.

    Defaults follow Montero et al. 2021 where the papers fix a value (Adam, lr 1e-4, batch 64,
    latent size 10). Dittadi et al. 2021's options (KL warm-up, gradient clipping, learning-rate
    halving, input noise) are off by default. See docs/models.md for every field and its part.

    Its parts (see the module docstring) are ``network``, ``loss`` and ``optimisation``, built and
    validated on construction; the flat fields hold the same values, normalised by the parts.
    """

    architecture: str = "burgess"
    objective: str = "beta_vae"
    beta: float = 1.0
    latent_dim: int = 10
    channels: int = 1
    image_size: int = 64
    lr: float = 1e-4
    batch_size: int = 64
    steps: int = 1000
    seed: int = 0
    kl_warmup_steps: int = 0
    grad_clip_norm: float | None = None
    # schedule
    epochs: float | None = None  # when set, the run lasts this many passes over the training rows
    lr_milestones: tuple[int, ...] = ()  # steps at which the learning rate is multiplied by lr_decay
    lr_decay: float = 0.5
    # objective hyperparameters
    gamma: float | None = None  # FactorVAE's TC weight / annealed VAE's capacity weight
    capacity_max: float = 25.0  # annealed VAE: C rises linearly from 0 to capacity_max (nats) ...
    capacity_steps: int = 100_000  # ... over this many steps
    discriminator_lr: float = 1e-5  # FactorVAE (M21: Adam lr 1e-5, betas (0.5, 0.9))
    discriminator_layers: int = 6
    discriminator_width: int = 1000
    discriminator_negative_slope: float = 0.01
    mmd_weight: float = 10.0  # WAE-MMD's λ1
    logvar_l1_weight: float = 1e-3  # WAE-MMD's λ2
    pair_divergence: str = "symmetric_kl"  # Ada-GVAE: D21's symmetrised KL, or "kl": 2·KL(q1‖q2)
    pair_factors_changed: int = 1  # Ada-GVAE: k, the factors a pair may differ in
    # WAE-GAN (Tolstikhin et al. 2018): λ·adversarial penalty from a latent adversary (its own Adam)
    adversarial_weight: float = 10.0  # λ (Montero et al. 2022's code: 10)
    adversary_lr: float = 1e-3  # the adversary's Adam lr, betas (0.5, 0.9) (M22's code: 1e-3)
    adversary_layers: int = 5  # linear layers: 4 hidden ReLU layers and the output (Tolstikhin et al.)
    adversary_width: int = 512
    prior_std: float = 1.0  # the prior N(0, prior_std² I) the adversary compares codes with
    # CascadeVAE / InfoCascade (Jeong & Song 2019; M22: 6 continuous latents, 3 categories, β (2, 10))
    beta_low: float = 2.0  # a continuous dimension's β once released ...
    beta_high: float = 10.0  # ... and before: dimension d is released at step (d + 1)·cascade_steps
    cascade_steps: int = 20_000
    discrete_categories: int = 3  # categories of the discrete latent (one-hot, after the continuous ones)
    discrete_warmup_steps: int = 0  # steps with the category code held at zero before inference starts
    duplicate_penalty: float = 1e-3  # λ: the category matching's cost per pair of batch rows sharing one
    # LieGroupVAE (Zhu et al. 2021, as M22 ran it: one 10×10 group, 10 latents)
    lie_matrix_size: int = 10  # group elements are m×m matrices; the decoder reads their m² entries
    group_reconstruction_weight: float = 0.1  # weight of ‖g_encoder − g_exp‖² (M22: hy_rec 0.1)
    hessian_weight: float = 40.0  # weight of the Hessian penalty Σ_{i≠j}‖A_i A_j‖² / K² (M22: 40)
    commutator_weight: float = 0.0  # weight of Σ_{i≠j}‖A_i A_j − A_j A_i‖² / K² (M22: 0)
    lie_basis_init_std: float = 1e-3  # the Lie-algebra basis starts N(0, std²) (M22: 0.001)
    encoder_group_probability: float = 0.2  # a training step decodes the encoder's group features (M22: 0.2)
    # None: the objective's own (mse for WAE-MMD, WAE-GAN and LieGroupVAE, else bernoulli)
    likelihood: str | None = None
    # input noise (D21), added to the encoder's input only
    input_noise_subpixel_std: float = 0.0
    input_noise_greyscale_std: float = 0.0
    bf16: bool | None = None  # bf16 autocast: None (default) on CUDA, False never, True (warns off CUDA)
    # the task (see docs/models.md): "vae" trains ``objective``; the other two ignore it
    task: str = "vae"
    latent_op: str = "linear"  # composition: how the two codes and the action combine (M21: linear)
    normalise_factors: bool = False  # ground-truth decoder: factors scaled to [0, 1] (the authors: raw)

    def __post_init__(self) -> None:
        problems = _type_problems(self)
        if problems:
            raise TypeError("invalid model config: " + "; ".join(problems))
        problems = []
        for name, part in PARTS.items():
            try:
                built = part(**{f.name: getattr(self, f.name) for f in fields(part)})
            except ConfigError as error:
                problems += error.problems
                continue
            object.__setattr__(self, name, built)
            for field in fields(part):  # the part's normalised values (aliases resolved...)
                object.__setattr__(self, field.name, getattr(built, field.name))
        if not problems:
            problems = self._cross_problems()
        if problems:
            raise ConfigError(problems)

    def _cross_problems(self) -> list[str]:
        """The rules that tie two parts together; options only the VAE engine implements are
        refused elsewhere."""
        problems = []
        if self.objective == "factor_vae" and self.batch_size < 2:
            problems.append("batch_size: factor_vae splits the batch in two halves; must be at least 2")
        if self.task == "vae":
            return problems
        if self.task == "composition" and self.objective not in COMPOSITION_OBJECTIVES:
            problems.append(f"objective: task 'composition' trains with the target's reconstruction + "
                            f"β·KL; choose one of {', '.join(COMPOSITION_OBJECTIVES)}; "
                            f"got {self.objective!r}")
        if self.likelihood not in (None, "bernoulli"):
            problems.append(f"likelihood: task {self.task!r} uses the Bernoulli likelihood; got "
                            f"{self.likelihood!r}")
        for name in ("input_noise_subpixel_std", "input_noise_greyscale_std"):
            if getattr(self, name) != 0:
                problems.append(f"{name}: only task 'vae' adds input noise; set it to 0 for task "
                                f"{self.task!r}")
        return problems

    @property
    def needs_pairs(self) -> bool:
        """Whether the objective trains on pairs of images (weak supervision)."""
        return self.task == "vae" and objective_class(self.objective).needs_pairs

    @property
    def resolved_gamma(self) -> float:
        """``gamma``, or the objective's default when unset."""
        return self.loss.resolved_gamma

    @property
    def resolved_likelihood(self) -> str:
        return self.loss.resolved_likelihood

    def total_steps(self, n_train: int) -> int:
        """The run's length in steps: ``steps``, or ``epochs`` passes over ``n_train`` rows."""
        return self.optimisation.total_steps(n_train)

    @classmethod
    def from_dict(cls, values: dict) -> ModelConfig:
        """Build from a dict that may hold other keys (a trial config); unknown keys are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    def to_dict(self) -> dict:
        return asdict(self)
