"""Packed training: many small models that share a dataset, trained at once in one process.

The studies' models are small (about 1M parameters at 64 px), and one of them leaves a GPU mostly
idle. ``PackedTrainer`` trains K model configs together; one model is not a pack (train it with
``models.build_trainer``, the plain path). Each member is an ordinary ``Trainer`` (its own model,
objective, training rows, seeded generators, schedules and optimiser state), so a member sees
exactly the batches, noise, β, warm-up and learning rate it would see alone, and its checkpoint is
an ordinary ``Trainer`` checkpoint. Members may train on different rows (each its own split) and
for different numbers of steps. Two ways to take a step:

- **vmap** (the default on GPUs): the members' parameters are stacked (``torch.func.
  stack_module_state``) and one ``torch.func.vmap`` of the objective over the stack computes every
  member's loss in one pass (convolutions become grouped convolutions). Gradients are clipped per
  member, and Adam runs on the stacked tensors with a learning rate per member, as ``torch.
  _foreach_*`` ops (a few multi-tensor kernels on a GPU); Adam is elementwise, so this is each
  member's own Adam. Objectives with an optimiser of their own (FactorVAE's discriminator)
  stack those parameters and that optimiser too.
- **loop** (the default on CPUs): one member's ``Trainer`` step after another. On CPU, vmapped
  convolutions are no faster than a loop (0.87× and 0.62× measured; benchmarks/README.md), so a
  pack there saves Ray's per-trial overhead and nothing else.

Both are driven by the one training loop, ``models.engine.train_together``. A vmapped step takes
its inputs without waiting on the host: the row indices of every member's batches up to the next
report are drawn on the host (each member from its own generator, as alone) and uploaded in one
asynchronous copy with the schedules' values (KL weight, capacity, learning rate) of those steps;
each step gathers all members' batches from the resident dataset in one indexing. The loss terms
stay on the device until the report.

Two GPU settings (``models.device.GPUSettings``), off by default until measured on a GPU, rebuild
a vmapped group's step for a GPU. ``device_sampling`` (``_DeviceSampler``): every member's rows,
input noise and objective noise drawn at once on the device from one generator seeded from the
members' seeds and the step, nothing read back to the host; deterministic, but a member then sees
other batches and noise than alone. ``cuda_graph`` (``_CapturedStep``, with ``device_sampling``,
on CUDA only): the forward, backward, clipping and Adam over static buffers, captured once as a
CUDA graph and replayed. ``compile`` compiles the vmapped loss. Without them, on a CPU in
particular, the step is the one described above.

Members that differ in anything but the scalar hyperparameters of ``SCALAR_FIELDS`` (and the seed
and the training rows) are split into separate vmapped groups automatically (``vmap_groups``);
groups step side by side. A member whose loss turns NaN or infinite stops alone; the others go
on, and its error is reported. If a vmapped group runs out of GPU memory in its first steps, it is
halved and retried (``halvings`` says so).
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from models.config import SETTINGS, ModelConfig
from models.device import (
    GPUSettings,
    Rows,
    fits_resident,
    free_memory_bytes,
    resident_images,
    select_device,
    to_device,
    to_float,
)
from models.engine import (
    ROWS_PER_UPLOAD,
    TermsBlock,
    Trainer,
    add_input_noise,
    clip_coefficient,
    like_parameter,
    train_together,
)
from models.objectives import Schedule
from models.registry import build_objective, objective_class
from models.tasks import build_trainer

__all__ = ["PackedTrainer", "SCALAR_FIELDS", "free_memory_bytes", "loops_in_a_pack", "max_pack_size",
           "member_memory_bytes",
           "pack_memory_bytes", "resident_images", "step_memory", "vmap_group_key", "vmap_groups"]

# Fields that may differ between the members of one vmapped group: scalars that change no shape and
# no code path, those declared ``varies_in_vmap`` in models/config.py. Everything else (architecture,
# objective, latent size, batch size, run length…) must match, and configs that differ there go to
# different groups.
SCALAR_FIELDS = tuple(name for name, setting in SETTINGS.items() if setting.varies_in_vmap)
MODES = ("auto", "vmap", "loop")


def vmap_group_key(config: ModelConfig) -> tuple:
    """What a config's members must share to train in one vmapped group: every setting but
    ``SCALAR_FIELDS``, and the resolved likelihood. Configs with equal keys can share one group."""
    values = config.to_dict()
    return tuple((name, values[name]) for name in sorted(values) if name not in SCALAR_FIELDS) + (
        ("likelihood", config.resolved_likelihood),)


def vmap_groups(configs: Sequence[ModelConfig], pack_size: int | None = None,
                train_sizes: Sequence[int] | None = None) -> list[list[int]]:
    """Indices of ``configs`` grouped by ``vmap_group_key`` (first-seen order), each group cut into
    chunks of at most ``pack_size`` (no limit when None). With ``train_sizes`` (each member's
    number of training rows), members of an objective whose loss reads it (β-TCVAE) group by it
    too."""
    groups: dict[tuple, list[int]] = {}
    for index, config in enumerate(configs):
        reads_size = train_sizes is not None and objective_class(config.objective).reads_dataset_size
        key = vmap_group_key(config) + ((("train_size", train_sizes[index]),) if reads_size else ())
        groups.setdefault(key, []).append(index)
    packs = []
    for members in groups.values():
        size = pack_size or len(members)
        packs += [members[start:start + size] for start in range(0, len(members), size)]
    return packs


def member_train_indices(train_indices, members: int) -> list[np.ndarray]:
    """One array of training rows per member: ``train_indices`` itself when it is one array of
    rows (every member trains on it), else its k-th entry for member k."""
    if isinstance(train_indices, (list, tuple)) and len(train_indices) and all(
            np.ndim(rows) == 1 for rows in train_indices):
        if len(train_indices) != members:
            raise ValueError(f"train_indices: got {len(train_indices)} arrays of training rows for "
                             f"{members} members; give one array per member, or one array for all")
        return [np.asarray(rows, dtype=np.int64) for rows in train_indices]
    return [np.asarray(train_indices, dtype=np.int64)] * members


# ----------------------------------------------------------------------------------------------
# memory: how many members fit on a device

# What a CUDA process holds besides its models and data: the CUDA context with the kernels it loads
# (about 0.5 GiB with PyTorch's lazy loading), cuBLAS's and cuDNN's workspaces, and the caching
# allocator's slack. An estimate, not a measurement: benchmarks/gpu.sh reports a process's peak
# against ``pack_memory_bytes``.
CUDA_PROCESS_BYTES = 3 * 2**29
# Copies of a member's parameters that a vmapped group keeps: the member's own module, the stacked
# copy, Adam's two stacked moments, and the two moments ``write_member`` gives the member's own
# optimiser at a checkpoint (they stay).
KEPT_PARAMETER_COPIES = 6
# ... and those that live during the update only: the gradients, Adam's denominators and its
# update (the clipped gradients replace the raw ones before the denominators exist).
UPDATE_PARAMETER_COPIES = 3
# The step's small tensors besides those counted (loss terms, norms, step sizes: under 1 KiB a
# member measured on CPU), rounded up.
SMALL_TENSOR_BYTES = 2**16
# Members the count stacks (any two: every term it keeps is per member).
_COUNTED_MEMBERS = 2


class StepMemory(NamedTuple):
    """What one member's training step holds, in bytes (``step_memory``)."""

    parameters: int  # one copy of its parameters (the model's and its objective's own)
    saved: int  # every tensor its forward pass saves for the backward pass
    largest: int  # the largest of those
    inputs: int  # its float batch, the noisy copy of it, and its noise


_step_memory_cache: dict[tuple, StepMemory] = {}


def step_memory(config: ModelConfig) -> StepMemory:
    """One member's training step, counted on PyTorch's meta device (nothing is allocated; on
    the CPU for an objective that reads its tensors' values, CascadeVAE). The forward is the real
    one: a vmapped pack's objective over two stacked members (one model's where the objective
    cannot vmap or the config is not a VAE task), under ``torch.autograd.graph.saved_tensors_hooks``,
    which sees every tensor autograd saves. Each is counted once per storage (views, and tensors
    two operations save, share one), parameters not at all; so residual additions, activations,
    interpolations and vmap's batching copies count, which a count of leaf modules' outputs
    misses. Cached per ``vmap_group_key``."""
    key = vmap_group_key(config)
    if key not in _step_memory_cache:
        vmapped = config.task == "vae" and getattr(objective_class(config.objective), "vmappable", True)
        with torch.random.fork_rng(devices=[]):  # building the models draws from the global generator
            try:
                _step_memory_cache[key] = _count_step(config, "meta", vmapped)
            except (NotImplementedError, RuntimeError):  # "cannot copy out of meta tensor"
                _step_memory_cache[key] = _count_step(config, "cpu", vmapped)
    return _step_memory_cache[key]


def _count_step(config: ModelConfig, device: str, vmapped: bool) -> StepMemory:
    objective_type = objective_class(config.objective)
    members = _COUNTED_MEMBERS if vmapped else 1
    rows = config.optimisation.batch_size * (2 if config.needs_pairs else 1)
    network = config.network
    with torch.device(device):
        modules = [_Member(objective_type.model_class(network, config.loss), build_objective(config))
                   for _ in range(members)]
        x = torch.zeros(members, rows, network.channels, network.image_size, network.image_size)
        noise = modules[0].objective.draw_noise(None, rows, device, members=members)
        kl_weight, capacity = torch.ones(members), torch.zeros(members)
    params, buffers = stack_module_state(modules)
    stacked = {p.untyped_storage()._cdata for p in params.values()}
    saved: dict[int, int] = {}
    keep: list[torch.Tensor] = []  # alive until counted, so no storage's key is reused

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        keep.append(tensor)
        key = tensor.untyped_storage()._cdata
        if key not in stacked:
            saved[key] = tensor.untyped_storage().nbytes()
        return tensor

    base = modules[0]

    def member_terms(p, b, x, x_in, noise, kl_weight, capacity, step):
        return functional_call(base, (p, b), (x, x_in, noise, kl_weight, capacity, step))

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        if vmapped:
            vmap(member_terms, in_dims=(0, 0, 0, 0, 0, 0, 0, None))(
                params, buffers, x, x, noise, kl_weight, capacity, torch.tensor(0))
        else:
            first = [{name: t[0] for name, t in part.items()} for part in (params, buffers, noise)]
            member_terms(first[0], first[1], x[0], x[0], first[2], kl_weight[0], capacity[0], 0)
    inputs = 2 * x[0].nbytes + sum(t[0].nbytes for t in noise.values())
    return StepMemory(parameters=sum(p.numel() * p.element_size() for p in base.parameters()),
                      saved=sum(saved.values()) // members, largest=max(saved.values(), default=0) // members,
                      inputs=inputs)


# Copies of a looped member's parameters (a pack whose members step one after another: a task
# other than the VAE's, or an objective that cannot vmap) that it keeps between its steps: its
# parameters, its Adam's two moments, and its gradients (freed at its next step's zero_grad).
LOOPED_PARAMETER_COPIES = 4
# ... and the one step that runs at a time, counted twice: a looped member's step holds more than
# ``_step_bytes`` counts of it (the forward's temporaries beside what it saves): a one-member pack of
# CascadeVAE burgess at batch 32 peaked at 1.33x it on CPU (tests/models/test_pack_memory_estimate.py)
LOOPED_STEP_COPIES = 2


def loops_in_a_pack(config: ModelConfig) -> bool:
    """Whether ``config``'s members step one after another in a pack (``PackedTrainer`` vmaps the
    VAE task's vmappable objectives only)."""
    return config.task != "vae" or not getattr(objective_class(config.objective), "vmappable", True)


def _step_bytes(config: ModelConfig) -> int:
    """What one member's step holds while it runs, besides the parameter copies kept: the larger of
    the update's ``UPDATE_PARAMETER_COPIES`` copies and the backward pass's peak (everything the
    forward saved for it, all the gradients, two activation-sized gradients in flight), plus its
    inputs and ``SMALL_TENSOR_BYTES``."""
    step = step_memory(config)
    backward = step.saved + step.parameters + 2 * step.largest
    return max(backward, UPDATE_PARAMETER_COPIES * step.parameters) + step.inputs + SMALL_TENSOR_BYTES


def member_memory_bytes(config: ModelConfig) -> int:
    """An estimate of what one more member of ``config`` adds to a pack's peak training memory in
    float32 (bf16 autocast saves less). A vmapped member: ``KEPT_PARAMETER_COPIES`` copies of its
    parameters plus its share of the step (``_step_bytes``: every member's step runs at once). A
    looped member (``loops_in_a_pack``): ``LOOPED_PARAMETER_COPIES`` copies, the step being one
    member's at a time (``pack_memory_bytes`` counts it once per pack, ``LOOPED_STEP_COPIES``
    times). Checked against a real pack's peak on CPU for every architecture
    (tests/models/test_pack_memory_estimate.py)."""
    step = step_memory(config)
    if loops_in_a_pack(config):
        return LOOPED_PARAMETER_COPIES * step.parameters
    return KEPT_PARAMETER_COPIES * step.parameters + _step_bytes(config)


def dataset_bytes(n_images: int, channels: int, image_size: int) -> int:
    """The bytes of a uint8 dataset of ``n_images`` images (what a process uploads to its GPU)."""
    return int(n_images) * channels * image_size * image_size


def pack_memory_bytes(config: ModelConfig, members: int, device: str | torch.device = "cuda",
                      dataset: int = 0, budget_bytes: int | None = None) -> int:
    """An estimate of the memory a process training ``members`` models of ``config``'s shape needs
    on ``device``: the members (and a looped pack's one step at a time), plus on a GPU the
    process's own (``CUDA_PROCESS_BYTES``) and the ``dataset`` bytes when it is uploaded (when it
    fits in half of ``budget_bytes``, the process's share; always when None)."""
    need = members * member_memory_bytes(config)
    if members and loops_in_a_pack(config):  # one member's step at a time
        need += LOOPED_STEP_COPIES * _step_bytes(config)
    if select_device(device).type == "cuda":
        resident = budget_bytes is None or fits_resident(dataset, budget_bytes)
        need += CUDA_PROCESS_BYTES + (dataset if resident else 0)
    return need


def max_pack_size(config: ModelConfig, device: str | torch.device | None = None,
                  free_bytes: int | None = None, headroom: float = 0.8, dataset: int = 0) -> int:
    """The largest number of members of ``config``'s shape that fit in ``headroom`` of the memory
    a process has on ``device`` (``free_bytes``, by default the device's free memory), at least 1.
    On a GPU the process's own memory and the uploaded ``dataset`` (bytes) come off first, and a
    looped pack's one step at a time."""
    device = select_device(device)
    free_bytes = free_memory_bytes(device) if free_bytes is None else free_bytes
    each = member_memory_bytes(config)
    fixed = pack_memory_bytes(config, 1, device, dataset, free_bytes) - each
    return max(1, int((headroom * free_bytes - fixed) // each))


# ----------------------------------------------------------------------------------------------
# the stacked step


class _Member(nn.Module):
    """One model and its objective as one module, so ``functional_call`` can swap in a member's
    parameters for both: ``forward`` is the objective's loss, or with ``aux`` its own loss."""

    def __init__(self, model: nn.Module, objective: nn.Module):
        super().__init__()
        self.model = model
        self.objective = objective

    def forward(self, x, x_in, noise, kl_weight, capacity, step, aux=None):
        if aux is not None:
            return self.objective.own_loss(aux, noise)
        return self.objective(self.model, x, x_in, noise, Schedule(step, kl_weight, capacity))


def _per_member(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(K,) values shaped to broadcast over a stacked tensor (K, ...)."""
    return values.view(-1, *[1] * (like.dim() - 1))


class _StackedAdam:
    """Adam over stacked tensors (members along dimension 0), each member with its own learning
    rate, computed as ``torch.optim.Adam`` computes it, in ``torch._foreach_*`` ops (on a CPU each
    is the per-tensor op; on a GPU a few multi-tensor kernels for all tensors)."""

    def __init__(self, tensors: list[torch.Tensor], betas=(0.9, 0.999), eps: float = 1e-8):
        self.betas, self.eps = betas, eps
        self.exp_avg = [torch.zeros_like(t) for t in tensors]
        self.exp_avg_sq = [torch.zeros_like(t) for t in tensors]

    @torch.no_grad()
    def step(self, tensors, grads, lr: torch.Tensor, count: int | torch.Tensor) -> None:
        """The update of Adam's step number ``count`` (1 for the first); ``lr`` (K,) on the device.
        ``count`` is a host number, or (a captured CUDA graph's step, which reads no host number
        at replay) a float64 0-d tensor on the device: the same float64 arithmetic, rounded to
        float32 where the host number would be."""
        beta1, beta2 = self.betas
        if isinstance(count, torch.Tensor):
            bias_correction1 = (1 - beta1 ** count).float()
            bias_correction2_sqrt = (1 - beta2 ** count).sqrt().float()
        else:
            bias_correction1 = 1 - beta1 ** count
            bias_correction2_sqrt = math.sqrt(1 - beta2 ** count)
        torch._foreach_lerp_(self.exp_avg, list(grads), 1 - beta1)
        torch._foreach_mul_(self.exp_avg_sq, beta2)
        torch._foreach_addcmul_(self.exp_avg_sq, list(grads), list(grads), value=1 - beta2)
        denominators = torch._foreach_sqrt(self.exp_avg_sq)
        torch._foreach_div_(denominators, bias_correction2_sqrt)
        torch._foreach_add_(denominators, self.eps)
        step_size = lr / bias_correction1
        updates = [_per_member(step_size, m) * m for m in self.exp_avg]
        torch._foreach_div_(updates, denominators)
        torch._foreach_sub_(list(tensors), updates)

    def load_from(self, optimizers: list[torch.optim.Optimizer], params_per_member: list[list]) -> None:
        """Take the moments from the members' own Adam optimisers (zeros where they have none)."""
        states = [[opt.state.get(p, {}) for p in params]
                  for opt, params in zip(optimizers, params_per_member)]
        for index in range(len(self.exp_avg)):
            for name, stacked in (("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
                stacked[index].copy_(torch.stack([
                    member[index].get(name, torch.zeros_like(stacked[index][0])) for member in states]))

    def save_member(self, position: int, optimizer: torch.optim.Optimizer, params: list, steps: int) -> None:
        """Write member ``position``'s moments into its own Adam optimiser, at step ``steps``, so
        its ``state_dict`` is an ordinary one: each moment with its parameter's layout (strides),
        dtype and device, and the step count where that optimiser keeps it (on the parameter's
        device for a fused or capturable Adam), as ``torch.optim.Adam`` would have made them. A
        fused Adam, the plain path's on CUDA, refuses moments laid out unlike their parameters
        (a slice of the stack differs in the strides of its size-1 dimensions)."""
        if steps == 0:
            return
        group = optimizer.param_groups[0]
        on_device = bool(group.get("fused") or group.get("capturable"))
        for index, p in enumerate(params):
            count_device = p.device if on_device else torch.device("cpu")
            optimizer.state[p] = {
                "step": torch.tensor(float(steps), dtype=torch.float32, device=count_device),
                "exp_avg": like_parameter(self.exp_avg[index][position], p),
                "exp_avg_sq": like_parameter(self.exp_avg_sq[index][position], p)}


class _DeviceSampler:
    """A vmapped group's batches and noise drawn on its device, for all its members at once
    (``GPUSettings.device_sampling``): each step one draw of every member's batch positions, a
    gather of the rows from a (K, n) table of the members' training rows (padded; each member's
    positions below its own count, so its rows are its own), one draw of every member's input
    noise, and one ``draw_noise(..., members=K)``. All from one generator on the device, seeded
    at each step from the members' seeds and the step's number: the same seeds give the same
    numbers, however often the run reports, and a resumed run draws what the uninterrupted run
    drew. Nothing is read back to the host. A member sees other batches and noise than it would
    alone (its own numpy and torch generators are not used, and not advanced)."""

    def __init__(self, members: list[Trainer], images: torch.Tensor):
        device = members[0].device
        counts = [len(m.train_indices) for m in members]
        table = np.zeros((len(members), max(counts)), np.int64)
        for k, member in enumerate(members):
            table[k, :counts[k]] = member.train_indices
        self.images = images
        self.train_rows = torch.from_numpy(table).to(device)
        self.counts = torch.tensor(counts, dtype=torch.float64, device=device)
        self.last = torch.tensor(counts, dtype=torch.int64, device=device) - 1
        self.seeds = [m.optimisation.seed for m in members]
        self.batch_size = members[0].optimisation.batch_size
        self.generator = torch.Generator(device=device)
        subpixel = [m.optimisation.input_noise_subpixel_std for m in members]
        greyscale = [m.optimisation.input_noise_greyscale_std for m in members]
        self.subpixel = torch.tensor(subpixel, device=device) if any(subpixel) else None
        self.greyscale = torch.tensor(greyscale, device=device) if any(greyscale) else None

    @classmethod
    def for_group(cls, members: list[Trainer]) -> _DeviceSampler | None:
        """The sampler of ``members``, or None where the rows must be drawn on the host: members
        that train on pairs (drawn by ``PairSampler``), or images not on the group's device (a
        GPU's dataset too large to upload), which the host would have to index."""
        first = members[0]
        if any(m.pairs is not None for m in members):
            return None
        images = first.images
        if isinstance(images, np.ndarray) and first.device.type == "cpu":
            images = torch.from_numpy(images)  # the same memory
        if not isinstance(images, torch.Tensor) or images.device != first.device:
            return None
        return cls(members, images)

    def reseed(self, step: int) -> None:
        """Seed the generator from the members' seeds and ``step`` (host arithmetic only)."""
        state = np.random.SeedSequence([*self.seeds, int(step)]).generate_state(1, np.uint64)[0]
        self.generator.manual_seed(int(state) >> 1)

    def draw(self, objective, step: int) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Step ``step``'s batches (K, B, C, H, W) as floats, the encoder's noisy copy of them, and
        ``objective``'s noise for every member."""
        self.reseed(step)
        x = self.images[self.rows()].float().div_(255.0)
        x_in = self.noisy_input(x)
        noise = objective.draw_noise(self.generator, self.batch_size, x.device, members=len(self.seeds))
        return x, x_in, noise

    def rows(self) -> torch.Tensor:
        """(K, B): each member's batch, drawn uniformly with replacement from its own training
        rows (as ``Trainer.draw_rows`` draws), sorted."""
        uniform = torch.rand((len(self.seeds), self.batch_size), dtype=torch.float64,
                             generator=self.generator, device=self.counts.device)
        positions = torch.minimum((uniform * self.counts[:, None]).long(), self.last[:, None])
        return self.train_rows.gather(1, positions).sort(dim=1).values

    def noisy_input(self, x: torch.Tensor) -> torch.Tensor:
        """``add_input_noise`` for every member at once, each with its own standard deviations."""
        x_in = x
        if self.subpixel is not None:
            noise = torch.randn(x.shape, generator=self.generator, device=x.device)
            x_in = x_in + _per_member(self.subpixel, x) * noise
        if self.greyscale is not None:
            members, batch, _, height, width = x.shape
            coarse = torch.randn((members * batch, 1, -(-height // 16), -(-width // 16)),
                                 generator=self.generator, device=x.device)
            fine = F.interpolate(coarse, scale_factor=16, mode="bilinear", align_corners=False)
            fine = fine[:, :, :height, :width].reshape(members, batch, 1, height, width)
            x_in = x_in + _per_member(self.greyscale, x) * fine
        return x_in


def first_exception(error: BaseException) -> BaseException:
    """The first exception of ``error``'s chain: the one its ``__cause__`` / ``__context__`` links
    lead back to. A failed CUDA-graph capture raises at ``capture_end`` a generic error ("operation
    failed due to a previous error during capture") whose context is the real one."""
    seen = {id(error)}
    while (earlier := error.__cause__ or error.__context__) is not None and id(earlier) not in seen:
        seen.add(id(earlier))
        error = earlier
    return error


def capture_graph(function, device: torch.device):
    """``function()`` captured as a CUDA graph on a side stream of ``device``: (the graph, its
    outputs, static tensors the replays overwrite). What ``torch.cuda.graph`` does, except that
    the capture stream is left whatever happens (``torch.cuda.graph`` does not leave it when
    ``capture_end`` raises, so everything after would run on it) and the device is synchronised
    after a failure, before anything runs eagerly."""
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize(device)
    stream = torch.cuda.Stream(device)
    try:
        with torch.cuda.stream(stream):
            graph.capture_begin()
            try:
                outputs = {name: value.detach() for name, value in function().items()}
            finally:
                graph.capture_end()  # raising here, it keeps the body's error as its __context__
    except BaseException:
        with contextlib.suppress(Exception):
            torch.cuda.synchronize(device)
        # a capture_end that raised never ended the allocator's routing of the capture stream's
        # allocations into the graph's pool (a later stream of PyTorch's pool may be that stream)
        end_pool = getattr(torch._C, "_cuda_endAllocateToPool", None)
        if end_pool is not None:
            with contextlib.suppress(Exception):
                end_pool(device.index if device.index is not None else torch.cuda.current_device(),
                         graph.pool())
        raise
    return graph, outputs


def _one_line(error: BaseException, most: int = 300) -> str:
    text = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    return text if len(text) <= most else text[:most - 1] + "…"


class _CapturedStep:
    """A vmapped group's ``step_on`` over static buffers (``GPUSettings.cuda_graph``): each step's
    inputs are copied into the same tensors, the step number and Adam's count into device tensors,
    so the step reads no host number and can be captured once in a CUDA graph and replayed. Its
    first ``WARM_UP`` steps run eagerly on a side stream (cuDNN's autotuning, the allocator's
    pools, ``torch.compile``'s compilation), as PyTorch's CUDA-graph guide asks; the next is
    captured (``capture_graph``) and replayed, and so is every later one. The loss terms are
    copied out of the graph's static outputs. ``run`` is the same step, eager, on any device:
    what is captured.

    A capture that fails does not fail the run: the step it was capturing, and every later one,
    runs eagerly (``run``, on the buffers: the same step, no kernel of the failed capture having
    run), and ``outcome`` says so: "captured", or "fell back: <the first exception of the
    chain>" (``first_exception``; ``error`` keeps the whole chain), also printed to stderr, which
    is a Ray trial's log."""

    WARM_UP = 3

    def __init__(self, group: _VmapGroup, x, x_in, noise: dict, schedule: torch.Tensor):
        self.group, self.device = group, x.device
        self.x = torch.empty_like(x)
        self.x_in = self.x if x_in is x else torch.empty_like(x_in)
        self.noise = {name: torch.empty_like(value) for name, value in noise.items()}
        self.schedule = torch.empty_like(schedule)
        self.step_number = torch.zeros((), dtype=torch.int64, device=self.device)
        self.count = torch.zeros((), dtype=torch.float64, device=self.device)
        self.steps_taken = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.outputs: dict[str, torch.Tensor] | None = None
        self.outcome: str | None = None  # None until the capture is tried
        self.error: BaseException | None = None  # a failed capture's error (its whole chain)

    def load(self, x, x_in, noise: dict, schedule: torch.Tensor, step: int) -> None:
        """Copy one step's inputs into the buffers (device copies; ``fill_`` of host numbers)."""
        self.x.copy_(x)
        if self.x_in is not self.x:
            self.x_in.copy_(x_in)
        for name, value in noise.items():
            self.noise[name].copy_(value)
        self.schedule.copy_(schedule)
        self.step_number.fill_(step)
        self.count.fill_(step + 1)

    def run(self) -> dict[str, torch.Tensor]:
        """The step on the buffers, eagerly."""
        return self.group.step_on(self.x, self.x_in, self.noise, self.schedule, self.step_number, self.count)

    def step(self) -> dict[str, torch.Tensor]:
        """The step on the buffers: warm-up, capture (or its eager fallback) or replay."""
        if self.steps_taken < self.WARM_UP:
            terms = self._warm_up_step()
        elif self.outcome is None:
            terms = self._capture()
        elif self.graph is not None:
            self.graph.replay()
            terms = {name: value.clone() for name, value in self.outputs.items()}
        else:
            terms = self.run()
        self.steps_taken += 1
        return terms

    def _warm_up_step(self) -> dict[str, torch.Tensor]:
        if self.device.type != "cuda":
            return self.run()
        current = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            terms = self.run()
        current.wait_stream(side)
        return terms

    def _capture(self) -> dict[str, torch.Tensor]:
        """Capture the step and replay it once, or, if the capture fails, take it eagerly."""
        try:
            self.graph, self.outputs = capture_graph(self.run, self.device)
        except Exception as error:  # noqa: BLE001 - any failure of the capture: go on eagerly
            self.graph, self.outputs, self.error = None, None, error
            self.outcome = f"fell back: {_one_line(first_exception(error))}"
            print(f"models.packed: a pack of {len(self.group.members)}: the CUDA graph's capture failed; "
                  f"its steps run eagerly ({self.outcome})", file=sys.stderr, flush=True)
            return self.run()
        self.outcome = "captured"
        print(f"models.packed: a pack of {len(self.group.members)}: CUDA graph captured; its steps are "
              "replayed", file=sys.stderr, flush=True)
        self.graph.replay()
        return {name: value.clone() for name, value in self.outputs.items()}


class _VmapGroup:
    """Members with equal shapes, their parameters stacked, stepped with one vmapped pass.

    Positions in ``live`` step; the others (finished members, whose state has been written back
    and is ``frozen``, and failed ones) compute on zeros inside the stack and are ignored."""

    def __init__(self, members: list[Trainer]):
        self.members = members
        first = members[0]
        self.device, self.bf16, self.images = first.device, first.bf16, first.images
        self.base = _Member(first.model, first.objective)
        params, self.buffers = stack_module_state([_Member(m.model, m.objective) for m in members])
        own_names = {f"objective.{name}" for name, _ in first.objective.named_parameters()}
        self.model_names = [n for n in params if n not in own_names]
        self.own_names = [n for n in params if n in own_names]
        self.params = params
        self.has_own = bool(self.own_names) and first.objective.own_adam is not None
        self.adam = _StackedAdam([params[n] for n in self.model_names])
        norms = [m.optimisation.grad_clip_norm for m in members]
        # constants uploaded once; the per-step values arrive with the rows (``advance``)
        self.clip_limit = None if all(n is None for n in norms) else torch.tensor(
            [math.inf if n is None else n for n in norms], device=self.device)
        if self.has_own:
            self.own_adam = _StackedAdam([params[n] for n in self.own_names],
                                         betas=first.objective.own_adam.get("betas"))
            self.own_lr = torch.tensor([m.objective.own_adam["lr"] for m in members], device=self.device)
        self.noisy = any(m.optimisation.input_noise_subpixel_std > 0
                         or m.optimisation.input_noise_greyscale_std > 0 for m in members)
        # every argument but the step (one number for all) has the members along dimension 0
        self.terms = vmap(self._member_terms, in_dims=(0, 0, 0, 0, 0, 0, 0, None))
        self.own_terms = vmap(self._member_own_loss, in_dims=(0, 0, 0, 0, None))
        settings = first.settings
        if settings.compile:
            self.terms, self.own_terms = torch.compile(self.terms), torch.compile(self.own_terms)
        self.sampler = _DeviceSampler.for_group(members) if settings.device_sampling else None
        # a CUDA graph needs static shapes and no host numbers: the rows drawn on the device
        self.captured = None
        self.graph_wanted = settings.cuda_graph and self.device.type == "cuda" and self.sampler is not None
        self.frozen: set[int] = set()
        self.load_from_members()

    def _member_terms(self, params, buffers, x, x_in, noise, kl_weight, capacity, step):
        return functional_call(self.base, (params, buffers), (x, x_in, noise, kl_weight, capacity, step))

    def _member_own_loss(self, params, buffers, noise, aux, step):
        return functional_call(self.base, (params, buffers), (None, None, noise, None, None, step),
                               {"aux": aux})

    def _member_params(self, names: list[str], prefix: str, members=None) -> list[list[nn.Parameter]]:
        return [[dict(getattr(_Member(m.model, m.objective), prefix).named_parameters())[n[len(prefix) + 1:]]
                 for n in names] for m in (members or self.members)]

    def load_from_members(self) -> None:
        """Stack the members' current parameters and optimiser states (after a resume). Members
        already at their run's end are ``frozen``: their own modules hold their final state."""
        with torch.no_grad():
            for name, stacked in self.params.items():
                stacked.copy_(torch.stack([dict(_Member(m.model, m.objective).named_parameters())[name]
                                           for m in self.members]))
        self.adam.load_from([m.optimizer for m in self.members],
                            self._member_params(self.model_names, "model"))
        if self.has_own:
            self.own_adam.load_from([m.objective._own_optimizer for m in self.members],
                                    self._member_params(self.own_names, "objective"))
        self.frozen = {k for k, m in enumerate(self.members) if m.step >= m.total_steps}

    def write_member(self, position: int, optimiser_too: bool = True) -> None:
        """Write member ``position``'s stacked parameters (and optimiser states) into its own
        modules and optimisers."""
        member = self.members[position]
        with torch.no_grad():
            own = dict(_Member(member.model, member.objective).named_parameters())
            for name, stacked in self.params.items():
                own[name].copy_(stacked[position])
        if optimiser_too:
            self.adam.save_member(position, member.optimizer,
                                  self._member_params(self.model_names, "model", [member])[0], member.step)
            if self.has_own:
                self.own_adam.save_member(position, member.objective._own_optimizer,
                                          self._member_params(self.own_names, "objective", [member])[0],
                                          member.step)

    def freeze(self, position: int) -> None:
        """Member ``position`` has finished: write its state back once; the stack no longer holds it."""
        if position not in self.frozen:
            self.write_member(position)
            self.frozen.add(position)

    def save_to_members(self) -> None:
        """Write the stacked parameters and optimiser states back into the members."""
        for position in range(len(self.members)):
            if position not in self.frozen:
                self.write_member(position)

    # -- stepping ------------------------------------------------------------------------------

    def advance(self, live: list[int], steps: int) -> dict[int, TermsBlock]:
        """``steps`` steps of the members at positions ``live``; their loss terms by position.
        The schedule values of the steps are computed by each live member's formulas on the host
        and uploaded at once, with (unless ``device_sampling``) the rows drawn from each live
        member's own generator."""
        members, count = self.members, len(self.members)
        rows_per_step = members[live[0]].rows_per_step()
        per_upload = max(1, ROWS_PER_UPLOAD // (rows_per_step * count))
        taken: list[dict[str, torch.Tensor]] = []
        while len(taken) < steps:
            n = min(steps - len(taken), per_upload)
            schedules = np.zeros((n, 3, count))  # KL weight, capacity, learning rate
            rows = None if self.sampler is not None else np.zeros((n, count, rows_per_step), np.int64)
            for k in live:
                schedules[:, :, k] = members[k].schedule_table(n)
                if rows is not None:
                    rows[:, k] = members[k].draw_rows_ahead(n)
            rows_now = None if rows is None else Rows(rows, self.device)
            schedules_now = to_device(schedules.astype(np.float32), self.device)
            taken += [self.train_step(None if rows_now is None else rows_now[i], schedules_now[i], live)
                      for i in range(n)]
        names = tuple(taken[0])
        block = torch.stack([torch.stack([terms[n].detach().float() for n in names]) for terms in taken])
        return {k: TermsBlock(names, block[:, :, k]) for k in live}

    def batch_images(self, rows: Rows) -> torch.Tensor:
        """(K, rows, C, H, W): every member's batch, in one gather."""
        if isinstance(self.images, torch.Tensor):
            return self.images[rows.on_device].to(self.device).float().div_(255.0)
        return to_float(self.images[rows.host], self.device)

    def draw_on_host(self, rows: Rows, live: list[int]):
        """Every member's batch of ``rows``, and the input noise and objective noise each live
        member draws from its own generator, as alone (zeros for the others)."""
        members = self.members
        x = self.batch_images(rows)
        x_in = x
        if self.noisy:  # each member's input noise from its own generator, as alone
            x_in = torch.stack([add_input_noise(x[k], m.optimisation.input_noise_subpixel_std,
                                                m.optimisation.input_noise_greyscale_std, m.noise_rng)
                                if k in live else x[k] for k, m in enumerate(members)])
        drawn = {k: members[k].objective.draw_noise(members[k].noise_rng, x.shape[1], self.device)
                 for k in live}
        like = drawn[live[0]]
        noise = {name: torch.stack([drawn[k][name] if k in drawn else torch.zeros_like(like[name])
                                    for k in range(len(members))]) for name in like}
        return x, x_in, noise

    def train_step(self, rows: Rows | None, schedule: torch.Tensor,
                   live: list[int]) -> dict[str, torch.Tensor]:
        """One step of every member at once; ``schedule`` (3, K): each member's KL weight,
        capacity and learning rate at this step. ``rows`` is None when the group draws its
        own (``device_sampling``)."""
        members = self.members
        step = members[live[0]].step
        if self.sampler is None:
            x, x_in, noise = self.draw_on_host(rows, live)
        else:
            x, x_in, noise = self.sampler.draw(self.base.objective, step)
        if self.graph_wanted:
            terms = self._graph_step(x, x_in, noise, schedule, step)
        else:
            # the step a host number: read by no vmappable objective
            terms = self.step_on(x, x_in, noise, schedule, torch.tensor(step), step + 1)
        for k in live:
            members[k].step += 1
        return terms

    def step_on(self, x, x_in, noise, schedule, step_tensor, count) -> dict[str, torch.Tensor]:
        """Forward, backward, clipping and Adam of every member, on the inputs given: the part of
        a step that a CUDA graph captures (``_CapturedStep``). ``count``: Adam's step number, a
        host number or (captured) a float64 tensor on the device."""
        with self.autocast():
            terms = self.terms(self.params, self.buffers, x, x_in, noise, schedule[0], schedule[1],
                               step_tensor)
        aux = {name: terms.pop(name).detach() for name in list(terms) if name.startswith("_")}
        model_tensors = [self.params[n] for n in self.model_names]
        grads = torch.autograd.grad(terms["loss"].sum(), model_tensors)
        grads = self._clip(grads)
        self.adam.step(model_tensors, grads, schedule[2], count)
        if self.has_own:
            with self.autocast():
                own_loss = self.own_terms(self.params, self.buffers, noise, aux, step_tensor)
            own_tensors = [self.params[n] for n in self.own_names]
            own_grads = torch.autograd.grad(own_loss.sum(), own_tensors)
            self.own_adam.step(own_tensors, own_grads, self.own_lr, count)
            terms[self.members[0].objective.own_loss_name] = own_loss
        return terms

    def _graph_step(self, x, x_in, noise, schedule, step: int) -> dict[str, torch.Tensor]:
        """A step through the captured CUDA graph: its first ``_CapturedStep.WARM_UP`` steps
        run eagerly on a side stream, the next is captured, then each is replayed."""
        if self.captured is None:
            self.captured = _CapturedStep(self, x, x_in, noise, schedule)
        self.captured.load(x, x_in, noise, schedule, step)
        return self.captured.step()

    def autocast(self):
        return members_autocast(self.bf16)

    def _clip(self, grads):
        """Each member's global gradient-norm clipping (``clip_coefficient``, one norm per member)."""
        if self.clip_limit is None:
            return grads
        members = grads[0].shape[0]
        total = torch.stack([g.reshape(members, -1).pow(2).sum(1) for g in grads]).sum(0).sqrt()
        coefficient = clip_coefficient(total, self.clip_limit)
        return [g * _per_member(coefficient, g) for g in grads]


def members_autocast(bf16: bool):
    """bf16 autocast on CUDA when ``bf16``, else nothing."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


# ----------------------------------------------------------------------------------------------
# the pack


class PackedTrainer:
    """Trains ``configs`` together on the rows ``train_indices`` of ``images``: one array of rows
    for every member, or one array per member (members of different splits).

    ``mode`` is "vmap", "loop", or "auto" (vmap on CUDA, loop elsewhere). Objectives that cannot
    run under vmap (``vmappable = False``), the ground-truth decoder and composition tasks
    (``factor_space`` needed) and groups of one member always loop. ``members[k]`` is member k's
    ``Trainer``; after ``run`` its model is trained, as if it had been trained alone; during
    ``run``, ``current_model(k)`` is its model with its current weights. ``settings``: the GPU
    settings (``models.device.GPUSettings``), shared by every member.
    """

    def __init__(self, configs: Sequence[ModelConfig | dict], images: np.ndarray,
                 train_indices: np.ndarray | Sequence[np.ndarray], device: str | torch.device | None = None,
                 factors: np.ndarray | None = None, mode: str = "auto", factor_space=None,
                 settings: GPUSettings | None = None):
        if mode not in MODES:
            raise ValueError(f"mode: unknown {mode!r}; choose one of {', '.join(MODES)}")
        configs = [ModelConfig.from_dict(c) if isinstance(c, dict) else c for c in configs]
        if not configs:
            raise ValueError("configs: a pack needs at least one model config")
        self.device = select_device(device)
        self.settings = settings or GPUSettings()
        self.settings.apply(self.device)
        self.mode = ("vmap" if self.device.type == "cuda" else "loop") if mode == "auto" else mode
        data = resident_images(images, self.device, self.settings)
        rows = member_train_indices(train_indices, len(configs))
        self.members = [self._member(c, data, r, factors, factor_space) for c, r in zip(configs, rows)]
        self.errors: dict[int, str] = {}
        self.groups: list[list[int]] = vmap_groups(configs, train_sizes=[len(r) for r in rows])
        self._group_of = {k: index for index, group in enumerate(self.groups) for k in group}
        # each vmapped group's parts: the group, or its halves after running out of memory
        self._parts = {index: [tuple(group)] for index, group in enumerate(self.groups)
                       if self._vmappable(group)}
        self._stacks: dict[tuple[int, ...], _VmapGroup] = {}  # built at a part's first step
        self._proven: set[tuple[int, ...]] = set()  # parts that have taken steps without running out
        self.halvings: list[str] = []

    def _member(self, config: ModelConfig, images, train_indices, factors, factor_space) -> Trainer:
        """Member ``config``'s trainer, built as the plain path builds one model
        (``models.tasks.build_trainer``), on the pack's device, data and settings."""
        if config.task != "vae" and (factors is None or factor_space is None):
            raise ValueError(f"task: {config.task!r} needs factors= (each image's classes) and factor_space=")
        return build_trainer(config, images, factors, factor_space, train_indices, self.device, self.settings)

    def _vmappable(self, group: list[int]) -> bool:
        member = self.members[group[0]]
        return (self.mode == "vmap" and len(group) > 1 and member.config.task == "vae"
                and getattr(type(member.objective), "vmappable", True))

    def __len__(self) -> int:
        return len(self.members)

    @property
    def total_steps(self) -> int:
        return max(m.total_steps for m in self.members)

    def vmapped_groups(self) -> list[list[int]]:
        """The members stepped together by one vmap each (after any halving)."""
        return [list(part) for parts in self._parts.values() for part in parts]

    def _advance(self, live: list[int], boundaries: dict[int, int]) -> dict[int, TermsBlock]:
        """Step a group's live members to their next report (``train_together``'s ``advance``):
        a vmapped group all at once, as far as the nearest member's boundary (a failed member
        keeps computing inside the stack, its numbers ignored), a looped group one member after
        the other."""
        index = self._group_of[live[0]]
        if index not in self._parts:
            return {k: self.members[k].advance(boundaries[k] - self.members[k].step) for k in live}
        steps = min(boundaries[k] for k in live) - self.members[live[0]].step
        taken: dict[int, TermsBlock] = {}
        for part in list(self._parts[index]):
            part_live = [k for k in part if k in live]
            if part_live:
                taken.update(self._advance_part(index, part, part_live, steps))
        return taken

    def _advance_part(self, index: int, part: tuple[int, ...], live: list[int],
                      steps: int) -> dict[int, TermsBlock]:
        """Step one vmapped part; if it runs out of GPU memory before it has ever stepped, put its
        members back where they were, halve it and step the halves instead."""
        if len(part) == 1:  # one member is no pack: its own Trainer's plain step
            return {part[0]: self.members[part[0]].advance(steps)}
        first = part not in self._proven
        before = [(m.step, m.batch_rng.bit_generator.state, m.noise_rng.get_state())
                  for m in (self.members[k] for k in part)] if first else None
        try:
            if part not in self._stacks:
                self._stacks[part] = _VmapGroup([self.members[k] for k in part])
            stack = self._stacks[part]
            blocks = stack.advance([part.index(k) for k in live], steps)
        except torch.cuda.OutOfMemoryError as error:
            if not first:
                raise
            message = str(error).splitlines()[0]
        else:
            self._proven.add(part)
            for k in live:
                if self.members[k].step >= self.members[k].total_steps:
                    stack.freeze(part.index(k))
            return {part[position]: block for position, block in blocks.items()}
        # out of memory in the first steps (outside the except block, so its frames are freed)
        self._stacks.pop(part, None)
        for k, (step, batch_state, noise_state) in zip(part, before):
            member = self.members[k]
            member.step, member.batch_rng.bit_generator.state = step, batch_state
            member.noise_rng.set_state(noise_state)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        halves = (part[:len(part) // 2], part[len(part) // 2:])
        parts = self._parts[index]
        parts[parts.index(part):parts.index(part) + 1] = list(halves)
        self.halvings.append(f"members {list(part)}: out of GPU memory in their first steps ({message}); "
                             f"retried as packs of {len(halves[0])} and {len(halves[1])}")
        taken: dict[int, TermsBlock] = {}
        for half in halves:
            half_live = [k for k in half if k in live]
            if half_live:
                taken.update(self._advance_part(index, half, half_live, steps))
        return taken

    def advance(self, steps: int) -> dict[int, TermsBlock]:
        """Take ``steps`` steps of every member that has not finished or failed (at most to its
        end), as ``Trainer.advance`` does for one model: the loss terms by member, still on the
        device. ``run`` is the loop with reports; this is for timing and tests."""
        ends = {k: min(m.total_steps, m.step + steps)
                for k, m in enumerate(self.members) if k not in self.errors}
        taken: dict[int, list[TermsBlock]] = {k: [] for k in ends}
        for group in self.groups:
            while live := [k for k in group if k in ends and self.members[k].step < ends[k]]:
                for k, block in self._advance(live, ends).items():
                    taken[k].append(block)
        return {k: TermsBlock(blocks[0].names, torch.cat([b.values for b in blocks]))
                for k, blocks in taken.items() if blocks}

    def run(self, report_every: int = 50) -> Iterator[dict[int, dict]]:
        """Train every member to its run's length. Every ``report_every`` steps (and at each
        member's end) yields {member index: progress dict, as ``Trainer.run`` yields}. A member
        whose loss becomes NaN or infinite reports {"error": message} once and stops."""
        yield from train_together(self.members, report_every, groups=self.groups, advance=self._advance,
                                  errors=self.errors)
        self.sync()

    def current_model(self, k: int) -> nn.Module:
        """Member ``k``'s model with its current weights: in vmap mode its parameters are copied
        out of the stack first (one copy of one member's parameters on the device), so images
        and evaluations during training see the model as it is, not as at the last checkpoint."""
        for part, stack in self._stacks.items():
            if k in part and part.index(k) not in stack.frozen:
                stack.write_member(part.index(k), optimiser_too=False)
        return self.members[k].model

    def graph_outcomes(self) -> dict[str, str]:
        """Each vmapped group whose step is wanted as a CUDA graph (``GPUSettings.cuda_graph``),
        by its members ("members 0-31"): "captured", "fell back: <the first exception of the failed
        capture's chain>", or "not captured yet" (its warm-up steps)."""
        out = {}
        for part, stack in self._stacks.items():
            if stack.graph_wanted:
                captured = stack.captured
                out[f"members {part[0]}-{part[-1]}"] = (captured.outcome if captured is not None
                                                        and captured.outcome else "not captured yet")
        return out

    def sync(self) -> None:
        """Write stacked state back into the members' models and optimisers (vmap mode)."""
        for stack in self._stacks.values():
            stack.save_to_members()

    def member_reports(self, report_every: int = 50) -> Iterator[dict[int, dict]]:
        """``run``'s reports: {member index: report} (as ``Trainer.member_reports``)."""
        yield from self.run(report_every=report_every)

    def pack_state_dict(self) -> dict:
        """Every member's ``Trainer.state_dict`` and the members' errors: ``{"members": [...],
        "errors": {...}}``, a lone ``Trainer``'s ``pack_state_dict`` layout."""
        self.sync()
        return {"members": [m.state_dict() for m in self.members], "errors": dict(self.errors)}

    def load_pack_state_dict(self, state: dict) -> None:
        if len(state["members"]) != len(self.members):
            raise ValueError(f"checkpoint: it holds {len(state['members'])} members; this pack has "
                             f"{len(self.members)}")
        for member, member_state in zip(self.members, state["members"]):
            member.load_state_dict(member_state)
        self.load_errors(state.get("errors", {}))
        self._stacks, self._proven = {}, set()  # restacked from the members at the next step

    def load_errors(self, errors: dict) -> None:
        """The members that diverged, as a checkpoint records them (its keys may be strings)."""
        self.errors = {int(k): v for k, v in errors.items()}
