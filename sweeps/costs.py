"""What a preset costs: trial counts, and compute from two measured figures: a burgess β-VAE's 390 images/s
on one core of a 2-core x86_64 machine (benchmarks/default_study.py), and the 2.8 V100-years of Dittadi et
al. 2021's 1,080 models (V100-equivalent GPU-hours, a lower bound for one small model per GPU). Other
networks scale by their training FLOPs per image, counted layer by layer."""

from __future__ import annotations

import functools
import math

from sweeps.grid import default_seeds, trial_configs
from sweeps.presets import PRESETS

# A burgess β-VAE trial's images/s at batch 64 on one core of a 2-core x86_64 (benchmarks/default_study.py)
CPU_IMAGES_PER_SECOND = {"burgess": 390.0}
# Dittadi et al. 2021: 1,080 models × 400k steps × 64 images in about 2.8 GPU-years (V100).
D21_IMAGES = 1080 * 400_000 * 64
D21_GPU_SECONDS = 2.8 * 365.25 * 24 * 3600
BACKWARD_FACTOR = 3  # a training step's FLOPs ≈ forward + backward (twice the forward)


@functools.cache
def training_flops_per_image(architecture: str, image_size: int, channels: int, latent_dim: int,
                             decoder_only: bool = False, decoder: str = "mirror", encodes: int = 1,
                             decodes: int = 1) -> float:
    """Forward and backward FLOPs of one image (a zero image through the network on the CPU): the
    decoder's only for ``decoder_only``;
    ``encodes``/``decodes``: images per row (a composition triplet: 2 and 1, or 3 with M22's loss)."""
    import torch

    from models import VAE, ModelConfig
    config = ModelConfig(architecture=architecture, image_size=image_size, channels=channels,
                         latent_dim=latent_dim, decoder=decoder)
    with torch.device("meta"):  # no weights drawn; then memory on the CPU, left as it is: only shapes count
        model = VAE(config.network)
    model = model.to_empty(device="cpu").eval()  # a forward pass on the meta device imports torch._dynamo
    batch = torch.zeros(1, channels, image_size, image_size)
    codes = torch.zeros(1, latent_dim)
    encoding = 0
    with torch.no_grad():
        if not decoder_only:
            encoding, (codes, _) = _forward_flops(model, model.encode, batch)
        decoding, _ = _forward_flops(model, model.decode, codes)
    return float(BACKWARD_FACTOR * (encodes * encoding + decodes * decoding))


def _forward_flops(model, forward, inputs) -> tuple[int, object]:
    """(FLOPs, output) of ``forward(inputs)``: 2 per multiply-add of each convolution, transposed
    convolution and linear layer it runs, from their shapes (forward hooks), as
    ``torch.utils.flop_counter`` counts them (bias and activations not counted; the same numbers on
    every architecture and decoder), without its import of ``torch._dynamo``: 2-4 s of every driver's
    start."""
    from torch import nn
    total = 0

    def count(layer, args, output):
        nonlocal total
        if isinstance(layer, nn.Linear):  # rows × in × out
            total += 2 * (output.numel() // output.shape[-1]) * layer.weight.numel()
        else:  # batch × kernel × the output's positions (a transposed one: the input's)
            positions = args[0].shape[2:] if isinstance(layer, nn.ConvTranspose2d) else output.shape[2:]
            total += 2 * output.shape[0] * layer.weight.numel() * math.prod(positions)

    counted = (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)
    hooks = [m.register_forward_hook(count) for m in model.modules() if isinstance(m, counted)]
    try:
        output = forward(inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return total, output


def gpu_flops_per_second() -> float:
    """D21's effective training rate on a V100: their images × FLOPs per image / their GPU-seconds."""
    return D21_IMAGES * training_flops_per_image("dittadi", 128, 3, 10) / D21_GPU_SECONDS


@functools.cache
def _full_grid_train_size(dataset: str, split: str) -> int:
    """The whole grid's training images under a split; a file-only dataset's published size."""
    from data_pipeline import factor_space, get_split
    from data_pipeline.spaces import has_generator
    if not has_generator(dataset):
        from data_pipeline.robot_finger import PUBLISHED_SIZE
        return PUBLISHED_SIZE
    space = factor_space(dataset)
    return int(get_split(dataset, split).train_mask(space.all_classes(), space).sum())


def training_steps(trial) -> int:
    """The steps one trial trains for (an epoch: ``n_images`` rows, or the whole grid's training side)."""
    n_train = trial.data.n_images
    if n_train is None:
        n_train = _full_grid_train_size(trial.data.dataset, trial.data.split)
    return trial.model.total_steps(n_train)


def training_images(trial) -> int:
    """The images one trial trains on: ``training_steps`` batches, pairs (Ada-GVAE) counting twice."""
    model = trial.model
    return training_steps(trial) * model.batch_size * (2 if model.needs_pairs else 1)


def relative_flops(trial) -> float:
    """A trial's training FLOPs per image over the reference network's (burgess, 64 px, 10 latents)."""
    model = trial.model
    encodes, decodes = 1, 1
    if model.task == "composition":  # a triplet: both inputs encoded; the target, or all three, decoded
        encodes, decodes = 2, 3 if model.composition_loss == "all_three" else 1
    return (training_flops_per_image(model.architecture, model.image_size, model.channels, model.latent_dim,
                                     model.task == "ground_truth_decoder", model.decoder, encodes, decodes)
            / training_flops_per_image("burgess", 64, 1, 10))


def trials_cost(trials) -> dict:
    """Images, CPU-core-hours and V100-equivalent GPU-hours of training ``trials``."""
    reference = training_flops_per_image("burgess", 64, 1, 10)
    gpu_rate = gpu_flops_per_second()
    images, cpu_seconds, gpu_seconds = 0, 0.0, 0.0
    for trial in trials:
        trial_images, relative = training_images(trial), relative_flops(trial)
        images += trial_images
        cpu_seconds += trial_images * relative / CPU_IMAGES_PER_SECOND["burgess"]
        gpu_seconds += trial_images * relative * reference / gpu_rate
    return {"trials": len(trials), "images": images, "cpu_core_hours": cpu_seconds / 3600,
            "gpu_hours": gpu_seconds / 3600}


def preset_cost(name: str, scale: str, seeds: int | None = None) -> dict:
    """Trial count and training cost of a preset at a scale (``trials_cost``)."""
    spec = PRESETS[name]
    seeds = seeds or default_seeds(spec, scale)
    trials = trial_configs(spec, name, scale, list(range(seeds)))
    return {"preset": name, "scale": scale, "seeds": seeds, **trials_cost(trials)}


def hours(value: float) -> str:
    return f"{value:,.2f}" if value < 10 else f"{value:,.0f}"


def presets_table() -> str:
    lines = [f"{'preset':<12} {'scale':<6} {'seeds':>5} {'trials':>6} {'training images':>16} "
             f"{'CPU-core-h':>12} {'GPU-h (V100)':>13}"]
    for name in sorted(PRESETS):
        for scale in PRESETS[name]["scales"]:
            cost = preset_cost(name, scale)
            lines.append(f"{name:<12} {scale:<6} {cost['seeds']:>5} {cost['trials']:>6} "
                         f"{cost['images']:>16,} {hours(cost['cpu_core_hours']):>12} "
                         f"{hours(cost['gpu_hours']):>13}")
        lines.append(f"  {name}: {PRESETS[name]['description']}")
    lines.append(
        "CPU-core-h: measured burgess throughput (390 img/s per core, 2-core x86_64), other networks "
        "scaled by FLOPs.\nGPU-h: V100-equivalent hours at the effective training rate of Dittadi et "
        f"al. 2021's published cost (2.8 GPU-years for 1,080 models: {gpu_flops_per_second() / 1e12:.1f} "
        "TFLOP/s); no disgen GPU measurement exists yet. For small networks this is a lower bound "
        "unless models are packed per GPU (--pack-size).")
    return "\n".join(lines)
