"""The model-and-training configuration, validated on construction: one declaration per setting.

Each setting is declared once, as a field of ``ModelConfig`` made by ``setting(...)``: its Python
type (the annotation), its default, the part it belongs to, its check, its doc, and for the results
its unit, what a null means and whether pack members may differ in it. Everything else is derived
from the declarations (``SETTINGS``): the three parts below, ``models.packed.SCALAR_FIELDS``, the
setting columns of ``analysis.schema`` and the settings table of docs/models.md
(``settings_table``; ``write_settings_table()`` rewrites it).

``ModelConfig`` is the flat record a YAML grid or a trial's config maps onto (and what checkpoints
and results store). It is made of three frozen, typed parts, each validating its own fields, and
each module takes the part it needs whole:

- ``NetworkConfig`` (``config.network``): the network's shape and the task it serves; the model
  builders (``models.vae``, ``models.architectures``, ``models.composition``) read it;
- ``LossConfig`` (``config.loss``): the objective and its hyperparameters; the objective classes
  read it (and CascadeVAE's and LieGroupVAE's models, the parts of it that shape them);
- ``OptimisationConfig`` (``config.optimisation``): Adam, the batch, the run's length and its
  schedules, the seed, input noise and bf16; the training engine reads it.

The rules that tie two settings together (FactorVAE's two half-batches, what the non-VAE tasks
allow, CascadeVAE's two βs) are ``ModelConfig``'s. The data settings are ``data_pipeline.config``'s,
the evaluation settings the sweep's (``sweeps.trials``).

An objective's facts (its name and aliases, default likelihood and γ, whether it trains on pairs)
come from its class in ``models.registry``, the one table of objectives.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib
import types
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

from models import architectures
from models.registry import ALIASES, OBJECTIVES, objective_class

# the encoder and decoder networks, by name (models.architectures); every one takes these image sizes
ARCHITECTURES = tuple(architectures.ARCHITECTURES)
IMAGE_SIZES_PX = (64, 128)
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
LATENT_OPS = ("linear", "interpolation", "fixed_interpolation", "mlp")
# the objectives a composition network trains with: reconstruction + β·KL (VAE, β-VAE), or
# reconstruction + λ1·MMD + λ2·‖logvar‖₁ (WAE-MMD, as M22 trained its CompositionNets)
COMPOSITION_OBJECTIVES = ("vae", "beta_vae", "wae_mmd")
# what a composition network reconstructs: the target only (M21 appendix A's reading), or, as M22's
# code, the reference, the transform and the target (models.composition)
COMPOSITION_LOSSES = ("target", "all_three")
# WAE-MMD's MMD: the unbiased estimate (correct), or the expression M22's code computes
# (models.objectives.mmd_m22_code)
MMD_ESTIMATORS = ("unbiased", "m22_code")


class ConfigError(ValueError):
    """An invalid config part; ``problems`` lists each, starting with the field it names."""

    def __init__(self, problems: list[str]):
        super().__init__("invalid model config: " + "; ".join(problems))
        self.problems = problems


# -- checks: what a setting's value must be -------------------------------------------------------

@dataclass(frozen=True)
class Check:
    """A rule for one setting's value: ``holds(value)``, else the error ``must`` (the docs table shows
    ``rule``). A None, where the setting's type allows it, is never checked."""

    rule: str
    holds: Callable[[typing.Any], bool]
    must: str

    def problem(self, name: str, value, nullable: bool) -> str | None:
        if self.holds(value):
            return None
        return f"{name}: {self.must}{' or None' if nullable else ''}; got {value}"


def at_least(minimum: int) -> Check:
    return Check(f"≥ {minimum}", lambda value: value >= minimum, f"must be at least {minimum}")


NON_NEGATIVE = Check("≥ 0", lambda value: value >= 0, "must be >= 0")
POSITIVE = Check("> 0", lambda value: value > 0, "must be > 0")


def between(low: float, high: float, *, open_low: bool = False) -> Check:
    """``low`` ≤ value ≤ ``high`` (``low`` < value with ``open_low``)."""
    interval = f"{'(' if open_low else '['}{low:g}, {high:g}]"
    return Check(interval, lambda value: (low < value if open_low else low <= value) and value <= high,
                 f"must be in {interval}")


class OneOf(Check):
    """A value from a fixed list: names (``unknown 'x'; choose one of …``) or numbers."""

    def __init__(self, choices: tuple):
        super().__init__(", ".join(map(str, choices)), lambda value: value in choices,
                         "must be " + " or ".join(map(str, choices)))
        object.__setattr__(self, "choices", choices)

    def problem(self, name: str, value, nullable: bool) -> str | None:
        if not isinstance(self.choices[0], str) or self.holds(value):
            return super().problem(name, value, nullable)
        choices = ", ".join(self.choices) + (" or None" if nullable else "")
        return f"{name}: unknown {value!r}; choose one of {choices}"


INCREASING_STEPS = Check("increasing, ≥ 1", lambda steps: all(b > a for a, b in zip(steps, steps[1:]))
                         and all(step >= 1 for step in steps), "must be increasing positive steps")


# -- the declaration -------------------------------------------------------------------------------

PART_NAMES = ("network", "loss", "optimisation")


@dataclass(frozen=True)
class Setting:
    """One setting's declaration (see ``setting``); ``name``, ``type`` (the annotation's text),
    ``hint`` (the Python type) and ``default`` are filled from its field of ``ModelConfig``."""

    part: str
    doc: str
    check: Check | None = None
    unit: str | None = None
    null: str | None = None
    varies_in_vmap: bool = False
    normalise: Callable | None = None
    name: str = ""
    type: str = ""
    hint: typing.Any = None
    default: typing.Any = None


def setting(part: str, default, doc: str, check: Check | None = None, *, unit: str | None = None,
            null: str | None = None, varies_in_vmap: bool = False, normalise: Callable | None = None):
    """Declare a setting of ``ModelConfig``: the field's annotation is its type, checked on
    construction. ``part``: network, loss or optimisation. ``check``: a rule for its value (a None
    the type allows passes). ``unit``: its results column's unit. ``null``: what a null means in a
    finished model's results row (settings without one are never null there). ``varies_in_vmap``:
    the members of one vmapped group may differ in it (a scalar that changes no shape and no code
    path).
    ``normalise``: maps an accepted value to its stored form (an alias to its name)."""
    if part not in PART_NAMES:
        raise ValueError(f"part: unknown {part!r}; choose one of {', '.join(PART_NAMES)}")
    declared = Setting(part, doc, check, unit, null, varies_in_vmap, normalise)
    return dataclasses.field(default=default, metadata={"setting": declared})


@dataclass(frozen=True)
class ModelConfig:
    """Everything that decides one model and how it trains.

    Defaults follow Montero et al. 2021 where the papers fix a value (Adam, lr 1e-4, batch 64,
    latent size 10). Dittadi et al. 2021's options (KL warm-up, gradient clipping, learning-rate
    halving, input noise) are off by default. The table of docs/models.md gives every setting.

    Its parts (see the module docstring) are ``network``, ``loss`` and ``optimisation``, built and
    validated on construction; the flat fields hold the same values, normalised.
    """

    architecture: str = setting("network", "burgess", "the encoder and decoder networks (docs/models.md, "
                                "Architectures)", OneOf(ARCHITECTURES))
    objective: str = setting("loss", "beta_vae", "what a VAE trains with (models/registry.py; aliases "
                             "accepted)", OneOf(tuple(OBJECTIVES)),
                             normalise=lambda name: ALIASES.get(name, name))
    beta: float = setting("loss", 1.0, "β, the KL's weight", NON_NEGATIVE, varies_in_vmap=True)
    latent_dim: int = setting("network", 10, "latent dimensions (CascadeVAE: the continuous ones)",
                              at_least(1))
    channels: int = setting("network", 1, "image channels (the dataset's)", OneOf((1, 3)))
    image_size: int = setting("network", 64, "image side", OneOf(IMAGE_SIZES_PX), unit="px")
    lr: float = setting("optimisation", 1e-4, "Adam's learning rate", POSITIVE, varies_in_vmap=True)
    batch_size: int = setting("optimisation", 64, "images a step (Ada-GVAE: pairs)", at_least(1),
                              unit="images")
    steps: int = setting("optimisation", 1000, "the run's length, unless epochs is set", NON_NEGATIVE,
                         unit="steps")
    seed: int = setting("optimisation", 0, "seeds the model's initialisation, its batches (seed), its "
                        "input noise (seed + 1) and FactorVAE's discriminator (seed + 2)",
                        varies_in_vmap=True)
    kl_warmup_steps: int = setting("optimisation", 0, "the KL's weight rises linearly 0 → 1 over these "
                                   "steps (0: off)", NON_NEGATIVE, unit="steps", varies_in_vmap=True)
    grad_clip_norm: float | None = setting("optimisation", None, "clips the global gradient norm (None: "
                                           "off)", POSITIVE, null="no gradient clipping", varies_in_vmap=True)
    epochs: float | None = setting("optimisation", None, "when set, the run lasts this many epochs: passes "
                                   "over the training rows, or epoch_length steps each", POSITIVE,
                                   unit="epochs", null="the run's length is steps")
    epoch_length: int | None = setting("optimisation", None, "with epochs: the steps one epoch lasts (None: "
                                       "a pass over the training rows)", at_least(1), unit="steps",
                                       null="an epoch is a pass over the training rows")
    lr_milestones: tuple[int, ...] = setting("optimisation", (), "steps at which the learning rate is "
                                             "multiplied by lr_decay", INCREASING_STEPS, unit="steps",
                                             varies_in_vmap=True,
                                             normalise=lambda steps: tuple(map(int, steps)))
    lr_decay: float = setting("optimisation", 0.5, "the learning rate's factor at each milestone",
                              between(0, 1, open_low=True), varies_in_vmap=True)
    gamma: float | None = setting("loss", None, "γ: FactorVAE's TC weight, the annealed VAE's capacity "
                                  "weight, DIP-VAE's λ_od (None: the objective's default)", NON_NEGATIVE,
                                  null="the objective has no γ", varies_in_vmap=True)
    capacity_max: float = setting("loss", 25.0, "annealed VAE: the capacity C rises linearly from 0 to "
                                  "this", NON_NEGATIVE, unit="nats", varies_in_vmap=True)
    capacity_steps: int = setting("loss", 100_000, "annealed VAE: the steps C takes to reach capacity_max",
                                  NON_NEGATIVE, unit="steps", varies_in_vmap=True)
    discriminator_lr: float = setting("loss", 1e-5, "FactorVAE: the discriminator's Adam lr, betas "
                                      "(0.5, 0.9) (M21)", POSITIVE, varies_in_vmap=True)
    discriminator_layers: int = setting("loss", 6, "FactorVAE: the discriminator's hidden layers",
                                        at_least(1))
    discriminator_width: int = setting("loss", 1000, "FactorVAE: the discriminator's width", at_least(1))
    discriminator_negative_slope: float = setting("loss", 0.01, "FactorVAE: the discriminator's LeakyReLU "
                                                  "slope", NON_NEGATIVE)
    mmd_weight: float = setting("loss", 10.0, "WAE-MMD: λ1, the MMD's weight", NON_NEGATIVE,
                                varies_in_vmap=True)
    logvar_l1_weight: float = setting("loss", 1e-3, "WAE-MMD and WAE-GAN: λ2, the weight of ‖logvar‖₁",
                                      NON_NEGATIVE, varies_in_vmap=True)
    pair_divergence: str = setting("loss", "symmetric_kl", "Ada-GVAE: D21's symmetrised KL, or kl: "
                                   "2·KL(q1‖q2)", OneOf(PAIR_DIVERGENCES))
    pair_factors_changed: int = setting("loss", 1, "Ada-GVAE: k, the factors a pair may differ in",
                                        at_least(1), varies_in_vmap=True)
    # WAE-GAN (Tolstikhin et al. 2018): λ·adversarial penalty from a latent adversary (its own Adam)
    adversarial_weight: float = setting("loss", 10.0, "WAE-GAN: λ, the adversarial penalty's weight "
                                        "(M22's code: 10)", NON_NEGATIVE, varies_in_vmap=True)
    adversary_lr: float = setting("loss", 1e-3, "WAE-GAN: the adversary's Adam lr, betas (0.5, 0.9) "
                                  "(M22's code)", POSITIVE, varies_in_vmap=True)
    adversary_layers: int = setting("loss", 5, "WAE-GAN: the adversary's linear layers, 4 hidden ReLU "
                                    "layers and the output (Tolstikhin et al.)", at_least(1))
    adversary_width: int = setting("loss", 512, "WAE-GAN: the adversary's width", at_least(1))
    prior_std: float = setting("loss", 1.0, "WAE-GAN and WAE-MMD: the prior N(0, prior_std² I) the codes "
                               "are compared with (M22's code: 2)", POSITIVE, varies_in_vmap=True)
    mmd_estimator: str = setting("loss", "unbiased", "WAE-MMD: unbiased (the correct MMD²) or m22_code "
                                 "(M22's code's batch-summed kernel, near 0; docs/models.md)",
                                 OneOf(MMD_ESTIMATORS))
    # CascadeVAE / InfoCascade (Jeong & Song 2019; M22: 6 continuous latents, 3 categories, β (2, 10))
    beta_low: float = setting("loss", 2.0, "CascadeVAE: a continuous dimension's β once released",
                              NON_NEGATIVE)
    beta_high: float = setting("loss", 10.0, "CascadeVAE: its β before (≥ beta_low); dimension d is released "
                               "at step (d + 1)·cascade_steps")
    cascade_steps: int = setting("loss", 20_000, "CascadeVAE: steps between releases", NON_NEGATIVE,
                                 unit="steps")
    discrete_categories: int = setting("loss", 3, "CascadeVAE: categories of the discrete latent (one-hot, "
                                       "after the continuous ones)", at_least(2))
    discrete_warmup_steps: int = setting("loss", 0, "CascadeVAE: steps with the category code held at "
                                         "zero before inference starts", NON_NEGATIVE, unit="steps")
    duplicate_penalty: float = setting("loss", 1e-3, "CascadeVAE: λ, the category matching's cost per "
                                       "pair of batch rows sharing one", NON_NEGATIVE)
    # LieGroupVAE (Zhu et al. 2021, as M22 ran it: one 10×10 group, 10 latents)
    lie_matrix_size: int = setting("loss", 10, "LieGroupVAE: group elements are m×m matrices; the decoder "
                                   "reads their m² entries", at_least(1))
    group_reconstruction_weight: float = setting("loss", 0.1, "LieGroupVAE: weight of ‖g_encoder − "
                                                 "g_exp‖² (M22: hy_rec 0.1)", NON_NEGATIVE,
                                                 varies_in_vmap=True)
    hessian_weight: float = setting("loss", 40.0, "LieGroupVAE: weight of the Hessian penalty "
                                    "Σ_{i≠j}‖A_i A_j‖² / K² (M22: 40)", NON_NEGATIVE, varies_in_vmap=True)
    commutator_weight: float = setting("loss", 0.0, "LieGroupVAE: weight of Σ_{i≠j}‖A_i A_j − A_j A_i‖² "
                                       "/ K² (M22: 0)", NON_NEGATIVE, varies_in_vmap=True)
    lie_basis_init_std: float = setting("loss", 1e-3, "LieGroupVAE: the Lie-algebra basis starts "
                                        "N(0, std²) (M22: 0.001)", NON_NEGATIVE, varies_in_vmap=True)
    encoder_group_probability: float = setting("loss", 0.2, "LieGroupVAE: the share of steps that decode "
                                               "the encoder's group features (M22: 0.2)", between(0, 1),
                                               varies_in_vmap=True)
    likelihood: str | None = setting("loss", None, "the reconstruction term; None: the objective's own "
                                     "(mse for WAE-MMD, WAE-GAN and LieGroupVAE, else bernoulli)",
                                     OneOf(LIKELIHOODS))
    # input noise (D21), added to the encoder's input only
    input_noise_subpixel_std: float = setting("optimisation", 0.0, "D21's input noise: σ per subpixel, "
                                              "on the encoder's input only (0: off)", NON_NEGATIVE,
                                              varies_in_vmap=True)
    input_noise_greyscale_std: float = setting("optimisation", 0.0, "D21's input noise: σ of greyscale "
                                               "noise drawn at 1/16 resolution, upsampled (0: off)",
                                               NON_NEGATIVE, varies_in_vmap=True)
    bf16: bool | None = setting("optimisation", None, "bf16 autocast: None on CUDA, False never, True (warns "
                                "off CUDA)", null="the model never reported, so the device that decides "
                                "it (on CUDA by default) is unknown")
    task: str = setting("network", "vae", "what the run trains: vae trains objective; the other two "
                        "ignore it (docs/models.md)", OneOf(TASKS),
                        normalise=lambda name: TASK_ALIASES.get(name, name))
    latent_op: str = setting("network", "linear", "composition: how the two codes and the action combine "
                             "(M21: linear; M22: interpolation, fixed_interpolation)", OneOf(LATENT_OPS))
    composition_loss: str = setting("loss", "target", "composition: reconstruct the target only, or "
                                    "all_three: reference, transform and target, KLs summed (M22's code)",
                                    OneOf(COMPOSITION_LOSSES))
    decoder: str = setting("network", "mirror", "the decoder: the architecture's own (mirror) or M22's "
                           "spatial broadcast decoder (sbd3, sbd4)", OneOf(architectures.DECODER_NAMES))
    normalise_factors: bool = setting("network", False, "ground-truth decoder: factors scaled to [0, 1] "
                                      "(the authors: raw values)")

    def __post_init__(self) -> None:
        validate(self)
        for name, part in PARTS.items():
            object.__setattr__(self, name, part(**{f.name: getattr(self, f.name) for f in fields(part)}))
        problems = self._rules()
        if problems:
            raise ConfigError(problems)

    def _rules(self) -> list[str]:
        """The rules that tie two settings together; options only the VAE engine implements are
        refused elsewhere."""
        problems = []
        if not self.beta_high >= self.beta_low:
            problems.append(f"beta_high: must be >= beta_low ({self.beta_low}); got {self.beta_high}")
        if self.objective == "factor_vae" and self.batch_size < 2:
            problems.append("batch_size: factor_vae splits the batch in two halves; must be at least 2")
        if self.task == "vae":
            return problems
        if self.task == "composition" and self.objective not in COMPOSITION_OBJECTIVES:
            problems.append(f"objective: task 'composition' trains with the reconstruction + β·KL or "
                            f"WAE-MMD's terms; choose one of {', '.join(COMPOSITION_OBJECTIVES)}; "
                            f"got {self.objective!r}")
        if self.task == "composition" and self.objective == "wae_mmd":
            pass  # WAE-MMD's own likelihood (mse, or the one set)
        elif self.likelihood not in (None, "bernoulli"):
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
        """The run's length in steps: ``steps``, or ``epochs`` epochs (``OptimisationConfig``)."""
        return self.optimisation.total_steps(n_train)

    @classmethod
    def from_dict(cls, values: dict) -> ModelConfig:
        """Build from a dict that may hold other keys (a trial config); unknown keys are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    def to_dict(self) -> dict:
        return asdict(self)


# -- type checks, on the real type hints -----------------------------------------------------------

@functools.cache
def _arms(hint) -> tuple:
    """The types a hint allows: ``int | None`` → (int, NoneType)."""
    union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    return typing.get_args(hint) if union else (hint,)


@functools.cache
def _accepts(hint) -> Callable[[typing.Any], bool]:
    """Whether a value is of ``hint``: a whole number is a number too, a flag is neither, and a
    tuple may come as a list (YAML's sequences)."""
    arms = _arms(hint)
    if len(arms) > 1:
        tests = [_accepts(arm) for arm in arms]
        return lambda value: any(test(value) for test in tests)
    if typing.get_origin(hint) is tuple:
        member = _accepts(typing.get_args(hint)[0])
        return lambda value: isinstance(value, (list, tuple)) and all(member(m) for m in value)
    if hint in (int, float):
        kinds = int if hint is int else (int, float)
        return lambda value: isinstance(value, kinds) and not isinstance(value, bool)
    return lambda value: isinstance(value, hint)  # str, bool, NoneType


_KINDS = {int: "a whole number", float: "a number", str: "a name (text)", bool: "true or false",
          tuple[int, ...]: "a list of whole numbers"}


def _type_problem(name: str, value, hint) -> str | None:
    """What is wrong with ``value``'s type for ``hint``, naming the field; None if nothing."""
    if _accepts(hint)(value):
        if isinstance(value, float) and not math.isfinite(value):
            return f"{name}: must be a finite number; got {value!r}"
        return None
    arms = [arm for arm in _arms(hint) if arm is not type(None)]
    wanted = " or ".join(_KINDS.get(arm, str(arm)) for arm in arms)
    return f"{name}: expected {wanted}{', or None' if len(arms) < len(_arms(hint)) else ''}; got {value!r}"


@functools.cache
def declarations(cls: type) -> dict[str, Setting]:
    """The settings a dataclass declares with ``setting``, by name, in field order, each with its
    name, type (its annotation's text), Python type and default filled in (``SETTINGS`` is
    ``ModelConfig``'s; a part's fields carry theirs)."""
    hints = typing.get_type_hints(cls)
    return {f.name: f.metadata["setting"] if f.metadata["setting"].name else dataclasses.replace(
        f.metadata["setting"], name=f.name, type=f.type, hint=hints[f.name], default=f.default)
        for f in fields(cls)}


def validate(config) -> None:
    """Check a dataclass's fields against their declarations (``setting``): types first (a
    TypeError), then each value normalised and checked (``ConfigError``, a ValueError); each problem
    names its field. ``ModelConfig`` and its parts call it on construction."""
    declared = declarations(type(config)).values()
    problems = [p for s in declared if (p := _type_problem(s.name, getattr(config, s.name), s.hint))]
    if problems:
        raise TypeError("invalid model config: " + "; ".join(problems))
    for s in declared:
        if s.normalise is not None:
            object.__setattr__(config, s.name, s.normalise(getattr(config, s.name)))
    problems = [p for s in declared if s.check is not None and (value := getattr(config, s.name)) is not None
                and (p := s.check.problem(s.name, value, type(None) in _arms(s.hint)))]
    if problems:
        raise ConfigError(problems)


# every setting's declaration, by name, in ModelConfig's order
SETTINGS: dict[str, Setting] = declarations(ModelConfig)

# What a training budget is: the run's length (steps, or epochs of epoch_length steps) and every
# schedule counted in steps, so that a scaled run follows the same curve, compressed or stretched.
# epoch_length is the length of one epoch, not of the run: scaling epochs scales the run.
BUDGET_SETTINGS = tuple(name for name, s in SETTINGS.items()
                        if s.unit in ("steps", "epochs") and name != "epoch_length")


def scaled_budget(config: ModelConfig, factor: float) -> dict:
    """The budget settings of ``config`` (its own values or the defaults it took) multiplied by
    ``factor``, as settings to replace: steps and the step-counted schedules rounded to whole steps
    (at least 1 where they were at least 1; 0, "off", stays 0), epochs as a number (None, "the run's
    length is steps", stays None and is left out). A run of 0.5 trains half as long, with its KL
    warm-up, lr milestones, annealing and CascadeVAE releases halved with it."""
    if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
        raise ValueError(f"budget: must be a finite number > 0; got {factor!r}")

    def steps(value: int) -> int:
        return 0 if value == 0 else max(1, int(round(value * factor)))

    out = {}
    for name in BUDGET_SETTINGS:
        value = getattr(config, name)
        if value is None:
            continue
        if name == "epochs":
            out[name] = float(value) * factor
        elif isinstance(value, (tuple, list)):
            scaled = sorted({steps(int(v)) for v in value})
            out[name] = tuple(scaled)
        else:
            out[name] = steps(int(value))
    return out


# -- the parts, made from the declarations ---------------------------------------------------------

def _part(name: str):
    """Make the decorated class the frozen dataclass of the settings declared in part ``name``, each
    with its type and default, validated on construction as ``ModelConfig`` validates them."""

    def make(cls):
        declared = [s for s in SETTINGS.values() if s.part == name]
        cls.__annotations__ = {s.name: s.hint for s in declared}
        for s in declared:  # the part's field keeps its declaration
            setattr(cls, s.name, dataclasses.field(default=s.default, metadata={"setting": s}))
        cls.__post_init__ = validate
        return dataclass(frozen=True)(cls)

    return make


@_part("network")
class NetworkConfig:
    """The network: its architecture, its latent size, the images it reads, and the task it
    serves (a VAE, the ground-truth decoder, the composition network) with that task's options."""


@_part("loss")
class LossConfig:
    """The objective and every hyperparameter of its loss, including the settings of the modules
    an objective trains itself (FactorVAE's discriminator, WAE-GAN's adversary) and of the models
    CascadeVAE and LieGroupVAE build (their category count, their Lie group)."""

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


@_part("optimisation")
class OptimisationConfig:
    """How the model trains: Adam's learning rate and its schedule, the batch, the run's length,
    the KL warm-up, gradient clipping, the seed, Dittadi et al.'s input noise and bf16."""

    def total_steps(self, n_train: int) -> int:
        """The run's length in steps: ``steps``, or ``epochs`` epochs, each ``epoch_length`` steps
        (rounded up to a whole step) or, without it, a pass over ``n_train`` rows."""
        if self.epochs is None:
            return self.steps
        if self.epoch_length is not None:
            return max(1, math.ceil(round(self.epochs * self.epoch_length, 9)))
        return max(1, -(-int(round(self.epochs * n_train)) // self.batch_size))


PARTS = {"network": NetworkConfig, "loss": LossConfig, "optimisation": OptimisationConfig}


# -- the docs' settings table ----------------------------------------------------------------------

TABLE_START = "<!-- the settings table: made by models.config.write_settings_table() -->"
TABLE_END = "<!-- end of the settings table -->"


def settings_table() -> str:
    """The markdown table of every setting, part by part, as docs/models.md shows it."""
    def cell(text) -> str:
        return str(text).replace("|", "\\|")

    rows = ["| setting | part | type | default | allowed | unit | what it is |", "|---" * 7 + "|"]
    for part in PART_NAMES:
        for s in (s for s in SETTINGS.values() if s.part == part):
            allowed = s.check.rule if s.check else ""
            varies = " (may differ inside a vmapped group)" if s.varies_in_vmap else ""
            rows.append(f"| `{s.name}` | {part} | `{cell(s.type)}` | `{s.default!r}` | {cell(allowed)} | "
                        f"{s.unit or ''} | {cell(s.doc)}{varies} |")
    return "\n".join(rows) + "\n"


def write_settings_table(page: str = "docs/models.md") -> None:
    """Rewrite the settings table of ``page`` (docs/models.md) from the declarations."""
    path = pathlib.Path(page)
    path.write_text(with_settings_table(path.read_text()))


def with_settings_table(page: str) -> str:
    """``page`` (docs/models.md's text) with its settings table replaced by ``settings_table()``."""
    return with_marked_table(page, TABLE_START, TABLE_END, settings_table(), "settings")


def with_marked_table(page: str, start_marker: str, end_marker: str, table: str, what: str) -> str:
    """``page`` with the text between the line ``start_marker`` and ``end_marker`` replaced by
    ``table``: a docs table made from declarations (these settings; ``sweeps.options``' options)."""
    head, start, rest = page.partition(start_marker + "\n")
    _, end, tail = rest.partition(end_marker)
    if not start or not end:
        raise ValueError(f"the page has no {what} table between {start_marker!r} and {end_marker!r}")
    return head + start + table + end + tail
