"""What a preset costs: trial counts and compute estimates from measured throughput.

The throughput figures are measurements (benchmarks/README.md), not guesses; a figure that has not
been measured is shown as such rather than invented.
"""

from __future__ import annotations

import functools

from sweeps.grid import default_seeds, trial_configs
from sweeps.presets import PRESETS

# Training images per second of one burgess β-VAE trial at batch 64 on one CPU core, two trials
# sharing a 2-core x86_64 machine (benchmarks/default_study.py, 2026-11-21).
CPU_IMAGES_PER_SECOND = {"burgess": 390.0}
# Training images per second of one trial on one GPU. None: not measured yet (no GPU was lent).
GPU_IMAGES_PER_SECOND: dict[str, float | None] = {"burgess": None}


@functools.cache
def _full_grid_train_size(dataset: str, split: str) -> int:
    """Training images of the whole grid under a split (computed once per dataset and split)."""
    from data_pipeline import factor_space, get_split

    space = factor_space(dataset)
    return int((~get_split(dataset, split).test_mask(space.all_classes(), space)).sum())


def preset_cost(name: str, scale: str, seeds: int | None = None) -> dict:
    """Trial count and training cost of a preset at a scale. Trials that train by epochs are
    counted at the size of the full grid's training side."""
    from models import ModelConfig

    spec = PRESETS[name]
    seeds = seeds or default_seeds(spec, scale)
    configs = trial_configs(spec, name, scale, list(range(seeds)))
    images, cpu_seconds, gpu_seconds, unmeasured = 0, 0.0, 0.0, False
    for config in configs:
        model = ModelConfig.from_dict(config)
        n_train = config.get("n_images")
        if n_train is None:
            n_train = _full_grid_train_size(config["dataset"], config["split"])
        trial_images = model.total_steps(n_train) * model.batch_size
        images += trial_images
        cpu = CPU_IMAGES_PER_SECOND.get(model.architecture)
        gpu = GPU_IMAGES_PER_SECOND.get(model.architecture)
        unmeasured |= cpu is None
        cpu_seconds += trial_images / cpu if cpu else 0.0
        gpu_seconds += trial_images / gpu if gpu else 0.0
    return {"preset": name, "scale": scale, "trials": len(configs), "seeds": seeds, "images": images,
            "cpu_core_hours": None if unmeasured else cpu_seconds / 3600,
            "gpu_hours": gpu_seconds / 3600 if gpu_seconds else None}


def presets_table() -> str:
    def hours(value):
        return "not measured" if value is None else f"{value:,.2f}" if value < 10 else f"{value:,.0f}"

    lines = [f"{'preset':<12} {'scale':<6} {'seeds':>5} {'trials':>6} {'training images':>16} "
             f"{'CPU-core-h':>12} {'GPU-h':>12}"]
    for name in sorted(PRESETS):
        for scale in PRESETS[name]["scales"]:
            cost = preset_cost(name, scale)
            lines.append(f"{name:<12} {scale:<6} {cost['seeds']:>5} {cost['trials']:>6} "
                         f"{cost['images']:>16,} {hours(cost['cpu_core_hours']):>12} "
                         f"{hours(cost['gpu_hours']):>12}")
        lines.append(f"  {name}: {PRESETS[name]['description']}")
    lines.append("CPU figures: measured burgess throughput on a 2-core x86_64 machine "
                 "(benchmarks/README.md). GPU figures: not measured yet.")
    return "\n".join(lines)
