"""Packed training: many small models that share a dataset, a split and a shape, trained at once.

The studies' models are small (about 1M parameters at 64 px), and one of them leaves a GPU mostly
idle. ``PackedTrainer`` trains K model configs together. Each member is an ordinary ``Trainer``
(its own model, objective, seeded generators, schedules and optimiser state), so a member sees
exactly the batches, noise, β, warm-up and learning rate it would see alone, and its checkpoint is
an ordinary ``Trainer`` checkpoint. Two ways to take a step:

- **vmap** (the default on GPUs): the members' parameters are stacked (``torch.func.
  stack_module_state``) and one ``torch.func.vmap`` of the objective over the stack computes every
  member's loss in one pass (convolutions become grouped convolutions). Gradients are clipped per
  member, and Adam runs on the stacked tensors with a learning rate per member; Adam is
  elementwise, so this is each member's own Adam. Objectives with an optimiser of their own
  (FactorVAE's discriminator) stack those parameters and that optimiser too.
- **loop** (the default on CPUs): one member's step after another. On CPU, vmapped convolutions
  are no faster than a loop (0.87× and 0.62× measured; benchmarks/README.md), so a pack there saves Ray's
  per-trial overhead and nothing else.

Both are driven by the one training loop, ``models.engine.train_together``, and a looped member
takes ``Trainer.train_step``, the one step; the vmapped step is that step's computation under
``torch.func.vmap``: the same ``draw_inputs`` and objective, the same clipping formula
(``clip_coefficient``) and Adam's update on stacked tensors.

Members must have the same shapes: configs that differ in anything but the scalar hyperparameters
of ``SCALAR_FIELDS`` (and the seed) are split into separate groups automatically (``split_into_
packs``); groups step side by side. A member whose loss turns NaN or infinite stops alone; the
others go on, and its error is reported.

On a GPU the uint8 dataset is uploaded once and shared by every member; each step indexes it on
the device and converts only the batch to floats. Only the batch's row indices (512 bytes at
batch 64) cross from the host.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from models.config import ModelConfig
from models.engine import Trainer, clip_coefficient, select_device, train_together
from models.objectives import Schedule
from models.registry import build, build_objective

# Fields that may differ between the members of one vmapped group: scalars that change no shape and
# no code path. Everything else (architecture, objective, latent size, batch size, run length…)
# must match, and configs that differ there go to different groups.
SCALAR_FIELDS = (
    "seed", "beta", "gamma", "lr", "lr_decay", "lr_milestones", "kl_warmup_steps", "grad_clip_norm",
    "capacity_max", "capacity_steps", "discriminator_lr", "mmd_weight", "logvar_l1_weight",
    "input_noise_subpixel_std", "input_noise_greyscale_std",
    # WAE-GAN and LieGroupVAE (buffers, or used only at initialisation)
    "adversarial_weight", "adversary_lr", "prior_std", "group_reconstruction_weight", "hessian_weight",
    "commutator_weight", "lie_basis_init_std", "encoder_group_probability",
)
MODES = ("auto", "vmap", "loop")


def pack_key(config: ModelConfig) -> tuple:
    """Configs with equal keys can share one vmapped group."""
    values = config.to_dict()
    return tuple((name, values[name]) for name in sorted(values) if name not in SCALAR_FIELDS) + (
        ("likelihood", config.resolved_likelihood),)


def split_into_packs(configs: Sequence[ModelConfig], pack_size: int | None = None) -> list[list[int]]:
    """Indices of ``configs`` grouped by ``pack_key`` (first-seen order), each group cut into
    chunks of at most ``pack_size`` (no limit when None)."""
    groups: dict[tuple, list[int]] = {}
    for index, config in enumerate(configs):
        groups.setdefault(pack_key(config), []).append(index)
    packs = []
    for members in groups.values():
        size = pack_size or len(members)
        packs += [members[start:start + size] for start in range(0, len(members), size)]
    return packs


# ----------------------------------------------------------------------------------------------
# memory: how many members fit on a device


def member_memory_bytes(config: ModelConfig) -> int:
    """An estimate of one member's training memory in float32: parameters, gradients and Adam's
    two moments (4 copies), plus every layer's activations at the batch size, kept for the
    backward pass and matched by their gradients (2 copies), plus the float batch. The model is
    built on PyTorch's meta device, so this allocates nothing."""
    from models.vae import VAE

    with torch.device("meta"):
        model = VAE(config.network)
        objective = build_objective(config)
    parameters = sum(p.numel() for p in model.parameters()) + sum(p.numel() for p in objective.parameters())
    activations = [0]

    def count(_module, _inputs, output):
        outputs = output if isinstance(output, tuple) else (output,)
        activations[0] += sum(t.numel() for t in outputs if isinstance(t, torch.Tensor))

    hooks = [m.register_forward_hook(count) for m in model.modules() if not list(m.children())]
    rows = config.optimisation.batch_size * (2 if config.needs_pairs else 1)
    network = config.network
    with torch.device("meta"):
        batch = torch.empty(rows, network.channels, network.image_size, network.image_size)
        mean, _ = model.encode(batch)
        model.decode(mean)
    for hook in hooks:
        hook.remove()
    return 4 * (4 * parameters + 2 * activations[0] + 2 * batch.numel())


def free_memory_bytes(device: torch.device) -> int:
    """Free memory on ``device``: the GPU's free memory, or the host's available memory."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:  # pragma: no cover - psutil comes with ray, but models does not need ray
        import os

        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def max_pack_size(config: ModelConfig, device: str | torch.device | None = None,
                  free_bytes: int | None = None, headroom: float = 0.8) -> int:
    """The largest number of members of ``config``'s shape that fit in ``headroom`` of the
    device's free memory (at least 1)."""
    device = select_device(device) if not isinstance(device, torch.device) else device
    free_bytes = free_memory_bytes(device) if free_bytes is None else free_bytes
    return max(1, int(headroom * free_bytes // member_memory_bytes(config)))


# ----------------------------------------------------------------------------------------------
# the stacked step


class _Member(nn.Module):
    """One model and its objective as one module, so ``functional_call`` can swap in a member's
    parameters for both: ``forward`` is the objective's loss, or with ``aux`` its own loss."""

    def __init__(self, model: nn.Module, objective: nn.Module):
        super().__init__()
        self.model = model
        self.objective = objective

    def forward(self, x, x_in, noise, kl_weight, capacity, step: int, aux=None):
        if aux is not None:
            return self.objective.own_loss(aux, noise)
        return self.objective(self.model, x, x_in, noise, Schedule(step, kl_weight, capacity))


class _StackedAdam:
    """Adam over stacked tensors (members along dimension 0), each member with its own learning
    rate, computed as ``torch.optim.Adam`` computes it."""

    def __init__(self, tensors: list[torch.Tensor], betas=(0.9, 0.999), eps: float = 1e-8):
        self.betas, self.eps, self.step_count = betas, eps, 0
        self.exp_avg = [torch.zeros_like(t) for t in tensors]
        self.exp_avg_sq = [torch.zeros_like(t) for t in tensors]

    @torch.no_grad()
    def step(self, tensors, grads, lr: torch.Tensor) -> None:
        beta1, beta2 = self.betas
        self.step_count += 1
        bias_correction1 = 1 - beta1 ** self.step_count
        bias_correction2_sqrt = math.sqrt(1 - beta2 ** self.step_count)
        for tensor, grad, exp_avg, exp_avg_sq in zip(tensors, grads, self.exp_avg, self.exp_avg_sq):
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(self.eps)
            step_size = (lr / bias_correction1).view(-1, *[1] * (tensor.dim() - 1))
            tensor.sub_(step_size * exp_avg / denom)

    def load_from(self, optimizers: list[torch.optim.Optimizer], params_per_member: list[list]) -> None:
        """Take the moments and step count from the members' own Adam optimisers."""
        states = [[opt.state.get(p, {}) for p in params]
                  for opt, params in zip(optimizers, params_per_member)]
        steps = {int(s["step"]) if "step" in s else 0 for member in states for s in member}
        if len(steps) > 1:
            raise ValueError(f"packed members are at different optimiser steps {sorted(steps)}")
        self.step_count = steps.pop() if steps else 0
        for index in range(len(self.exp_avg)):
            for name, stacked in (("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
                stacked[index].copy_(torch.stack([
                    member[index].get(name, torch.zeros_like(stacked[index][0])) for member in states]))

    def save_to(self, optimizers: list[torch.optim.Optimizer], params_per_member: list[list]) -> None:
        """Write the moments back into the members' own Adam optimisers, so each member's
        ``state_dict`` is an ordinary one."""
        if self.step_count == 0:
            return
        for k, (opt, params) in enumerate(zip(optimizers, params_per_member)):
            for index, p in enumerate(params):
                opt.state[p] = {"step": torch.tensor(float(self.step_count)),
                                "exp_avg": self.exp_avg[index][k].clone(),
                                "exp_avg_sq": self.exp_avg_sq[index][k].clone()}


class _VmapGroup:
    """Members with equal shapes, their parameters stacked, stepped with one vmapped pass."""

    def __init__(self, members: list[Trainer]):
        self.members = members
        first = members[0]
        self.base = _Member(first.model, first.objective)
        modules = [_Member(m.model, m.objective) for m in members]
        params, self.buffers = stack_module_state(modules)
        own_names = {f"objective.{name}" for name, _ in first.objective.named_parameters()}
        self.model_names = [n for n in params if n not in own_names]
        self.own_names = [n for n in params if n in own_names]
        self.params = params
        self.has_own = bool(self.own_names) and first.objective.own_adam is not None
        self.adam = _StackedAdam([params[n] for n in self.model_names])
        if self.has_own:
            settings = first.objective.own_adam
            self.own_adam = _StackedAdam([params[n] for n in self.own_names], betas=settings.get("betas"))
        self.load_from_members()

    def _member_params(self, names: list[str], prefix: str) -> list[list[nn.Parameter]]:
        return [[dict(getattr(_Member(m.model, m.objective), prefix).named_parameters())[n[len(prefix) + 1:]]
                 for n in names] for m in self.members]

    def load_from_members(self) -> None:
        """Stack the members' current parameters and optimiser states (after a resume)."""
        with torch.no_grad():
            for name, stacked in self.params.items():
                stacked.copy_(torch.stack([dict(_Member(m.model, m.objective).named_parameters())[name]
                                           for m in self.members]))
        self.adam.load_from([m.optimizer for m in self.members],
                            self._member_params(self.model_names, "model"))
        if self.has_own:
            self.own_adam.load_from([m.objective._own_optimizer for m in self.members],
                                    self._member_params(self.own_names, "objective"))

    def save_to_members(self) -> None:
        """Write the stacked parameters and optimiser states back into the members."""
        with torch.no_grad():
            for k, member in enumerate(self.members):
                own = dict(_Member(member.model, member.objective).named_parameters())
                for name, stacked in self.params.items():
                    own[name].copy_(stacked[k])
        self.adam.save_to([m.optimizer for m in self.members], self._member_params(self.model_names, "model"))
        if self.has_own:
            self.own_adam.save_to([m.objective._own_optimizer for m in self.members],
                                  self._member_params(self.own_names, "objective"))

    def train_step(self) -> list[dict[str, torch.Tensor]]:
        members = self.members
        drawn = [m.draw_inputs() for m in members]
        x = torch.stack([d[0] for d in drawn])
        x_in = torch.stack([d[1] for d in drawn])
        noise = {name: torch.stack([d[2][name] for d in drawn]) for name in drawn[0][2]}
        device = x.device
        kl_weight = torch.tensor([float(d[3].kl_weight) for d in drawn], device=device)
        capacity = torch.tensor([float(d[3].capacity) for d in drawn], device=device)
        step = drawn[0][3].step

        def member_terms(params, buffers, x, x_in, noise, kl_weight, capacity):
            return functional_call(self.base, (params, buffers), (x, x_in, noise, kl_weight, capacity, step))

        terms = vmap(member_terms)(self.params, self.buffers, x, x_in, noise, kl_weight, capacity)
        aux = {name: terms.pop(name).detach() for name in list(terms) if name.startswith("_")}
        model_tensors = [self.params[n] for n in self.model_names]
        grads = torch.autograd.grad(terms["loss"].sum(), model_tensors)
        grads = self._clip(grads, [m.optimisation.grad_clip_norm for m in members])
        lr = torch.tensor([m.learning_rate() for m in members], device=device)
        self.adam.step(model_tensors, grads, lr)

        if self.has_own:
            def member_own_loss(params, buffers, noise, aux):
                return functional_call(self.base, (params, buffers), (None, None, noise, None, None, step),
                                       {"aux": aux})

            own_loss = vmap(member_own_loss)(self.params, self.buffers, noise, aux)
            own_tensors = [self.params[n] for n in self.own_names]
            own_grads = torch.autograd.grad(own_loss.sum(), own_tensors)
            own_lr = torch.tensor([m.objective.own_adam["lr"] for m in members], device=device)
            self.own_adam.step(own_tensors, own_grads, own_lr)
            terms[members[0].objective.own_loss_name] = own_loss
        for member in members:
            member.step += 1
        return [{name: value[k].detach() for name, value in terms.items()} for k in range(len(members))]

    @staticmethod
    def _clip(grads, max_norms: list[float | None]):
        """Each member's global gradient-norm clipping (``clip_coefficient``, one norm per member)."""
        if all(norm is None for norm in max_norms):
            return grads
        members = grads[0].shape[0]
        total = torch.stack([g.reshape(members, -1).pow(2).sum(1) for g in grads]).sum(0).sqrt()
        limit = torch.tensor([math.inf if n is None else n for n in max_norms], device=total.device)
        coefficient = clip_coefficient(total, limit)
        return [g * coefficient.view(-1, *[1] * (g.dim() - 1)) for g in grads]


# ----------------------------------------------------------------------------------------------
# the pack


class PackedTrainer:
    """Trains ``configs`` together on the rows ``train_indices`` of ``images``.

    ``mode`` is "vmap", "loop", or "auto" (vmap on CUDA, loop elsewhere). Objectives that cannot
    run under vmap (``packable = False``) and the ground-truth decoder and composition tasks
    (``factor_space`` needed) always loop. ``members[k]`` is member k's ``Trainer``;
    after ``run`` its model is trained, as if it had been trained alone.
    """

    def __init__(self, configs: Sequence[ModelConfig | dict], images: np.ndarray, train_indices: np.ndarray,
                 device: str | torch.device | None = None, factors: np.ndarray | None = None,
                 mode: str = "auto", factor_space=None):
        if mode not in MODES:
            raise ValueError(f"mode: unknown {mode!r}; choose one of {', '.join(MODES)}")
        configs = [ModelConfig.from_dict(c) if isinstance(c, dict) else c for c in configs]
        if not configs:
            raise ValueError("configs: a pack needs at least one model config")
        self.device = select_device(device) if not isinstance(device, torch.device) else device
        self.mode = ("vmap" if self.device.type == "cuda" else "loop") if mode == "auto" else mode
        data = resident_images(images, self.device)
        self.members = [self._member(c, data, train_indices, factors, factor_space) for c in configs]
        self.errors: dict[int, str] = {}
        self.groups: list[list[int]] = split_into_packs(configs)
        self._group_of = {k: index for index, group in enumerate(self.groups) for k in group}
        self._vmapped: dict[int, _VmapGroup] = {}
        if self.mode == "vmap":
            for index, group in enumerate(self.groups):
                member = self.members[group[0]]
                if member.config.task == "vae" and getattr(type(member.objective), "packable", True):
                    self._vmapped[index] = _VmapGroup([self.members[k] for k in group])

    def _member(self, config: ModelConfig, images, train_indices, factors, factor_space) -> Trainer:
        if config.task == "vae":
            return Trainer(build(config), images, train_indices, config, self.device, factors=factors)
        if factors is None or factor_space is None:
            raise ValueError(f"task: {config.task!r} needs factors= (each image's classes) and factor_space=")
        from models.tasks import build_trainer

        return build_trainer(config, images, factors, factor_space, train_indices, self.device)

    def __len__(self) -> int:
        return len(self.members)

    @property
    def total_steps(self) -> int:
        return max(m.total_steps for m in self.members)

    def _advance(self, live: list[int], boundaries: dict[int, int]) -> dict[int, list[dict]]:
        """Step a group's live members to their next report (``train_together``'s ``advance``):
        a vmapped group all at once (a failed member keeps computing inside the stack, its numbers
        ignored), a looped group one member after the other."""
        group = self._group_of[live[0]]
        if group in self._vmapped:
            stack, taken = self._vmapped[group], {k: [] for k in live}
            for _ in range(boundaries[live[0]] - self.members[live[0]].step):
                for k, terms in zip(self.groups[group], stack.train_step()):
                    if k in taken:
                        taken[k].append(terms)
            return taken
        return {k: [self.members[k].train_step() for _ in range(boundaries[k] - self.members[k].step)]
                for k in live}

    def run(self, report_every: int = 50) -> Iterator[dict[int, dict]]:
        """Train every member to its run's length. Every ``report_every`` steps (and at each
        member's end) yields {member index: progress dict, as ``Trainer.run`` yields}. A member
        whose loss becomes NaN or infinite reports {"error": message} once and stops."""
        yield from train_together(self.members, report_every, groups=self.groups, advance=self._advance,
                                  errors=self.errors)
        self.sync()

    def sync(self) -> None:
        """Write stacked state back into the members' models and optimisers (vmap mode)."""
        for group in self._vmapped.values():
            group.save_to_members()

    def state_dict(self) -> dict:
        self.sync()
        return {"members": [m.state_dict() for m in self.members], "errors": dict(self.errors)}

    def load_state_dict(self, state: dict) -> None:
        if len(state["members"]) != len(self.members):
            raise ValueError(f"checkpoint: it holds {len(state['members'])} members; this pack has "
                             f"{len(self.members)}")
        for member, member_state in zip(self.members, state["members"]):
            member.load_state_dict(member_state)
        self.errors = {int(k): v for k, v in state.get("errors", {}).items()}
        for group in self._vmapped.values():
            group.load_from_members()


def resident_images(images, device: torch.device):
    """The uint8 images where training reads them: on a GPU, one upload shared by every member
    (when they take at most half the free memory), else the host array."""
    if device.type != "cuda" or isinstance(images, torch.Tensor):
        return images
    if images.nbytes > 0.5 * free_memory_bytes(device):
        return images
    return torch.from_numpy(np.ascontiguousarray(images)).to(device)
