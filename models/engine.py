"""The training engine: the one training step and the one training loop, with exact checkpoints.

The data is one uint8 array (N, C, H, W) shared by every consumer and a vector of the rows to
train on. Each step draws a batch of row indices from a seeded generator (pairs of rows, for the
objectives that train on pairs), converts just that batch to floats on the device, optionally adds
Dittadi et al.'s input noise to the encoder's copy, asks the objective for its loss terms, and
takes one Adam step; then the objective may take its own step (FactorVAE's discriminator).

All randomness (batch order, reparameterisation and input noise, FactorVAE's permutations) comes
from generators whose state is in the checkpoint, so a resumed run follows the same trajectory as
an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from models.config import ModelConfig
from models.device import GPUSettings, Rows, resident_images, select_device, to_float
from models.objectives import Schedule
from models.pairs import PairSampler
from models.registry import build_objective


def add_input_noise(x: torch.Tensor, subpixel_std: float, greyscale_std: float,
                    generator: torch.Generator) -> torch.Tensor:
    """Dittadi et al. 2021's input noise, two i.i.d. zero-mean Gaussian components: one for each
    subpixel (std ``subpixel_std``), and one greyscale value per pixel drawn at 1/16 of the
    resolution and bilinearly upsampled ×16 (std ``greyscale_std``), the same in every channel.
    The result is not clipped."""
    if subpixel_std > 0:
        x = x + subpixel_std * torch.randn(x.shape, generator=generator, device=x.device)
    if greyscale_std > 0:
        batch, _, height, width = x.shape
        coarse_shape = (batch, 1, -(-height // 16), -(-width // 16))
        coarse = torch.randn(coarse_shape, generator=generator, device=x.device)
        fine = F.interpolate(coarse, scale_factor=16, mode="bilinear", align_corners=False)
        x = x + greyscale_std * fine[:, :, :height, :width]
    return x


class NonFiniteLossError(FloatingPointError):
    """A loss term became NaN or infinite; the message names the step and the term."""


def clip_coefficient(total_norm: torch.Tensor, max_norm) -> torch.Tensor:
    """The factor that scales gradients of global norm ``total_norm`` down to at most ``max_norm``
    (1 when they are already within it): ``torch.nn.utils.clip_grad_norm_``'s formula. One model's
    step and a vmapped pack's step (one norm per member) both clip with it."""
    return (max_norm / (total_norm + 1e-6)).clamp(max=1.0)


def clip_gradients(parameters, max_norm: float | None) -> None:
    """Global gradient-norm clipping of one model (nothing when ``max_norm`` is None)."""
    if max_norm is None:
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    if grads:
        torch._foreach_mul_(grads, clip_coefficient(torch.nn.utils.get_total_norm(grads), max_norm))


def like_parameter(value: torch.Tensor, parameter: torch.Tensor) -> torch.Tensor:
    """A copy of ``value`` laid out as ``parameter`` is: its strides, dtype and device."""
    return torch.empty_like(parameter).copy_(value)


def lay_out_like_parameters(optimizer: torch.optim.Optimizer) -> None:
    """Give every state tensor of a parameter's shape (Adam's moments) that parameter's strides,
    dtype and device. ``Optimizer.load_state_dict`` keeps the strides a checkpoint was written
    with, and a fused Adam (the plain path's on CUDA) refuses moments laid out unlike their
    parameters, such as a channels-last convolution's. The values are unchanged."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            for name, value in state.items():
                if (isinstance(value, torch.Tensor) and value.shape == p.shape
                        and (value.stride(), value.dtype, value.device) != (p.stride(), p.dtype, p.device)):
                    state[name] = like_parameter(value, p)


class TermsBlock(NamedTuple):
    """The loss terms of consecutive steps: ``names`` and ``values``, a float tensor of one row per
    step and one column per name, left on the device until a report reads it."""

    names: tuple[str, ...]
    values: torch.Tensor


def terms_block(steps: list[dict[str, torch.Tensor]]) -> TermsBlock:
    """The terms ``train_step`` returned for consecutive steps, as one block."""
    names = tuple(steps[0])
    return TermsBlock(names, torch.stack([torch.stack([terms[n].float() for n in names]) for terms in steps]))


# At most this many row indices are drawn and uploaded at once (8 MB of int64).
ROWS_PER_UPLOAD = 1 << 20


class Trainer:
    """Trains one VAE on the rows ``train_indices`` of ``images`` under ``config.objective``.

    ``factors`` (N, F), each image's factor values or classes, is needed only by objectives that
    train on pairs (Ada-GVAE). ``images`` is a uint8 numpy array, or a uint8 tensor already
    resident on the device (see ``models.device.resident_images``). ``settings`` are the GPU
    settings (``models.device.GPUSettings``; the defaults when None), which a CPU run ignores.
    The other tasks (the ground-truth decoder, the composition network) subclass ``TaskTrainer``:
    they change what a step draws and what it computes (``draw_rows``, ``draw_inputs``,
    ``loss_terms``), never the step or the loop.
    """

    def __init__(self, model, images: np.ndarray, train_indices: np.ndarray, config: ModelConfig,
                 device: str | torch.device | None = None, factors: np.ndarray | None = None,
                 settings: GPUSettings | None = None):
        if config.task != "vae":
            raise ValueError(f"task: Trainer trains VAEs; task {config.task!r} has its own trainer: use "
                             "models.build_trainer(config, images, classes, factor_space, train_indices)")
        if config.needs_pairs and factors is None:
            raise ValueError(f"objective: {config.objective!r} trains on pairs of images that differ in "
                             f"{config.pair_factors_changed} factor(s), but it was fed single images; pass "
                             "factors= (each image's factor values) so pairs can be drawn")
        self.set_up(model, images, train_indices, config, device, settings)
        self.objective = build_objective(config, dataset_size=len(self.train_indices)).to(self.device)
        self.pairs = PairSampler(factors, self.train_indices, config.pair_factors_changed) \
            if config.needs_pairs else None

    def set_up(self, model, images, train_indices: np.ndarray, config: ModelConfig, device,
               settings: GPUSettings | None = None) -> None:
        """What every trainer has: the device and its settings, the model on it, the data, the
        run's length, Adam, the step counter and the seeded generators (batches from ``seed``,
        noise from ``seed + 1``). The engine reads the config's ``optimisation`` part (and the
        capacity schedule of its ``loss``)."""
        if len(train_indices) == 0:
            raise ValueError("train_indices: the training set is empty")
        self.config = config
        self.optimisation = optimisation = config.optimisation
        self.device = select_device(device)
        self.settings = settings or GPUSettings()
        cuda = self.device.type == "cuda"
        self.settings.apply(self.device)
        self.model = model.to(self.device)
        if self.device.type == "cpu" or (cuda and self.settings.channels_last):
            # oneDNN's convolutions run ~1.5x faster on channels-last weights (the Burgess network,
            # one thread: 297 -> 448 images/s), and cuDNN's tensor-core kernels want NHWC. On a CPU
            # the numbers differ from a contiguous layout's by rounding only; a run is still the
            # same on every repeat.
            self.model = self.model.to(memory_format=torch.channels_last)
        self.images = resident_images(images, self.device, self.settings)
        self.train_indices = np.asarray(train_indices, dtype=np.int64)
        self.total_steps = optimisation.total_steps(len(self.train_indices))
        self.objective, self.pairs = None, None
        # one update over all parameters: fused (one kernel on CUDA; on a CPU one pass over each
        # parameter instead of foreach's five: the ground-truth decoder's 8.3M parameters update in
        # 5.3 ms instead of 18 ms, benchmarks/README.md), foreach where fused is switched off
        fused = {"fused": True} if self.settings.fused_adam and self.device.type in ("cuda", "cpu") \
            else {"foreach": True}
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=optimisation.lr, **fused)
        self.step = 0
        self.batch_rng = np.random.default_rng(optimisation.seed)
        self.noise_rng = torch.Generator(device=self.device).manual_seed(optimisation.seed + 1)
        # bf16 autocast: asked for (True), refused (False) or, by default (None), on CUDA
        self.bf16 = cuda and optimisation.bf16 is not False
        if optimisation.bf16 and not cuda:
            warnings.warn(f"bf16: autocast is used on CUDA only; training in float32 on {self.device}",
                          stacklevel=3)
        self._loss_terms = torch.compile(self.loss_terms) if self.settings.compile else self.loss_terms

    # -- schedules: each a function of the step ------------------------------------------------

    def learning_rate(self) -> float:
        """``lr``, multiplied by ``lr_decay`` at each milestone passed (D21: halved at 150k, 300k)."""
        passed = sum(self.step >= milestone for milestone in self.optimisation.lr_milestones)
        return self.optimisation.lr * self.optimisation.lr_decay ** passed

    def kl_weight(self) -> float:
        """Linear KL warm-up: 0 → 1 over ``kl_warmup_steps`` (always 1 without warm-up)."""
        warmup = self.optimisation.kl_warmup_steps
        return 1.0 if warmup == 0 else min(1.0, self.step / warmup)

    def capacity(self) -> float:
        """The annealed VAE's capacity C: 0 → ``capacity_max`` linearly over ``capacity_steps``."""
        ramp = self.config.loss.capacity_steps
        return self.config.loss.capacity_max * (1.0 if ramp == 0 else min(1.0, self.step / ramp))

    def schedule_table(self, steps: int) -> np.ndarray:
        """(steps, 3): the KL weight, capacity and learning rate of the next ``steps`` steps, the
        values the three methods above give at each (the same float64 arithmetic, vectorised)."""
        step = np.arange(self.step, self.step + steps, dtype=np.int64)
        warmup, ramp = self.optimisation.kl_warmup_steps, self.config.loss.capacity_steps
        kl_weight = np.ones(steps) if warmup == 0 else np.minimum(1.0, step / warmup)
        ramp_share = np.ones(steps) if ramp == 0 else np.minimum(1.0, step / ramp)
        capacity = self.config.loss.capacity_max * ramp_share
        milestones = self.optimisation.lr_milestones
        rates = np.array([self.optimisation.lr * self.optimisation.lr_decay ** passed
                          for passed in range(len(milestones) + 1)])
        passed = (step[:, None] >= np.asarray(milestones, dtype=np.int64)[None, :]).sum(1)
        return np.stack([kl_weight, capacity, rates[passed]], axis=1)

    # -- what a step draws and computes (a task trainer overrides these) -----------------------

    def draw_rows(self) -> np.ndarray:
        """The row indices of the next step's images, from ``batch_rng``: the batch, sorted; for
        pair objectives, the pairs' first images then their second images (2·batch_size rows)."""
        if self.pairs is None:
            return np.sort(self.batch_rng.choice(self.train_indices, size=self.optimisation.batch_size))
        first, second = self.pairs.sample(self.batch_rng, self.optimisation.batch_size)
        return np.concatenate([first, second])

    def draw_rows_ahead(self, steps: int) -> np.ndarray:
        """(steps, rows per step): the rows of the next ``steps`` steps, drawn one step after
        another, so ``batch_rng`` ends where ``steps`` steps leave it."""
        return np.stack([self.draw_rows() for _ in range(steps)])

    def rows_ahead(self, steps: int) -> Rows:
        """``draw_rows_ahead``, on a GPU uploaded in one copy."""
        return Rows(self.draw_rows_ahead(steps), self.device)

    def batch_images(self, rows: Rows) -> torch.Tensor:
        """Rows of the image array as floats in [0, 1] on the device."""
        if isinstance(self.images, torch.Tensor):  # resident on the device: one gather there
            return self.images[rows.on_device].to(self.device).float().div_(255.0)
        return to_float(self.images[rows.host], self.device)

    def draw_inputs(self, rows: Rows | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor], Schedule]:
        """Everything about the next step, drawn in a fixed order from this model's own generators:
        the batch of ``rows`` (drawn now when None; the reconstruction target), the encoder's noisy
        copy of it, the objective's noise; and the schedule's values. A vmapped pack draws each
        member's noise the same way, so its members see exactly what they would see alone."""
        rows = self.rows_ahead(1)[0] if rows is None else rows
        x = self.batch_images(rows)
        x_in = add_input_noise(x, self.optimisation.input_noise_subpixel_std,
                               self.optimisation.input_noise_greyscale_std, self.noise_rng)
        noise = self.objective.draw_noise(self.noise_rng, x.shape[0], self.device)
        schedule = Schedule(step=self.step, kl_weight=self.kl_weight(), capacity=self.capacity())
        return x, x_in, noise, schedule

    def loss_terms(self, inputs) -> dict[str, torch.Tensor]:
        """The step's loss terms from its inputs ("loss" is minimised; "_" entries are passed on to
        ``after_step``)."""
        return self.objective(self.model, *inputs)

    def after_step(self, aux: dict, inputs) -> dict[str, torch.Tensor]:
        """After the model's update: the objective's own step (FactorVAE's discriminator, WAE-GAN's
        adversary), whose loss is reported as one more term."""
        return self.objective.after_step(aux, inputs[2])

    # -- the step ------------------------------------------------------------------------------

    def autocast(self):
        """bf16 autocast of the forward pass when ``self.bf16``, else nothing."""
        return torch.autocast("cuda", dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()

    def train_step(self, rows: Rows | None = None) -> dict[str, torch.Tensor]:
        """One training step, the same for every model and task, on the batch of ``rows`` (drawn
        now when None). Nothing in it waits for the GPU: the schedules are numbers computed on the
        host, the terms stay on the device."""
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate()
        inputs = self.draw_inputs(rows)
        with self.autocast():
            terms = self._loss_terms(inputs)
        aux = {name: terms.pop(name) for name in list(terms) if name.startswith("_")}
        self.optimizer.zero_grad(set_to_none=True)
        terms["loss"].backward()
        clip_gradients(self.model.parameters(), self.optimisation.grad_clip_norm)
        self.optimizer.step()
        terms.update(self.after_step(aux, inputs))
        self.step += 1
        return {name: value.detach() for name, value in terms.items()}

    def advance(self, steps: int) -> TermsBlock:
        """Take ``steps`` steps, their rows drawn and uploaded ahead in one go, and return their
        loss terms (still on the device: reading them is the report's business)."""
        taken: list[dict[str, torch.Tensor]] = []
        per_upload = max(1, ROWS_PER_UPLOAD // self.rows_per_step())
        while len(taken) < steps:
            rows = self.rows_ahead(min(steps - len(taken), per_upload))
            taken += [self.train_step(rows[i]) for i in range(len(rows))]
        return terms_block(taken)

    def rows_per_step(self) -> int:
        """Row indices one step draws."""
        return self.optimisation.batch_size * (2 if self.pairs is not None else 1)

    def run(self, until_step: int | None = None, report_every: int = 50) -> Iterator[dict]:
        """Train to ``until_step`` (default: the run's length), yielding a progress dict every
        ``report_every`` steps and at the end: the step, the mean of each loss term since the last
        report, and images per second. A NaN or infinite term raises ``NonFiniteLossError`` naming
        the first step and term at fault."""
        for reports in train_together([self], report_every, until_step=until_step):
            yield reports[0]

    def summarise(self, window: list[TermsBlock], elapsed: float) -> dict:
        """One progress report from the terms of the steps since the last one; raises
        ``NonFiniteLossError`` if any term of any of those steps is NaN or infinite. This is where
        the terms leave the device: once per report."""
        names = list(window[0].names)
        values = torch.cat([block.values.cpu() for block in window])
        finite = torch.isfinite(values)
        if not finite.all():
            row = int((~finite.all(1)).nonzero()[0])
            bad = [n for n, ok in zip(names, finite[row].tolist()) if not ok]
            step = self.step - len(values) + row + 1
            raise NonFiniteLossError(
                f"step {step}: loss term {', '.join(bad)} is not finite "
                f"({', '.join(f'{n}={float(values[row, names.index(n)])}' for n in bad)}); lower the "
                "learning rate or set grad_clip_norm"
            )
        means = dict(zip(names, values.double().mean(0).tolist()))
        return {"step": self.step, **means,
                "images_per_second": len(values) * self.images_per_step() / max(elapsed, 1e-9)}

    def images_per_step(self) -> int:
        """The input images one step trains on (for ``images_per_second``)."""
        return self.optimisation.batch_size * (2 if self.pairs is not None else 1)

    # -- checkpoints ---------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Everything needed to resume exactly: tensors, numbers and strings only, so it loads with
        ``torch.load(..., weights_only=True)``."""
        return {
            "step": self.step,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            **({"objective": self.objective.state_dict()} if self.objective is not None else {}),
            "batch_rng": self.batch_rng.bit_generator.state,
            "noise_rng": self.noise_rng.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        lay_out_like_parameters(self.optimizer)
        if "objective" in state and self.objective is not None:
            self.objective.load_state_dict(state["objective"])
        self.batch_rng.bit_generator.state = state["batch_rng"]
        self.noise_rng.set_state(state["noise_rng"])

    # -- as a pack of one: what a sweep's trial calls on one model or a pack alike -------------
    # (models.packed.PackedTrainer has the same members, so sweeps/trainable.py drives either)

    @property
    def members(self) -> list[Trainer]:
        """The trainers of the models trained: this one."""
        return [self]

    @property
    def errors(self) -> dict[int, str]:
        """The members whose loss diverged: none, since a lone model's divergence raises
        ``NonFiniteLossError`` (its trial fails) instead."""
        return {}

    def load_errors(self, errors: dict) -> None:
        """The divergences a final checkpoint records: a lone model that diverged is a failed
        trial, never a final checkpoint, so any raises its ``NonFiniteLossError``."""
        if errors:
            raise NonFiniteLossError(next(iter(errors.values())))

    def current_model(self, k: int = 0):
        """The model (member ``k`` = 0) with its current weights."""
        return self.model

    def member_reports(self, report_every: int = 50) -> Iterator[dict[int, dict]]:
        """``run``'s progress reports as a pack yields them: {member index (0): report}."""
        for report in self.run(report_every=report_every):
            yield {0: report}

    def pack_state_dict(self) -> dict:
        """``state_dict`` in a pack's layout, ``{"members": [state], "errors": {}}``: one checkpoint
        format for a model and a pack."""
        return {"members": [self.state_dict()], "errors": {}}

    def load_pack_state_dict(self, state: dict) -> None:
        self.load_state_dict(state["members"][0])


class TaskTrainer(Trainer):
    """The trainer of a model that is not a VAE under an objective (the ground-truth decoder, the
    composition network): ``Trainer``'s step, loop, schedules, clipping and checkpoints. A
    subclass draws its step's rows from ``batch_rng`` in ``draw_rows`` (the default: a sorted
    batch of training rows), turns them and ``noise_rng`` into its inputs in ``draw_inputs``, and
    computes their loss terms in ``loss_terms``."""

    def __init__(self, model, images: np.ndarray, train_indices: np.ndarray, config: ModelConfig,
                 device: str | torch.device | None = None, settings: GPUSettings | None = None):
        self.set_up(model, images, train_indices, config, device, settings)

    def draw_inputs(self, rows: Rows | None = None):
        raise NotImplementedError

    def loss_terms(self, inputs) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def after_step(self, aux: dict, inputs) -> dict[str, torch.Tensor]:
        return {}


# ----------------------------------------------------------------------------------------------
# the loop

Advance = Callable[[list[int], dict[int, int]], dict[int, TermsBlock]]


def synchronise(trainers: Sequence[Trainer]) -> None:
    """Wait for the GPUs the trainers run on (nothing on a CPU): a report's clock then counts
    the work done, not the work queued."""
    for device in {t.device for t in trainers if t.device.type == "cuda"}:
        torch.cuda.synchronize(device)


def train_together(trainers: Sequence[Trainer], report_every: int, *, until_step: int | None = None,
                   groups: list[list[int]] | None = None, advance: Advance | None = None,
                   errors: dict[int, str] | None = None) -> Iterator[dict[int, dict]]:
    """The training loop, for one trainer or a pack of them.

    Steps every trainer to ``until_step`` (default: its run's length). Every ``report_every`` steps
    and at each trainer's end, yields {trainer index: progress report} (``Trainer.summarise``).
    ``groups`` (default: one trainer each) are advanced in turn by ``advance(live, boundaries)``,
    which steps the live members of a group to their next report boundary and returns their terms
    (default: each member's ``advance``; a vmapped pack steps a group at once). A NaN or infinite
    term raises ``NonFiniteLossError``; with an ``errors`` dict, the trainer's message goes there
    instead, it reports {"step", "error"} once, and the others go on. Between reports nothing
    waits for the GPU.
    """
    groups = groups if groups is not None else [[k] for k in range(len(trainers))]

    def step_each(live: list[int], boundaries: dict[int, int]) -> dict[int, TermsBlock]:
        # one member's steps after the other's: its weights and optimiser state stay in cache
        return {k: trainers[k].advance(boundaries[k] - trainers[k].step) for k in live}

    advance = advance or step_each
    ends = [t.total_steps if until_step is None else until_step for t in trainers]
    lost = errors if errors is not None else {}

    def active(k: int) -> bool:
        return k not in lost and trainers[k].step < ends[k]

    def boundary(k: int) -> int:
        return min(ends[k], (trainers[k].step // report_every + 1) * report_every)

    for trainer in trainers:
        trainer.model.train()
    windows: dict[int, list[TermsBlock]] = {k: [] for k in range(len(trainers))}
    started = time.perf_counter()
    while any(active(k) for k in range(len(trainers))):
        for group in groups:
            live = [k for k in group if active(k)]
            if live:
                for k, block in advance(live, {k: boundary(k) for k in live}).items():
                    windows[k].append(block)
        due = [k for k, trainer in enumerate(trainers)
               if windows[k] and (trainer.step % report_every == 0 or trainer.step == ends[k])]
        if not due:
            continue
        synchronise(trainers)
        elapsed = time.perf_counter() - started
        reports = {}
        for k in due:
            try:
                reports[k] = trainers[k].summarise(windows[k], elapsed)
            except NonFiniteLossError as error:
                if errors is None:
                    raise
                errors[k] = str(error)
                reports[k] = {"step": trainers[k].step, "error": str(error)}
            windows[k] = []
        yield reports
        started = time.perf_counter()
    for trainer in trainers:
        trainer.model.eval()


def train(model, images: np.ndarray, train_indices: np.ndarray, config: ModelConfig,
          report_every: int = 50, device=None, factors: np.ndarray | None = None,
          settings: GPUSettings | None = None) -> Iterator[dict]:
    """Train ``model`` for the config's length, yielding progress dicts (see ``Trainer.run``)."""
    trainer = Trainer(model, images, train_indices, config, device, factors=factors, settings=settings)
    yield from trainer.run(report_every=report_every)
