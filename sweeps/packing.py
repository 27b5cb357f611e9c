"""Packs: trials that share a dataset and a model shape (``shared_key``), trained together in one Tune
trial. A Tune trial's config names its members by trial key, never their settings, as Tune writes it into
every result (benchmarks/README.md, "Small results")."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

import numpy as np

from sweeps.errors import UsageError
from sweeps.outcome import TrialOutcome, is_final
from sweeps.trials import TrialConfig

# What a pack's members share besides data and evaluation settings: one vmap, one code path, one length
MODEL_SHARED = ("architecture", "objective", "task", "latent_dim", "batch_size", "image_size", "channels",
                "steps", "epochs", "epoch_length")
AUTO = "auto"
# A GPU of unknown memory (no GPU node up yet) is taken for the smallest common one: cluster.yaml's A10G
ASSUMED_GPU_BYTES = 24 * 2**30
AUTO_LIMIT = 64


def tune_config(members: Sequence[TrialConfig]) -> dict:
    """The Tune trial config of one trial or of a pack: its members' trial keys, in order."""
    return {"members": [member.trial_key for member in members]}


class PlannedTrials(Sequence):
    """The planned trials by position and by key (``get``); kept as plain settings, built when looked up."""

    def __init__(self, trials: Sequence[TrialConfig] = (), settings: Sequence[dict] | None = None):
        if settings is None:
            self._trials: list[TrialConfig | None] = list(trials)
            self._settings = [trial.to_dict() for trial in self._trials]
        else:
            self._settings, self._trials = list(settings), [None] * len(settings)
        self._index = {settings["trial_key"]: k for k, settings in enumerate(self._settings)}

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[k] for k in range(*index.indices(len(self)))]
        if self._trials[index] is None:
            self._trials[index] = TrialConfig(self._settings[index])
        return self._trials[index]

    def __len__(self) -> int:
        return len(self._settings)

    def get(self, key: str) -> TrialConfig | None:
        index = self._index.get(key)
        return None if index is None else self[index]

    def __reduce__(self):
        return PlannedTrials, ((), self._settings)


def planned(base: Sequence[TrialConfig]) -> PlannedTrials:
    """``base`` as ``PlannedTrials`` (itself if it is already)."""
    return base if isinstance(base, PlannedTrials) else PlannedTrials(base)


def members_of(config: dict, base: Sequence[TrialConfig] = ()) -> list[TrialConfig]:
    """The trials a Tune trial config holds, from the planned ``base``: by key, or Optuna's sampled one."""
    if "members" in config:
        members = config["members"]
        plan = planned(() if all(isinstance(member, Mapping) for member in members) else base)
        found = [TrialConfig(m) if isinstance(m, Mapping) else plan.get(m) for m in members]
        if missing := [key for key, trial in zip(members, found) if trial is None]:
            named = ", ".join(map(str, members))
            raise UsageError(f"trial {missing[0]} (of the Tune trial of {named}) is not in this run's "
                             "plan, which holds the settings Tune's state names by key; resume "
                             "with the grid, --scale and options the experiment was started with")
        return found
    if "base" in config:
        return [base[config["base"]].replace("search", **config["sampled"])]
    raise ValueError("not a disgen trial config: it holds neither 'members' nor 'base' (an experiment "
                     "started by an older disgen cannot be resumed by this one; start a new one)")


def outcome_of(result: dict | None, config: dict, base: Sequence[TrialConfig] = ()) -> TrialOutcome | None:
    """A Tune trial's final ``result`` as its ``TrialOutcome``, settings from the plan; None if not final."""
    if not is_final(result):
        return None
    older = all("config" in member for member in result["members"])
    return TrialOutcome.from_report(result, () if older else members_of(config, base))


def shared_key(trial: TrialConfig) -> str:
    """Trials with equal keys may share a pack: data settings but the split, evaluation, ``MODEL_SHARED``."""
    data = trial.data
    model = trial.model
    shared = {"data": [data.data_source, data.dataset, data.n_images, data.data_seed],
              "evaluation": trial.evaluation, "model": [getattr(model, name) for name in MODEL_SHARED]}
    return json.dumps(shared, sort_keys=True, default=str)


def check_pack_size(requested: str | int | None, one_by_one: bool = False) -> int | str:
    """``--pack-size`` checked: ``auto`` or None, or a whole number >= 1 (only 1 for ``one_by_one``)."""
    if requested in (None, AUTO):
        return AUTO
    if isinstance(requested, bool) or not str(requested).isdigit() or int(requested) < 1:
        raise UsageError(f"--pack-size: must be a whole number >= 1 or 'auto'; got {requested!r}")
    if int(requested) > 1 and one_by_one:
        raise UsageError("--pack-size > 1 cannot be combined with --search optuna or --scheduler "
                         "asha, which decide trial by trial; use --pack-size 1")
    return int(requested)


def make_packs(trials: Sequence[TrialConfig], pack_size: int,
               kept: Sequence[Sequence[str]] = ()) -> list[list[TrialConfig]]:
    """The trials grouped into packs of at most ``pack_size`` (first-seen order). ``kept``: the packs
    (their members' keys) of the experiment's last run; each whose members are all among ``trials``
    stays as it was, so that its in-training checkpoint, in a folder named by the pack's members
    (``sweeps.checkpoints.checkpoint_folder``), is found again: a resume after a member failed, or an
    extension whose new trials sort between the old ones, would otherwise regroup the packs and
    start them from step 0. The other trials are packed as usual."""
    pack_size = check_pack_size(pack_size)
    by_key = {trial.trial_key: trial for trial in trials}
    packs = [[by_key[key] for key in pack] for pack in kept
             if 1 < len(pack) <= pack_size and all(key in by_key for key in pack)]
    packed = {member.trial_key for pack in packs for member in pack}
    groups: dict[str, list[TrialConfig]] = {}
    for trial in trials:
        if trial.trial_key not in packed:
            groups.setdefault(shared_key(trial), []).append(trial)
    return packs + [members[start:start + pack_size] for members in groups.values()
                    for start in range(0, len(members), pack_size)]


def pack_id(members: Sequence[TrialConfig]) -> str:
    """A pack's stable identifier: a hash of its members' trial keys."""
    keys = sorted(m.trial_key for m in members)
    return hashlib.sha1(",".join(keys).encode()).hexdigest()[:10]


def dirname(members: Sequence[TrialConfig], full: bool = False) -> str:
    """The Tune trial's folder: the trial's or pack's name, ending in its key or pack id (``full``: all)."""
    if len(members) == 1:
        return members[0].full_name if full else members[0].dirname
    splits = {m.data.split for m in members}
    where = members[0].data.split if len(splits) == 1 else members[0].data.dataset
    ident = pack_id(members)
    return f"pack{len(members)}-{where}-{ident if full else ident[:6]}"


def tensorboard_folder(trials: Sequence[TrialConfig], trial: TrialConfig, remote: bool) -> str:
    """A model's TensorBoard folder in the experiment (on remote storage, inside its pack's)."""
    return f"{dirname(trials)}/{trial.dirname}" if remote and len(trials) > 1 else trial.dirname


def trial_dataset_bytes(trial: TrialConfig) -> int:
    """The bytes of the uint8 dataset a trial's process loads."""
    from data_pipeline import factor_space
    from models.packed import dataset_bytes
    n_images = trial.data.n_images
    if n_images is None:
        n_images = int(np.prod(factor_space(trial.data.dataset).sizes, dtype=np.int64))
    return dataset_bytes(n_images, trial.model.channels, trial.model.image_size)


def pack_size_and_reason(requested: str | int | None, trials: Sequence[TrialConfig], gpus_per_trial: float,
                         gpu_free_bytes: int | None) -> tuple[int, str]:
    """The pack size to use and why, in one line. ``auto``: 1 on CPUs (a CPU pack is a loop), else as many
    members as fit in the GPU share's memory (``models.packed``), up to ``AUTO_LIMIT``; ``gpu_free_bytes``
    None: ``ASSUMED_GPU_BYTES``. An explicit size that does not fit is a UsageError."""
    from models.packed import max_pack_size, pack_memory_bytes, vmap_group_key
    size = check_pack_size(requested)
    if size == AUTO and gpus_per_trial == 0:
        return 1, "auto: 1 on CPUs, where a pack is a loop over its members and takes Ray's parallel slots"
    device, device_bytes, data, where = _device_share(trials, gpus_per_trial, gpu_free_bytes)
    # the shape of which the fewest fit (a looped pack's members need less than vmapped ones)
    shapes = {vmap_group_key(trial.model): trial.model for trial in trials}
    fits, model = min((max_pack_size(m, device, free_bytes=device_bytes, dataset=data), index, m)
                      for index, m in enumerate(shapes.values()))[::2]
    shape = f"{model.architecture}/{model.objective} at batch {model.batch_size}"
    if size == AUTO:
        return _auto_size(fits, model, shape, where, data, device_bytes)
    if size > fits:
        need = pack_memory_bytes(model, size, device, data, device_bytes)
        raise UsageError(f"--pack-size {size} does not fit: {size} members of {shape} need about "
                         f"{need / 2**30:.1f} GiB with their process and data, and at most {fits} fit in 80% "
                         f"of {where}; use --pack-size {fits} or --pack-size auto")
    return size, f"as asked (--pack-size {size}; up to {fits} members of {shape} fit in {where})"


def _device_share(trials: Sequence[TrialConfig], gpus_per_trial: float,
                  gpu_free_bytes: int | None) -> tuple[str, int, int, str]:
    """(device, bytes a trial's share holds, dataset bytes it uploads, the share in words)."""
    if gpus_per_trial > 0:
        device_bytes = int((gpu_free_bytes or ASSUMED_GPU_BYTES) * min(1.0, gpus_per_trial))
        where = f"{gpus_per_trial:g} GPU ({device_bytes / 2**30:.1f} GiB free"
        where += ")" if gpu_free_bytes else f", assumed: a {ASSUMED_GPU_BYTES / 2**30:.0f} GiB GPU)"
        return "cuda", device_bytes, max(trial_dataset_bytes(trial) for trial in trials), where
    import torch

    from models.packed import free_memory_bytes
    return "cpu", free_memory_bytes(torch.device("cpu")), 0, "host memory"


def _auto_size(fits: int, model, shape: str, where: str, data: int, device_bytes: int) -> tuple[int, str]:
    """``auto`` on a GPU: as many members as fit, up to ``AUTO_LIMIT``, and why."""
    from models.packed import CUDA_PROCESS_BYTES, fits_resident, member_memory_bytes
    size = min(AUTO_LIMIT, fits)
    uploaded = data if fits_resident(data, device_bytes) else 0
    reason = (f"auto: {fits} members of {shape} fit in 80% of {where}, at "
              f"{member_memory_bytes(model) / 2**20:.0f} MiB each (weights, gradients, Adam, activations) "
              f"beside the process's {CUDA_PROCESS_BYTES / 2**30:.1f} GiB and its "
              f"{uploaded / 2**30:.1f} GiB dataset upload")
    return size, reason + (f"; capped at {AUTO_LIMIT}" if size < fits else "")


def resolve_pack_size(requested: str | int | None, trials: Sequence[TrialConfig], gpus_per_trial: float,
                      gpu_free_bytes: int | None) -> int:
    """The pack size to use (``pack_size_and_reason`` says why)."""
    return pack_size_and_reason(requested, trials, gpus_per_trial, gpu_free_bytes)[0]
