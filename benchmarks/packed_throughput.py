"""Training throughput of the plain path (one model, ``Trainer``) and of packs (``PackedTrainer``).

    python benchmarks/packed_throughput.py                      # CPU: K = 8 burgess β-VAEs, batch 64
    python benchmarks/packed_throughput.py --device cuda --k 1 8 32 128

Every figure is training images per second, summed over a pack's members, measured in this one
process with the engine's own ``advance`` (the steps of a report interval, without the report):
- ``plain``: one model, ``Trainer`` (what a one-model trial runs);
- ``separate``: K models one after another, each its own ``Trainer`` (K single-model trials,
  minus Ray);
- ``packed-loop`` and ``packed-vmap``: one ``PackedTrainer`` in each mode.
On a GPU each run is synchronised before and after its timed steps. ``measure_plain`` and
``measure_pack`` are what ``benchmarks/gpu_figures.py`` (``benchmarks/gpu.sh``) calls: each frees
what earlier runs left on the GPU first (``release``) and counts its peak memory from what is still
allocated then, and ``host_and_gpu_per_step`` times a step's Python dispatch against its GPU time.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from models import GPUSettings, ModelConfig, Trainer, build, build_trainer  # noqa: E402
from models.packed import PackedTrainer, dataset_bytes, pack_memory_bytes  # noqa: E402


def pack_configs(k: int, architecture: str = "burgess", batch_size: int = 64, image_size: int = 64,
                 channels: int = 1, steps: int = 1000, bf16: bool | None = None, objective: str = "beta_vae",
                 **fields) -> list[ModelConfig]:
    """K models that differ in β and seed, as a sweep's pack does (β-VAEs unless ``objective`` or
    ``fields``, e.g. ``task="ground_truth_decoder"``, say otherwise)."""
    betas = (1.0, 2.0, 4.0, 8.0)
    return [ModelConfig(architecture=architecture, objective=objective, beta=betas[i % len(betas)], seed=i,
                        batch_size=batch_size, steps=steps, image_size=image_size, channels=channels,
                        bf16=bf16, **fields) for i in range(k)]


def synthetic_images(n: int, channels: int = 1, size: int = 64, seed: int = 0) -> np.ndarray:
    """Random binary uint8 images (0/255)."""
    rng = np.random.default_rng(seed)
    return ((rng.random((n, channels, size, size)) > 0.7) * 255).astype(np.uint8)


def synthetic_classes(n: int, space, seed: int = 0) -> np.ndarray:
    """(n, factors) random factor classes of ``space`` (a ``data_pipeline`` ``FactorSpace``): what
    the ground-truth decoder reads beside ``synthetic_images``."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, size, n) for size in space.sizes], axis=1)


def images_per_step(config: ModelConfig) -> int:
    """Images one step of ``config`` trains on: the batch, both images of each pair for pair
    objectives (as ``sweeps.costs.training_images`` counts them)."""
    return config.batch_size * (2 if config.needs_pairs else 1)


# What a figure that only a GPU measures holds on a CPU (benchmarks/check_gpu_figures.py accepts it
# in the CPU smoke, nowhere else)
NOT_ON_CPU = "not measured: needs CUDA"


def synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(advance, device: torch.device, steps: int, rounds: int, warmup: int) -> list[float]:
    """Seconds of ``advance(steps)`` in each of ``rounds`` rounds, after ``advance(warmup)``."""
    if warmup:
        advance(warmup)
    seconds = []
    for _ in range(rounds):
        synchronise(device)
        started = time.perf_counter()
        advance(steps)
        synchronise(device)
        seconds.append(time.perf_counter() - started)
    return seconds


def release(device: torch.device) -> int:
    """Free what earlier measurements left and start a new peak: trainers sit in reference cycles,
    so they are collected first (``gc.collect``), then the GPU is synchronised, the allocator's
    cache emptied and its peak reset. Returns the bytes still allocated on the GPU (0 elsewhere):
    the baseline a measurement's peak is counted from."""
    gc.collect()
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def memory_since(device: torch.device, baseline: int) -> dict:
    """The peak memory of what ran since ``release`` returned ``baseline``: allocated (less the
    baseline) and reserved by PyTorch, and the device's whole used memory now (other processes and
    the CUDA context included). Nothing on a CPU."""
    if device.type != "cuda":
        return {}
    free, total = torch.cuda.mem_get_info(device)
    return {"peak_allocated_bytes": torch.cuda.max_memory_allocated(device) - baseline,
            "baseline_allocated_bytes": baseline,
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(device),
            "device_used_bytes": total - free}


def _sleep_cycles_per_second(device: torch.device) -> float:
    """The rate of ``torch.cuda._sleep``'s spin (GPU clock cycles per second), timed once."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 20_000_000
    torch.cuda._sleep(cycles // 10)  # a first call loads the kernel
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / (start.elapsed_time(end) / 1e3)


def host_and_gpu_per_step(advance, device: torch.device, repeats: int, steps: int = 10) -> dict:
    """The host's time to dispatch a step against the GPU's time to run it, from ``advance(steps)``
    (a report interval's worth of steps, as training takes them: one row draw and one upload for
    all of them, not one per step): ``time.perf_counter`` around the call, which does not wait for
    the GPU, and CUDA events around it, each divided by ``steps``; the median of ``repeats`` calls.
    On a GPU each call is queued behind a ``torch.cuda._sleep`` longer than its dispatch, so its
    kernels run back to back and the events time the GPU's work, not the gaps the host leaves
    (``gpu_may_have_idled`` says when a dispatch outlasted the sleep, as it does when the host is
    the bottleneck or when the launch queue filled and the host waited on it). A host time near or
    above the GPU time means the step is bound by Python dispatch and kernel launches."""
    host, gpu, idled = [], [], False
    if device.type != "cuda":
        for _ in range(repeats):
            started = time.perf_counter()
            advance(steps)
            host.append((time.perf_counter() - started) / steps)
        return {"host_enqueue_ms_per_step": 1e3 * statistics.median(host),
                "gpu_ms_per_step": NOT_ON_CPU, "timed_calls": repeats, "steps_per_timed_call": steps}
    sleep_rate = _sleep_cycles_per_second(device) if hasattr(torch.cuda, "_sleep") else None
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    longest = 0.02 * steps
    for _ in range(repeats):
        synchronise(device)
        sleep = 2 * longest + 0.005
        if sleep_rate:
            torch.cuda._sleep(int(sleep * sleep_rate))
        start.record()
        started = time.perf_counter()
        advance(steps)
        seconds = time.perf_counter() - started
        end.record()
        end.synchronize()
        host.append(seconds / steps)
        gpu.append(start.elapsed_time(end) / 1e3 / steps)
        idled |= not sleep_rate or seconds > sleep
        longest = max(longest, seconds)
    out = {"host_enqueue_ms_per_step": 1e3 * statistics.median(host),
           "gpu_ms_per_step": 1e3 * statistics.median(gpu), "timed_calls": repeats,
           "steps_per_timed_call": steps, "gpu_may_have_idled": idled}
    out["host_over_gpu"] = out["host_enqueue_ms_per_step"] / out["gpu_ms_per_step"]
    return out


def make_trainer(config: ModelConfig, images: np.ndarray, device: torch.device, settings: GPUSettings | None,
                 classes: np.ndarray | None = None, space=None) -> Trainer:
    """One model's trainer on every row of ``images``: ``Trainer`` for a VAE, the task's own for
    the others (they read ``classes`` in ``space``)."""
    rows = np.arange(len(images))
    if config.task == "vae":
        return Trainer(build(config), images, rows, config, device, factors=classes, settings=settings)
    return build_trainer(config, images, classes, space, rows, device, settings)


def measure_plain(config: ModelConfig, images: np.ndarray, device: torch.device, steps: int, rounds: int = 3,
                  warmup: int = 5, settings: GPUSettings | None = None, timing_repeats: int = 0,
                  classes: np.ndarray | None = None, space=None, timing_steps: int = 10) -> dict:
    """Images per second of one model on the plain path (median over rounds), its peak memory,
    and with ``timing_repeats`` its host and GPU time per step (``host_and_gpu_per_step``, from
    ``advance(timing_steps)``)."""
    baseline = release(device)
    trainer = make_trainer(config, images, device, settings, classes, space)
    seconds = _timed(trainer.advance, device, steps, rounds, warmup)
    per_step = images_per_step(config)
    per_round = [steps * per_step / s for s in seconds]
    out = {"members": 1, "images_per_second": statistics.median(per_round),
           "rounds_images_per_second": per_round, "bf16": trainer.bf16, "steps_timed": steps,
           **memory_since(device, baseline)}
    if timing_repeats:
        out.update(host_and_gpu_per_step(trainer.advance, device, timing_repeats, timing_steps))
    del trainer
    release(device)
    return out


def measure_pack(configs: list[ModelConfig], images: np.ndarray, device: torch.device, steps: int,
                 rounds: int = 3, warmup: int = 5, mode: str = "vmap",
                 settings: GPUSettings | None = None, timing_repeats: int = 0,
                 classes: np.ndarray | None = None, space=None, loop_member_steps: int | None = None,
                 timing_steps: int = 10) -> dict:
    """Aggregate images per second of a pack (median over rounds), its peak memory against the
    sizing estimate, the vmapped groups it ran as (after any halving for memory; none: the members
    looped), with ``GPUSettings.cuda_graph`` each group's capture (``cuda_graph``: "captured" or
    "fell back: <why>"), and with ``timing_repeats`` its host and GPU time per step (from
    ``advance(timing_steps)``). A pack whose members loop
    (a task or objective that ``PackedTrainer`` does not vmap) takes K plain steps a step: with
    ``loop_member_steps``, its steps and warm-up are cut so a round takes about that many."""
    baseline = release(device)
    pack = PackedTrainer(configs, images, np.arange(len(images)), device=device, mode=mode, settings=settings,
                         factors=classes, factor_space=space)
    if loop_member_steps and not pack.vmapped_groups():
        steps = max(2, min(steps, loop_member_steps // len(configs)))
        warmup = max(1, min(warmup, steps // 2))
    seconds = _timed(pack.advance, device, steps, rounds, warmup)
    per_round = [len(configs) * steps * images_per_step(configs[0]) / s for s in seconds]
    groups = [len(g) for g in pack.vmapped_groups()]
    out = {"members": len(configs), "images_per_second": statistics.median(per_round),
           "rounds_images_per_second": per_round, "bf16": pack.members[0].bf16, "mode": pack.mode,
           "stepped": "vmap" if groups else "loop (one member after another)",
           "vmapped_group_sizes": groups, "halvings": pack.halvings,
           "steps_timed": steps, **memory_since(device, baseline)}
    if timing_repeats:
        out.update(host_and_gpu_per_step(pack.advance, device, timing_repeats, timing_steps))
    if outcomes := pack.graph_outcomes():
        out["cuda_graph"] = outcomes
    del pack
    release(device)
    if device.type == "cuda":
        data = dataset_bytes(*images.shape[:2], images.shape[2])
        # the process's whole estimate (against device_used_bytes), and the part PyTorch allocates
        # (against peak_allocated_bytes): the members and the uploaded dataset
        out["estimate_bytes"] = pack_memory_bytes(configs[0], len(configs), device, data)
        out["estimate_members_and_data_bytes"] = pack_memory_bytes(configs[0], len(configs), "cpu") + data
    return out


def measure_separate(configs: list[ModelConfig], images: np.ndarray, device: torch.device, steps: int,
                     rounds: int, warmup: int) -> float:
    """Aggregate images per second of K models trained one after another."""
    seconds = [0.0] * rounds
    for config in configs:
        trainer = Trainer(build(config), images, np.arange(len(images)), config, device)
        for r, s in enumerate(_timed(trainer.advance, device, steps, rounds, warmup)):
            seconds[r] += s
    return statistics.median(len(configs) * steps * configs[0].batch_size / s for s in seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, nargs="+", default=[8], help="pack sizes (default: 8)")
    parser.add_argument("--architecture", default="burgess")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians reported")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--channels", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--modes", nargs="+", default=None,
                        help="packed modes to time (default: loop and vmap on CPU, vmap on GPU)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    modes = args.modes or (["loop", "vmap"] if device.type == "cpu" else ["vmap"])
    images = synthetic_images(4096, args.channels, args.image_size)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(f"# {name}; torch {torch.__version__}; {torch.get_num_threads()} CPU threads; "
          f"load {os.getloadavg()[0]:.1f}; {args.architecture} β-VAE, batch {args.batch}, "
          f"{args.image_size} px, {args.steps} timed steps × {args.rounds} rounds")
    total = 2 + args.steps * (args.rounds + 1)
    shape = dict(architecture=args.architecture, batch_size=args.batch, image_size=args.image_size,
                 channels=args.channels, steps=total)
    plain = measure_plain(pack_configs(1, **shape)[0], images, device, args.steps, args.rounds, 2)
    print(f"plain (one model): {plain['images_per_second']:8.0f} img/s")
    for k in args.k:
        configs = pack_configs(k, **shape)
        separate = measure_separate(configs, images, device, args.steps, args.rounds, 2)
        print(f"K={k:<4} separate: {separate:8.0f} img/s")
        for mode in modes:
            measured = measure_pack(configs, images, device, args.steps, args.rounds, 2, mode)
            rate = measured["images_per_second"]
            print(f"K={k:<4} packed-{mode:<5}: {rate:8.0f} img/s   {rate / separate:5.2f}× separate, "
                  f"{rate / plain['images_per_second']:5.2f}× one model", flush=True)


if __name__ == "__main__":
    main()
