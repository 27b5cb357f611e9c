"""Packs: trials that share a dataset, a split and a model shape, trained together in one Tune trial.

A pack is one Tune trial whose config is ``{"pack": [member config, ...]}``; the trainable trains
its members with ``models.packed.PackedTrainer`` and the results writer still stores one row per
member, with the member's own config, key and metrics. Members may differ only in the scalar
hyperparameters of ``models.packed.SCALAR_FIELDS`` and the seed; everything else (the dataset,
split, data, evaluation settings, architecture, objective, latent size, batch, run length) is the
pack's. Trials that differ there are put in different packs, never refused.
"""

from __future__ import annotations

import functools
import hashlib
import json

from sweeps.errors import UsageError
from sweeps.grid import complete_config

# Keys that name a trial or follow from the others, not part of what a pack shares.
_NOT_SHARED = ("trial_key", "condition", "preset", "scale")
AUTO = "auto"
# Without knowing a GPU's memory (an autoscaling cluster with no GPU node up yet), assume the
# smallest of the common training GPUs: cluster.yaml's g5 instances have 24 GB A10Gs.
ASSUMED_GPU_BYTES = 24 * 2**30
AUTO_LIMIT = 64


def is_pack(config: dict) -> bool:
    return "pack" in config


def shared_key(config: dict) -> str:
    """Trials with equal keys may share a pack."""
    from models import ModelConfig
    from models.packed import SCALAR_FIELDS, pack_key

    model = ModelConfig.from_dict(config)
    rest = {k: v for k, v in config.items()
            if k not in _NOT_SHARED and k not in SCALAR_FIELDS and k not in model.to_dict()}
    return json.dumps([rest, pack_key(model)], sort_keys=True, default=str)


def make_packs(configs: list[dict], pack_size: int) -> list[list[dict]]:
    """The trial configs grouped into packs of at most ``pack_size`` (first-seen order)."""
    if pack_size < 1:
        raise UsageError(f"--pack-size: must be at least 1 or 'auto'; got {pack_size}")
    groups: dict[str, list[dict]] = {}
    for config in configs:
        complete = complete_config(config)
        groups.setdefault(shared_key(complete), []).append(config)
    return [members[start:start + pack_size] for members in groups.values()
            for start in range(0, len(members), pack_size)]


def pack_key(members: list[dict]) -> str:
    """A pack's stable identifier: a hash of its members' trial keys."""
    keys = sorted(complete_config(m)["trial_key"] for m in members)
    return hashlib.sha1(",".join(keys).encode()).hexdigest()[:10]


def pack_dirname(members: list[dict]) -> str:
    first = complete_config(members[0])
    return f"pack{len(members)}-{first['split']}-{pack_key(members)[:6]}"


@functools.cache
def dataset_channels(dataset: str) -> int:
    """Image channels of a dataset (1 or 3), from one rendered grid point."""
    from data_pipeline import factor_space, load_procedural

    space = factor_space(dataset)
    return load_procedural(dataset, classes=space.classes_of([0])).channels


def member_model(config: dict):
    """The ModelConfig of one trial config, with its dataset's channels."""
    from models import ModelConfig

    config = complete_config(config)
    return ModelConfig.from_dict({**config, "channels": dataset_channels(config["dataset"])})


def resolve_pack_size(requested: str | int | None, configs: list[dict], gpus_per_trial: float,
                      gpu_free_bytes: int | None) -> int:
    """The pack size to use. ``auto``: 1 for CPU trials (a CPU pack is a loop, and would take
    parallel slots from Ray), else as many members as fit in the GPU share's memory, up to
    ``AUTO_LIMIT``. An explicit size larger than the device allows is a UsageError naming the
    largest that fits."""
    from models.packed import free_memory_bytes, max_pack_size, member_memory_bytes

    model = max((member_model(c) for c in configs), key=member_memory_bytes)
    if gpus_per_trial > 0:
        device_bytes = int((gpu_free_bytes or ASSUMED_GPU_BYTES) * min(1.0, gpus_per_trial))
        where = f"{gpus_per_trial:g} GPU ({device_bytes / 2**30:.0f} GiB free"
        where += ")" if gpu_free_bytes else ", assumed)"
    else:
        import torch

        device_bytes, where = free_memory_bytes(torch.device("cpu")), "host memory"
    fits = max_pack_size(model, "cpu", free_bytes=device_bytes)
    if requested in (None, AUTO):
        return 1 if gpus_per_trial == 0 else min(AUTO_LIMIT, fits)
    size = int(requested)
    if size < 1:
        raise UsageError(f"--pack-size: must be at least 1 or 'auto'; got {size}")
    if size > fits:
        need = member_memory_bytes(model)
        raise UsageError(f"--pack-size {size}: {size} members of {model.architecture}/{model.objective} at "
                         f"batch {model.batch_size} need about {size * need / 2**30:.1f} GiB, more than "
                         f"the {where} allows; the largest pack that fits is {fits}")
    return size
