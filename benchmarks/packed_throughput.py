"""Packed training throughput: K models trained together against K separate single-model runs.

    python benchmarks/packed_throughput.py                      # CPU: K = 8 burgess β-VAEs, batch 64
    python benchmarks/packed_throughput.py --device cuda --k 1 8 32 128

Every figure is training images per second summed over the members, measured in this one process:
- ``separate``: the K models trained one after another, each by its own ``Trainer`` (what K
  single-model trials do, minus Ray);
- ``packed-loop`` and ``packed-vmap``: one ``PackedTrainer`` in each mode.
The ratio is packed over separate. On a GPU the baseline is one model alone (one model per
process), so the ratio at K = 32 is the issue's "aggregate throughput over one model per process",
and the model FLOP utilisation is the achieved FLOP/s (the FLOPs of one member's training step,
counted by ``torch.utils.flop_counter``, times the steps taken) over the GPU's peak.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from models import ModelConfig, Trainer, build  # noqa: E402
from models.packed import PackedTrainer  # noqa: E402

# Dense peak FLOP/s by GPU name fragment: (fp32 without tensor cores, tf32 / bf16 tensor cores).
PEAK_FLOPS = {"H200": (67e12, 989e12), "H100": (67e12, 989e12), "A100": (19.5e12, 312e12),
              "V100": (15.7e12, 125e12), "A10G": (31.2e12, 125e12), "L4": (30.3e12, 121e12)}


def configs(k: int, args) -> list[ModelConfig]:
    betas = (1.0, 2.0, 4.0, 8.0)
    return [ModelConfig(architecture=args.architecture, objective="beta_vae", beta=betas[i % len(betas)],
                        seed=i, batch_size=args.batch, steps=args.steps + 1, image_size=args.image_size,
                        channels=args.channels) for i in range(k)]


def synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_separate(members: list[ModelConfig], images, device) -> float:
    """Seconds to train each config alone, one after another (the first step of each untimed, so
    ``steps - 1`` timed steps each)."""
    total = 0.0
    for config in members:
        trainer = Trainer(build(config), images, np.arange(len(images)), config, device)
        trainer.train_step()  # warm-up: allocator, cuDNN autotuning
        synchronise(trainer.device)
        started = time.perf_counter()
        for _ in trainer.run(report_every=config.steps):
            pass
        synchronise(trainer.device)
        total += time.perf_counter() - started
    return total


def time_packed(members: list[ModelConfig], images, device, mode: str) -> float:
    trainer = PackedTrainer(members, images, np.arange(len(images)), device=device, mode=mode)
    for index, group in enumerate(trainer.groups):  # warm-up: one step of every member, untimed
        trainer._advance_group(index, group, report_every=1)
    synchronise(trainer.device)
    started = time.perf_counter()
    for _ in trainer.run(report_every=members[0].steps):
        pass
    synchronise(trainer.device)
    return time.perf_counter() - started


def step_flops(config: ModelConfig, images, device) -> float:
    """FLOPs of one training step of one model (forward and backward), as PyTorch counts them."""
    from torch.utils.flop_counter import FlopCounterMode

    trainer = Trainer(build(config), images, np.arange(len(images)), config, device)
    with FlopCounterMode(display=False) as counter:
        trainer.train_step()
    return float(counter.get_total_flops())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, nargs="+", default=[8], help="pack sizes (default: 8)")
    parser.add_argument("--architecture", default="burgess")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30, help="timed steps per model")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians reported")
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
    rng = np.random.default_rng(0)
    shape = (4096, args.channels, args.image_size, args.image_size)
    images = ((rng.random(shape) > 0.7) * 255).astype(np.uint8)

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(f"# {name}; torch {torch.__version__}; {torch.get_num_threads()} CPU threads; "
          f"load {os.getloadavg()[0]:.1f}; {args.architecture} β-VAE, batch {args.batch}, "
          f"{args.image_size} px, {args.steps} timed steps per model")
    flops = step_flops(configs(1, args)[0], images, device) if device.type == "cuda" else None
    peak = next((p for key, p in PEAK_FLOPS.items() if key in name), None) if flops else None

    for k in args.k:
        members = configs(k, args)
        images_trained = k * args.steps * args.batch
        # one model per process is the baseline on a GPU; K after one another on a CPU
        baseline_members = members[:1] if device.type == "cuda" else members
        # rounds interleave the runs, so a slow spell of a shared machine hits them alike
        rates: dict[str, list[float]] = {"separate": [], **{mode: [] for mode in modes}}
        seconds_of: dict[str, list[float]] = {mode: [] for mode in modes}
        for _ in range(args.rounds):
            baseline = time_separate(baseline_members, images, device)
            rates["separate"].append(len(baseline_members) * args.steps * args.batch / baseline)
            for mode in modes:
                seconds_of[mode].append(time_packed(members, images, device, mode))
                rates[mode].append(images_trained / seconds_of[mode][-1])
        baseline_rate = float(np.median(rates["separate"]))
        print(f"K={k:<4} separate{'(1 model)' if device.type == 'cuda' else ''}: {baseline_rate:8.0f} img/s "
              f"(rounds: {', '.join(f'{r:.0f}' for r in rates['separate'])})")
        for mode in modes:
            rate = float(np.median(rates[mode]))
            seconds = float(np.median(seconds_of[mode]))
            line = (f"K={k:<4} packed-{mode:<5}: {rate:8.0f} img/s   ratio {rate / baseline_rate:5.2f} "
                    f"(rounds: {', '.join(f'{r:.0f}' for r in rates[mode])})")
            if flops and peak:
                achieved = flops * k * args.steps / seconds
                line += (f"   {achieved / 1e12:6.1f} TFLOP/s, MFU {achieved / peak[0]:.1%} of fp32 peak, "
                         f"{achieved / peak[1]:.1%} of tensor-core peak")
            print(line, flush=True)


if __name__ == "__main__":
    main()
