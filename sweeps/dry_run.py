"""A sweep's plan as text (``--dry-run``): what a run would do, decided without Ray (never imported here)
and without writing anything: the trials and packs, resources, pack size, cost and held-out shortfalls."""

from __future__ import annotations

from collections.abc import Sequence

from analysis import storage
from sweeps.costs import hours, training_steps, trials_cost
from sweeps.options import Sweep, SweepOptions
from sweeps.packing import ASSUMED_GPU_BYTES, make_packs, pack_size_and_reason
from sweeps.search import search_of
from sweeps.trials import TrialConfig

# How a pack is named in the listing: the model settings its members share (sweeps.packing.shared_key)
SHOWN_SHARED = ("architecture", "objective", "task", "latent_dim", "batch_size")
LISTED_PACKS = 100  # the listing's length at most; the count line says how many there are
# Settings that are never listed as varying: they follow from the others
NOT_VARYING = ("trial_key", "condition", "preset", "scale")


def _pack_size(options: SweepOptions, trials: Sequence[TrialConfig]) -> tuple[int, str]:
    """The pack size a run would use, and why; what is assumed where only a running Ray can tell."""
    requested, search = options.pack_size, search_of(options.search)
    if search.decides_one_by_one or options.scheduler == "asha":
        return 1, f"1: --search {options.search} and --scheduler {options.scheduler} decide trial by trial"
    gpus = options.gpus_per_trial
    if gpus is None:
        size, reason = pack_size_and_reason(requested, trials, 0, None)
        return size, reason + ("; planned for CPU trials: on a cluster with GPUs the size is decided "
                               "when Ray starts (pass --gpus-per-trial to plan it)")
    # a card of --gpu-memory GiB (else ASSUMED_GPU_BYTES) is assumed; a size that does not fit is refused
    return pack_size_and_reason(requested, trials, gpus, card_bytes(options))


def card_bytes(options: SweepOptions) -> int | None:
    """The GPU memory the plan assumes: ``--gpu-memory`` GiB, else None (``ASSUMED_GPU_BYTES``)."""
    return None if options.gpu_memory is None else int(options.gpu_memory * 2**30)


def card_line(options: SweepOptions) -> str | None:
    """The plan's line naming the GPU it assumed (None for CPU trials)."""
    if not options.gpus_per_trial:
        return None
    if options.gpu_memory is not None:
        return (f"  GPU:         a card of {options.gpu_memory:g} GiB, as --gpu-memory says (a run measures "
                "the one it gets)")
    return (f"  GPU:         a card of {ASSUMED_GPU_BYTES / 2**30:g} GiB assumed (cluster.yaml's A10G); "
            "--gpu-memory GIB plans for the cluster's card")


def _varying(pack: Sequence[TrialConfig]) -> str:
    """The settings that differ among a pack's members, each with its number of values."""
    names = [n for n in pack[0] if n not in NOT_VARYING]
    counts = {n: len({repr(m.get(n)) for m in pack}) for n in names}
    return ", ".join(f"{n} ({count})" for n, count in counts.items() if count > 1)


def _model_details(pack: Sequence[TrialConfig]) -> list[str]:
    """What else names a pack's model: a CompositionNet's op and loss, a decoder of its own, the lr."""
    model = pack[0].model
    details = [f"latent_op={model.latent_op}", f"composition_loss={model.composition_loss}"] if (
        model.task == "composition") else []
    if model.decoder != "mirror":
        details.append(f"decoder={model.decoder}")
    rates = sorted({member.model.lr for member in pack})
    details.append(f"lr={rates[0]:g}" if len(rates) == 1 else f"lr {rates[0]:g} to {rates[-1]:g}")
    return details


def _steps(pack: Sequence[TrialConfig]) -> str:
    """How long a pack's members train: one figure, or the range where an epoch is each member's own rows."""
    steps = sorted({training_steps(member) for member in pack})
    return f"{steps[0]:,} steps" if len(steps) == 1 else f"{steps[0]:,} to {steps[-1]:,} steps"


def held_out_shortfalls(trials: Sequence[TrialConfig]) -> list[str]:
    """A line per procedural split whose held-out grid is smaller than some trial's ``n_nll``."""
    from data_pipeline.spaces import factor_space
    from data_pipeline.splits import get_split
    asked: dict[tuple[str, str], set[int]] = {}
    for trial in trials:
        if trial.data.data_source == "procedural":
            asked.setdefault((trial.data.dataset, trial.data.split), set()).add(trial.evaluation.n_nll)
    lines = []
    for (dataset, name), n_nlls in asked.items():
        space = factor_space(dataset)
        available = len(get_split(dataset, name, space=space).test_grid_indices(space))
        if short := sorted(n for n in n_nlls if n > available):
            n_nll = ", ".join(f"{n:,}" for n in short)
            lines.append(f"  held out:    {dataset} {name}: {available:,} held-out combinations of the "
                         f"{space.n_images:,}-point grid, fewer than n_nll {n_nll}: its test_nll uses all "
                         f"{available:,}")
    return lines


def plan_text(sweep: Sweep) -> str:
    options, trials = sweep.options, sweep.trials
    size, reason = _pack_size(options, trials)
    packs = make_packs(trials, size)
    cpus, gpus = options.cpus_per_trial, options.gpus_per_trial
    where = storage.join(storage.normalise(options.storage_path), sweep.name)
    lines = [f"Plan of {sweep.preset} at scale {options.scale}, seeds {sweep.seeds} (dry run: no Ray "
             "started, nothing written)",
             f"  results:     {where}"]
    search = search_of(options.search)
    lines += search.dry_run_lines(options, trials)
    gpu_text = ("1 GPU if the cluster has GPUs, else none (decided when Ray starts)" if gpus is None
                else f"{gpus:g} GPU")
    lines.append(f"  per trial:   {cpus:g} CPU and {gpu_text}")
    lines.append(_evaluation_line(search, cpus, gpus))
    if card := card_line(options):
        lines.append(card)
    lines.append(f"  pack size:   {size} ({reason})")
    cost = trials_cost(trials)
    lines.append(f"  cost:        {cost['images']:,} training images; {hours(cost['gpu_hours'])} GPU-hours "
                 "(V100-equivalent at Dittadi et al. 2021's effective training rate, packing aside); "
                 f"{hours(cost['cpu_core_hours'])} CPU-core-hours")
    lines += _pack_lines(packs)
    lines.extend(held_out_shortfalls(trials))
    lines.append(f"{len(trials)} trials in {len(packs)} packs")
    return "\n".join(lines)


def _evaluation_line(search, cpus: float, gpus: float | None) -> str:
    if gpus is None and search.defers_evaluation(1.0):
        return ("  evaluation:  in the trial on CPUs; with GPUs, in CPU-only tasks of "
                f"{cpus:g} CPU each once a trial's models are trained (the GPU goes to the next trial)")
    if search.defers_evaluation(gpus or 0.0):
        return (f"  evaluation:  in CPU-only Ray tasks of {cpus:g} CPU each, one per model, once its "
                "trial has trained (the GPU goes to the next trial)")
    return "  evaluation:  in the trial, after training"


def _pack_lines(packs: list) -> list[str]:
    """One line per pack (the first ``LISTED_PACKS``): what its members share and what varies."""
    lines = [f"  packs ({len(packs)}):"]
    width = len(str(len(packs)))
    for index, pack in enumerate(packs[:LISTED_PACKS], 1):
        model = pack[0].model
        shared = " ".join([pack[0].data.dataset, *(f"{n}={getattr(model, n)}" for n in SHOWN_SHARED),
                           *_model_details(pack)])
        shared += f", {_steps(pack)}"
        members = f"varying: {_varying(pack)}" if len(pack) > 1 else f"trial {pack[0].dirname}"
        plural = "s" if len(pack) > 1 else " "
        lines.append(f"    pack {index:>{width}}: {len(pack):>3} trial{plural}  {shared}; {members}")
    if len(packs) > LISTED_PACKS:
        lines.append(f"    … and {len(packs) - LISTED_PACKS} more packs")
    return lines
