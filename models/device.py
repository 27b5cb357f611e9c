"""Where training runs: the device, the settings that make a GPU fast, and the data's way there.

- ``select_device``: cuda, then mps, then cpu, unless one is named.
- ``GPUSettings``: the fast settings a CUDA run uses by default (TF32 matmuls and convolutions,
  ``cudnn.benchmark``, channels-last weights, a fused Adam, the dataset uploaded once), each with a
  switch to turn it off; the process's share of the GPU's memory (``memory_share``, enforced on
  the caching allocator when below 1); and three opt-ins, off by default until measured on a
  GPU: ``compile`` (``torch.compile`` of the loss, plain and vmapped), ``device_sampling`` (a
  vmapped group's batch rows and noise drawn for all its members at once on the device, from one
  generator seeded from the members' seeds and the step, instead of each member's own generators
  on the host: deterministic given the seeds, but a member no longer sees the batches and noise
  it would see alone; it applies to vmapped groups on any device, and changes nothing elsewhere)
  and ``cuda_graph`` (with ``device_sampling``, a vmapped group's step after its draws, forward,
  backward, clipping and Adam, captured once in a CUDA graph and replayed; nothing on a CPU).
  Apart from ``device_sampling``, they apply on CUDA only: on a CPU nothing here changes a
  number. (bf16 autocast is the model config's ``bf16`` field, because it changes the numbers a
  run gives: on by default on CUDA too.)
- ``resident_images``: the uint8 dataset copied to the GPU once, when it takes at most half of the
  process's share of the GPU's memory; else each batch travels from host memory.
- ``Rows``: the row indices of some steps' batches, on the host and, on a GPU, uploaded in one
  asynchronous copy from pinned memory, so a step never waits on the host for its data.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import numpy as np
import torch


def select_device(preferred: str | torch.device | None = None) -> torch.device:
    """``preferred`` if given, else cuda, then mps, then cpu."""
    if isinstance(preferred, torch.device):
        return preferred
    if preferred:
        return torch.device(preferred)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def to_float(batch: np.ndarray, device: torch.device) -> torch.Tensor:
    """uint8 images (0..255) → float in [0, 1] on ``device`` (through pinned memory to a GPU, so
    the copy does not wait for the GPU's queue)."""
    tensor = torch.from_numpy(batch)
    if device.type == "cuda":
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True).float().div_(255.0)


@dataclass(frozen=True)
class GPUSettings:
    """How training uses a CUDA device. Every switch but ``compile``, ``device_sampling`` and
    ``cuda_graph`` is on by default; on any other device all are ignored but two: ``fused_adam``,
    which a CPU's plain path uses too (one pass over each parameter instead of foreach's several;
    the numbers differ from foreach's by rounding), and ``device_sampling``, which changes what a
    vmapped group draws on any device (a CPU pack is vmapped only when ``mode="vmap"`` is asked for)."""

    tf32: bool = True  # float32 matmuls and convolutions on TF32 tensor cores (process-wide flags)
    cudnn_benchmark: bool = True  # cuDNN times its algorithms once per shape and keeps the fastest
    channels_last: bool = True  # a model's convolution weights in NHWC (the plain path; see docs/models.md)
    fused_adam: bool = True  # the plain path: torch.optim.Adam(fused=True); off: foreach
    resident_data: bool = True  # the uint8 dataset uploaded once (when it fits in half the share)
    compile: bool = False  # torch.compile of the loss (plain and vmapped); off until measured on a GPU
    memory_share: float = 1.0  # the share of the GPU's memory this process may use (Ray's num_gpus)
    device_sampling: bool = False  # a vmapped group's rows and noise drawn on its device, for all members
    cuda_graph: bool = False  # with device_sampling, a vmapped group's step captured in a CUDA graph

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type == "bool" and not isinstance(value, bool):
                raise ValueError(f"{field.name}: expected true or false; got {value!r}")
        if not 0 < self.memory_share <= 1:
            raise ValueError(f"memory_share: must be in (0, 1], a share of one GPU; got {self.memory_share}")

    @classmethod
    def parse(cls, text: str | None) -> GPUSettings:
        """Settings from ``"tf32=off,compile=on,memory_share=0.25"`` (the rest at their defaults);
        the environment variable ``DISGEN_GPU_SETTINGS`` takes the same text."""
        values: dict = {}
        names = {f.name: f for f in dataclasses.fields(cls)}
        for item in filter(None, (part.strip() for part in (text or "").split(","))):
            name, _, value = item.partition("=")
            name = name.strip().replace("-", "_")
            if name not in names:
                raise ValueError(f"GPU setting {name!r}: unknown; choose from {', '.join(names)}")
            value = value.strip().lower()
            if names[name].type == "bool":
                if value not in ("on", "off", "true", "false", "1", "0"):
                    raise ValueError(f"GPU setting {name}: expected on or off; got {value!r}")
                values[name] = value in ("on", "true", "1")
            else:
                try:
                    values[name] = float(value)
                except ValueError:
                    raise ValueError(f"GPU setting {name}: expected a number; got {value!r}") from None
        return cls(**values)

    @classmethod
    def from_environment(cls) -> GPUSettings:
        """``parse(os.environ["DISGEN_GPU_SETTINGS"])``, or the defaults."""
        return cls.parse(os.environ.get("DISGEN_GPU_SETTINGS"))

    def apply(self, device: torch.device) -> None:
        """Set the process-wide flags these settings name (TF32, cuDNN benchmark) for a CUDA
        device, and with a ``memory_share`` below 1 cap the process's caching allocator at that
        share of the device's memory (``torch.cuda.set_per_process_memory_fraction``: past it,
        an allocation raises out-of-memory instead of taking another process's share); nothing
        for any other device."""
        if device.type != "cuda":
            return
        torch.backends.cuda.matmul.allow_tf32 = self.tf32
        torch.backends.cudnn.allow_tf32 = self.tf32
        torch.backends.cudnn.benchmark = self.cudnn_benchmark
        if self.memory_share < 1:
            torch.cuda.set_per_process_memory_fraction(self.memory_share, device)


def free_memory_bytes(device: torch.device) -> int:
    """Free memory on ``device``: the GPU's free memory, or the host's available memory."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:  # pragma: no cover - psutil comes with ray, but models does not need ray
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def share_bytes(device: torch.device, settings: GPUSettings) -> int:
    """The memory this process may use on ``device``: the free memory, at most its share of the
    GPU's total."""
    free = free_memory_bytes(device)
    if device.type != "cuda":
        return free
    return int(min(free, settings.memory_share * torch.cuda.get_device_properties(device).total_memory))


def fits_resident(dataset_bytes: int, budget_bytes: int) -> bool:
    """Whether a dataset is uploaded to the GPU: when it takes at most half the budget."""
    return dataset_bytes <= 0.5 * budget_bytes


def resident_images(images, device: torch.device, settings: GPUSettings | None = None):
    """The uint8 images where training reads them: on a GPU, one upload shared by every model of
    the process (when ``resident_data`` and they take at most half the process's share of the
    memory), else the host array."""
    settings = settings or GPUSettings()
    if device.type != "cuda" or isinstance(images, torch.Tensor) or not settings.resident_data:
        return images
    if not fits_resident(images.nbytes, share_bytes(device, settings)):
        return images
    return torch.from_numpy(np.ascontiguousarray(images)).to(device)


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host array on ``device``: a zero-copy view on a CPU; on a GPU one copy from pinned memory
    that the host does not wait for (so it is no synchronisation)."""
    tensor = torch.from_numpy(array)
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor if device.type == "cpu" else tensor.to(device)


class Rows:
    """Row indices of the data, one row of ``host`` (an int64 array) per step (or per step and
    member), and the same on the device (``on_device``): a zero-copy view on a CPU, one upload
    from pinned memory, not waited for, on a GPU."""

    def __init__(self, host: np.ndarray, device: torch.device):
        self.host = np.ascontiguousarray(host, dtype=np.int64)
        self.on_device = to_device(self.host, device)

    def __len__(self) -> int:
        return len(self.host)

    def __getitem__(self, index) -> Rows:
        part = Rows.__new__(Rows)
        part.host, part.on_device = self.host[index], self.on_device[index]
        return part
