"""Training throughput (images/s) of disgen's engine, per architecture.

    python benchmarks/train_throughput.py [--threads 2] [--seconds 2] [--rounds 9]

For burgess β-VAE at batch 64 on CPU it also times, in the same process and interleaved round by
round so machine load hits all three alike:
- a plain PyTorch reference loop: the same model, batch and Adam, data drawn from the same
  in-memory uint8 array, written the obvious way;
- the engine's pure model step: ``Trainer.train_step`` with the data path replaced by one fixed
  float batch already on the device;
and reports engine / reference (must be >= 1.0) and engine / pure model step (the data path must
deliver >= 95%). Rates are medians over rounds; ratios are medians of the per-round ratios.
With a GPU it also times every architecture on it in float32 and bf16 autocast.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from models import ARCHITECTURES, ModelConfig, Trainer, build


def synthetic_images(n: int, size: int = 64, channels: int = 1, seed: int = 0) -> np.ndarray:
    """Binary squares at random places, uint8 0/255: dSprites-like data held in memory."""
    rng = np.random.default_rng(seed)
    images = np.zeros((n, channels, size, size), np.uint8)
    for i, (x, y, s) in enumerate(zip(*rng.integers(0, size // 2, size=(2, n)), rng.integers(6, 16, n))):
        images[i, :, y:y + s, x:x + s] = 255
    return images


def timed(step, batch_images: int, seconds: float) -> float:
    """Images/s of ``step`` run for about ``seconds`` (after one untimed call)."""
    step()
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        step()
        count += 1
    return count * batch_images / (time.perf_counter() - started)


def reference_loop(config: ModelConfig, images: np.ndarray, device: torch.device):
    """A plain PyTorch β-VAE step, as one would write it without disgen."""
    model = build(config).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    rng = np.random.default_rng(config.seed)

    def step():
        rows = rng.integers(0, len(images), config.batch_size)
        x = torch.from_numpy(images[rows]).to(device).float() / 255
        mean, logvar = model.encode(x)
        z = mean + torch.randn_like(mean) * torch.exp(0.5 * logvar)
        logits = model.decode(z)
        reconstruction = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / len(x)
        kl = 0.5 * (mean.pow(2) + logvar.exp() - logvar - 1).sum(1).mean()
        loss = reconstruction + config.beta * kl
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def engine_step(config, images, device):
    trainer = Trainer(build(config), images, np.arange(len(images)), config, device)
    trainer.model.train()
    return trainer.train_step


def pure_model_step(config, images, device):
    """The engine's step with the data path replaced by a fixed batch already on the device."""
    trainer = Trainer(build(config), images, np.arange(len(images)), config, device)
    trainer.model.train()
    fixed = trainer.batch_images(trainer.rows_ahead(1)[0])
    trainer.batch_images = lambda rows: fixed
    return trainer.train_step


def machine() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    return (f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads, load average {', '.join(f'{v:.2f}' for v in load)}")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=2.0, help="timing per measurement")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds for the burgess comparison")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--architectures", nargs="*", default=list(ARCHITECTURES))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    cpu = torch.device("cpu")
    results: dict = {"machine": machine(), "cpu": {}, "gpu": None}
    print(results["machine"])

    images = synthetic_images(4096)
    config = ModelConfig(architecture="burgess", objective="beta_vae", beta=4.0, batch_size=args.batch_size)
    steps = {"reference": reference_loop(config, images, cpu), "engine": engine_step(config, images, cpu),
             "pure_model_step": pure_model_step(config, images, cpu)}
    measured = {name: [] for name in steps}
    names = list(steps)
    for round_ in range(args.rounds):  # short blocks, the order rotated each round
        for name in names[round_ % 3:] + names[:round_ % 3]:
            measured[name].append(timed(steps[name], args.batch_size, args.seconds))
    burgess = {name: statistics.median(values) for name, values in measured.items()}
    # ratios per round (the blocks of one round saw about the same load), then the median
    burgess["engine_over_reference"] = statistics.median(
        e / r for e, r in zip(measured["engine"], measured["reference"]))
    burgess["data_path_share"] = statistics.median(
        e / p for e, p in zip(measured["engine"], measured["pure_model_step"]))
    burgess["rounds"] = measured
    # the data path on its own (drawing rows, indexing the uint8 array, converting to float):
    # cheap and short, so its time is far less sensitive to machine load than the ratios above
    trainer = Trainer(build(config), images, np.arange(len(images)), config, cpu)
    repeats, started = 200, time.perf_counter()
    for _ in range(repeats):
        trainer.batch_images(trainer.rows_ahead(1)[0])
    batch_ms = (time.perf_counter() - started) / repeats * 1e3
    step_ms = args.batch_size / burgess["pure_model_step"] * 1e3
    burgess["data_path_ms_per_step"] = batch_ms
    burgess["data_path_share_from_costs"] = step_ms / (step_ms + batch_ms)
    results["burgess_beta_vae_cpu"] = burgess
    print(f"burgess β-VAE, batch {args.batch_size}, CPU: reference {burgess['reference']:.0f} img/s, "
          f"engine {burgess['engine']:.0f} img/s, pure model step {burgess['pure_model_step']:.0f} img/s; "
          f"engine/reference {burgess['engine_over_reference']:.3f} (target >= 1.0), "
          f"engine/pure {burgess['data_path_share']:.3f} (target >= 0.95); data path alone "
          f"{batch_ms:.2f} ms a step against {step_ms:.0f} ms for the model step, a share of "
          f"{burgess['data_path_share_from_costs']:.4f}")

    for architecture in args.architectures:
        arch_config = ModelConfig(architecture=architecture, batch_size=args.batch_size)
        rate = timed(engine_step(arch_config, images, cpu), args.batch_size, args.seconds)
        results["cpu"][architecture] = rate
        print(f"CPU {architecture:>10} 64 px, batch {args.batch_size}: {rate:8.1f} img/s")

    if torch.cuda.is_available():
        gpu = torch.device("cuda")
        results["gpu"] = {"device": torch.cuda.get_device_name(0)}
        for architecture in args.architectures:
            for size in (64, 128):
                data = synthetic_images(4096, size=size, channels=3)
                for bf16 in (False, True):
                    arch_config = ModelConfig(architecture=architecture, image_size=size, channels=3,
                                              batch_size=args.batch_size, bf16=bf16)
                    step = engine_step(arch_config, data, gpu)

                    def synced(step=step):
                        step()
                        torch.cuda.synchronize()

                    rate = timed(synced, args.batch_size, args.seconds)
                    key = f"{architecture}_{size}px_{'bf16' if bf16 else 'fp32'}"
                    results["gpu"][key] = rate
                    print(f"GPU {key:>24}: {rate:9.1f} img/s")
    else:
        print("no GPU on this machine: GPU figures not measured")
    print(json.dumps(results, default=float))
    return results


if __name__ == "__main__":
    main()
