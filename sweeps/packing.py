"""Packs: trials that share a dataset, a split and a model shape, trained together in one Tune trial.

Every Tune trial's config is ``{"members": [trial settings, ...]}``: one trial, or a pack of them
(an Optuna trial's is ``{"base": index, "sampled": {setting: value}}``, resolved by ``members_of``).
The trainable trains the members with ``models.packed.PackedTrainer`` and the results writer
stores one row per member, with the member's own config, key and metrics. Members may differ
only in the scalar hyperparameters of ``models.packed.SCALAR_FIELDS`` and the seed; everything
else (the dataset, split, data, evaluation settings, architecture, objective, latent size, batch,
run length) is the pack's. Trials that differ there are put in different packs, never refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from sweeps.errors import UsageError
from sweeps.trials import TrialConfig

# Keys that name a trial or follow from the others, not part of what a pack shares.
_NOT_SHARED = ("trial_key", "condition", "preset", "scale")
AUTO = "auto"
# Without knowing a GPU's memory (an autoscaling cluster with no GPU node up yet), assume the
# smallest of the common training GPUs: cluster.yaml's g5 instances have 24 GB A10Gs.
ASSUMED_GPU_BYTES = 24 * 2**30
AUTO_LIMIT = 64


def tune_config(members: Sequence[TrialConfig]) -> dict:
    """The Tune trial config of one trial or of a pack."""
    return {"members": [member.to_dict() for member in members]}


def members_of(config: dict, base: Sequence[TrialConfig] = ()) -> list[TrialConfig]:
    """The trials a Tune trial config holds. An Optuna trial names a planned trial of ``base``
    and the values sampled for it, which replace the planned ones (validated again)."""
    if "members" in config:
        return [TrialConfig(member) for member in config["members"]]
    if "base" in config:
        return [base[config["base"]].replace("search", **config["sampled"])]
    raise ValueError("not a disgen trial config: it holds neither 'members' nor 'base' (an experiment "
                     "started by an older disgen cannot be resumed by this one; start a new one)")


def shared_key(trial: TrialConfig) -> str:
    """Trials with equal keys may share a pack."""
    from models.packed import SCALAR_FIELDS, pack_key

    model_fields = trial.model.to_dict()
    rest = {k: v for k, v in trial.items()
            if k not in _NOT_SHARED and k not in SCALAR_FIELDS and k not in model_fields}
    return json.dumps([rest, pack_key(trial.model)], sort_keys=True, default=str)


def make_packs(trials: Sequence[TrialConfig], pack_size: int) -> list[list[TrialConfig]]:
    """The trials grouped into packs of at most ``pack_size`` (first-seen order)."""
    if pack_size < 1:
        raise UsageError(f"--pack-size: must be at least 1 or 'auto'; got {pack_size}")
    groups: dict[str, list[TrialConfig]] = {}
    for trial in trials:
        groups.setdefault(shared_key(trial), []).append(trial)
    return [members[start:start + pack_size] for members in groups.values()
            for start in range(0, len(members), pack_size)]


def pack_key(members: Sequence[TrialConfig]) -> str:
    """A pack's stable identifier: a hash of its members' trial keys."""
    keys = sorted(m.trial_key for m in members)
    return hashlib.sha1(",".join(keys).encode()).hexdigest()[:10]


def dirname(members: Sequence[TrialConfig]) -> str:
    """The Tune trial's folder: the trial's own name, or the pack's."""
    if len(members) == 1:
        return members[0].dirname
    return f"pack{len(members)}-{members[0].data.split}-{pack_key(members)[:6]}"


def resolve_pack_size(requested: str | int | None, trials: Sequence[TrialConfig], gpus_per_trial: float,
                      gpu_free_bytes: int | None) -> int:
    """The pack size to use. ``auto``: 1 for CPU trials (a CPU pack is a loop, and would take
    parallel slots from Ray), else as many members as fit in the GPU share's memory, up to
    ``AUTO_LIMIT``. An explicit size larger than the device allows is a UsageError naming the
    largest that fits."""
    from models.packed import free_memory_bytes, max_pack_size, member_memory_bytes

    model = max((trial.model for trial in trials), key=member_memory_bytes)
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
