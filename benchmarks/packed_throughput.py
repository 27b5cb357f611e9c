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
``measure_pack`` are what ``benchmarks/gpu_figures.py`` (``benchmarks/gpu.sh``) calls.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from models import GPUSettings, ModelConfig, Trainer, build  # noqa: E402
from models.packed import PackedTrainer, dataset_bytes, pack_memory_bytes  # noqa: E402


def pack_configs(k: int, architecture: str = "burgess", batch_size: int = 64, image_size: int = 64,
                 channels: int = 1, steps: int = 1000, bf16: bool | None = None) -> list[ModelConfig]:
    """K β-VAEs that differ in β and seed, as a sweep's pack does."""
    betas = (1.0, 2.0, 4.0, 8.0)
    return [ModelConfig(architecture=architecture, objective="beta_vae", beta=betas[i % len(betas)], seed=i,
                        batch_size=batch_size, steps=steps, image_size=image_size, channels=channels,
                        bf16=bf16) for i in range(k)]


def synthetic_images(n: int, channels: int = 1, size: int = 64, seed: int = 0) -> np.ndarray:
    """Random binary uint8 images (0/255)."""
    rng = np.random.default_rng(seed)
    return ((rng.random((n, channels, size, size)) > 0.7) * 255).astype(np.uint8)


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


def _memory(device: torch.device) -> dict:
    if device.type != "cuda":
        return {}
    free, total = torch.cuda.mem_get_info(device)
    return {"peak_allocated_bytes": torch.cuda.max_memory_allocated(device),
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(device),
            "device_used_bytes": total - free}


def _reset_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def measure_plain(config: ModelConfig, images: np.ndarray, device: torch.device, steps: int, rounds: int = 3,
                  warmup: int = 5, settings: GPUSettings | None = None) -> dict:
    """Images per second of one model on the plain path (median over rounds), and its memory."""
    _reset_memory(device)
    trainer = Trainer(build(config), images, np.arange(len(images)), config, device, settings=settings)
    seconds = _timed(trainer.advance, device, steps, rounds, warmup)
    rate = steps * config.batch_size / statistics.median(seconds)
    per_round = [steps * config.batch_size / s for s in seconds]
    return {"images_per_second": rate, "rounds_images_per_second": per_round,
            "bf16": trainer.bf16, "steps_timed": steps, **_memory(device)}


def measure_pack(configs: list[ModelConfig], images: np.ndarray, device: torch.device, steps: int,
                 rounds: int = 3, warmup: int = 5, mode: str = "vmap",
                 settings: GPUSettings | None = None) -> dict:
    """Aggregate images per second of a pack (median over rounds), its memory against the sizing
    estimate, and the vmapped groups it ran as (after any halving for memory)."""
    _reset_memory(device)
    pack = PackedTrainer(configs, images, np.arange(len(images)), device=device, mode=mode, settings=settings)
    seconds = _timed(pack.advance, device, steps, rounds, warmup)
    per_round = [len(configs) * steps * configs[0].batch_size / s for s in seconds]
    out = {"members": len(configs), "images_per_second": statistics.median(per_round),
           "rounds_images_per_second": per_round, "bf16": pack.members[0].bf16, "mode": pack.mode,
           "vmapped_group_sizes": [len(g) for g in pack.vmapped_groups()], "halvings": pack.halvings,
           "steps_timed": steps, **_memory(device)}
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
