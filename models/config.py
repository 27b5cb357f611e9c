"""The model-and-training configuration, validated on construction.

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


@dataclass(frozen=True)
class ModelConfig:
    """Everything that decides one model and how it trains.

    Defaults follow Montero et al. 2021 where the papers fix a value (Adam, lr 1e-4, batch 64,
    latent size 10). Dittadi et al. 2021's options (KL warm-up, gradient clipping, learning-rate
    halving, input noise) are off by default. See docs/models.md for every field.
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
    bf16: bool = False  # bf16 autocast, on CUDA only
    # the task (see docs/models.md): "vae" trains ``objective``; the other two ignore it
    task: str = "vae"
    latent_op: str = "linear"  # composition: how the two codes and the action combine (M21: linear)
    normalise_factors: bool = False  # ground-truth decoder: factors scaled to [0, 1] (the authors: raw)

    def __post_init__(self) -> None:
        problems = self._type_problems()
        if problems:
            raise TypeError("invalid model config: " + "; ".join(problems))
        objective = ALIASES.get(self.objective, self.objective)
        object.__setattr__(self, "objective", objective)
        object.__setattr__(self, "task", TASK_ALIASES.get(self.task, self.task))
        if isinstance(self.lr_milestones, (list, tuple)):
            object.__setattr__(self, "lr_milestones", tuple(int(m) for m in self.lr_milestones))
        problems = []
        if self.architecture not in ARCHITECTURES:
            problems.append(
                f"architecture: unknown {self.architecture!r}; choose one of {', '.join(ARCHITECTURES)}"
            )
        elif self.image_size not in IMAGE_SIZES[self.architecture]:
            sizes = " or ".join(map(str, IMAGE_SIZES[self.architecture]))
            problems.append(f"image_size: {self.architecture} takes {sizes} px images; got {self.image_size}")
        if objective not in OBJECTIVES:
            problems.append(f"objective: unknown {objective!r}; choose one of {', '.join(OBJECTIVES)}")
        if not self.beta >= 0:
            problems.append(f"beta: must be >= 0; got {self.beta}")
        if self.latent_dim < 1:
            problems.append(f"latent_dim: must be at least 1; got {self.latent_dim}")
        if self.channels not in (1, 3):
            problems.append(f"channels: must be 1 or 3; got {self.channels}")
        if not self.lr > 0:
            problems.append(f"lr: must be > 0; got {self.lr}")
        if self.batch_size < 1:
            problems.append(f"batch_size: must be at least 1; got {self.batch_size}")
        if objective == "factor_vae" and self.batch_size < 2:
            problems.append("batch_size: factor_vae splits the batch in two halves; must be at least 2")
        if self.steps < 0:
            problems.append(f"steps: must be >= 0; got {self.steps}")
        if self.epochs is not None and not self.epochs > 0:
            problems.append(f"epochs: must be > 0 or None; got {self.epochs}")
        if not isinstance(self.lr_milestones, tuple) or any(
                b <= a for a, b in zip(self.lr_milestones, self.lr_milestones[1:])) or any(
                m < 1 for m in self.lr_milestones):
            problems.append(f"lr_milestones: must be increasing positive steps; got {self.lr_milestones}")
        if not 0 < self.lr_decay <= 1:
            problems.append(f"lr_decay: must be in (0, 1]; got {self.lr_decay}")
        if self.kl_warmup_steps < 0:
            problems.append(f"kl_warmup_steps: must be >= 0; got {self.kl_warmup_steps}")
        if self.grad_clip_norm is not None and not self.grad_clip_norm > 0:
            problems.append(f"grad_clip_norm: must be > 0 or None; got {self.grad_clip_norm}")
        if self.gamma is not None and not self.gamma >= 0:
            problems.append(f"gamma: must be >= 0 or None; got {self.gamma}")
        if not self.capacity_max >= 0:
            problems.append(f"capacity_max: must be >= 0; got {self.capacity_max}")
        if self.capacity_steps < 0:
            problems.append(f"capacity_steps: must be >= 0; got {self.capacity_steps}")
        if not self.discriminator_lr > 0:
            problems.append(f"discriminator_lr: must be > 0; got {self.discriminator_lr}")
        if self.discriminator_layers < 1 or self.discriminator_width < 1:
            problems.append("discriminator_layers, discriminator_width: must be at least 1; got "
                            f"{self.discriminator_layers}, {self.discriminator_width}")
        if not self.discriminator_negative_slope >= 0:
            problems.append("discriminator_negative_slope: must be >= 0; got "
                            f"{self.discriminator_negative_slope}")
        if not self.mmd_weight >= 0:
            problems.append(f"mmd_weight: must be >= 0; got {self.mmd_weight}")
        if not self.logvar_l1_weight >= 0:
            problems.append(f"logvar_l1_weight: must be >= 0; got {self.logvar_l1_weight}")
        if self.pair_divergence not in PAIR_DIVERGENCES:
            problems.append(f"pair_divergence: unknown {self.pair_divergence!r}; choose one of "
                            f"{', '.join(PAIR_DIVERGENCES)}")
        if self.pair_factors_changed < 1:
            problems.append(f"pair_factors_changed: must be at least 1; got {self.pair_factors_changed}")
        problems += self._model_specific_problems()
        problems += self._task_problems()
        if self.likelihood is not None and self.likelihood not in LIKELIHOODS:
            problems.append(f"likelihood: unknown {self.likelihood!r}; choose one of "
                            f"{', '.join(LIKELIHOODS)} "
                            "or None")
        for name in ("input_noise_subpixel_std", "input_noise_greyscale_std"):
            if not getattr(self, name) >= 0:
                problems.append(f"{name}: must be >= 0; got {getattr(self, name)}")
        if problems:
            raise ValueError("invalid model config: " + "; ".join(problems))

    def _type_problems(self) -> list[str]:
        """Each field against its declared type: whole numbers, finite numbers, strings, flags."""
        problems = []
        for field in fields(self):
            value, kind = getattr(self, field.name), str(field.type)
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
            elif kind == "bool" and not isinstance(value, bool):
                problems.append(f"{field.name}: expected true or false; got {value!r}")
            elif kind.startswith("tuple") and not (isinstance(value, (list, tuple)) and all(
                    isinstance(m, int) and not isinstance(m, bool) for m in value)):
                problems.append(f"{field.name}: expected a list of whole numbers; got {value!r}")
        return problems

    def _model_specific_problems(self) -> list[str]:
        """WAE-GAN's, CascadeVAE's and LieGroupVAE's fields."""
        problems = []
        for name in ("adversarial_weight", "beta_low", "duplicate_penalty", "group_reconstruction_weight",
                     "hessian_weight", "commutator_weight", "lie_basis_init_std"):
            if not getattr(self, name) >= 0:
                problems.append(f"{name}: must be >= 0; got {getattr(self, name)}")
        for name in ("adversary_lr", "prior_std"):
            if not getattr(self, name) > 0:
                problems.append(f"{name}: must be > 0; got {getattr(self, name)}")
        for name in ("adversary_layers", "adversary_width", "lie_matrix_size"):
            if getattr(self, name) < 1:
                problems.append(f"{name}: must be at least 1; got {getattr(self, name)}")
        for name in ("cascade_steps", "discrete_warmup_steps"):
            if getattr(self, name) < 0:
                problems.append(f"{name}: must be >= 0; got {getattr(self, name)}")
        if not self.beta_high >= self.beta_low:
            problems.append(f"beta_high: must be >= beta_low ({self.beta_low}); got {self.beta_high}")
        if self.discrete_categories < 2:
            problems.append(f"discrete_categories: must be at least 2; got {self.discrete_categories}")
        if not 0 <= self.encoder_group_probability <= 1:
            problems.append("encoder_group_probability: must be in [0, 1]; got "
                            f"{self.encoder_group_probability}")
        return problems

    def _task_problems(self) -> list[str]:
        """``task`` and its fields; options only the VAE engine implements are refused elsewhere."""
        if self.task not in TASKS:
            return [f"task: unknown {self.task!r}; choose one of {', '.join(TASKS)}"]
        problems = []
        if self.latent_op not in LATENT_OPS:
            problems.append(f"latent_op: unknown {self.latent_op!r}; choose one of {', '.join(LATENT_OPS)}")
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
        default = objective_class(self.objective).default_gamma
        return self.gamma if self.gamma is not None else (1.0 if default is None else default)

    @property
    def resolved_likelihood(self) -> str:
        if self.likelihood is not None:
            return self.likelihood
        return objective_class(self.objective).default_likelihood

    def total_steps(self, n_train: int) -> int:
        """The run's length in steps: ``steps``, or ``epochs`` passes over ``n_train`` rows."""
        if self.epochs is None:
            return self.steps
        return max(1, -(-int(round(self.epochs * n_train)) // self.batch_size))

    @classmethod
    def from_dict(cls, values: dict) -> ModelConfig:
        """Build from a dict that may hold other keys (a trial config); unknown keys are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    def to_dict(self) -> dict:
        return asdict(self)
