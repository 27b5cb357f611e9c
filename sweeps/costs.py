"""What a preset costs: trial counts and compute estimates from measured throughput.

The throughput figures are measurements (benchmarks/README.md), not guesses; a figure that has not
been measured is shown as such rather than invented.
"""

from __future__ import annotations

from sweeps.presets import PRESETS

# Training images per second of one burgess β-VAE trial at batch 64 on one CPU core, two trials
# sharing a 2-core x86_64 machine (benchmarks/default_study.py, 2026-11-21).
CPU_IMAGES_PER_SECOND = {"burgess": 390.0}
# Training images per second of one trial on one GPU. None: not measured yet (no GPU was lent).
GPU_IMAGES_PER_SECOND: dict[str, float | None] = {"burgess": None}
DEFAULT_SEEDS = 1


def preset_cost(name: str, scale: str, seeds: int = DEFAULT_SEEDS) -> dict:
    spec = PRESETS[name]
    settings = {**spec.get("fixed", {}), **spec["scales"][scale]}
    trials = seeds
    for values in spec.get("axes", {}).values():
        trials *= len(values)
    images = trials * settings["steps"] * settings["batch_size"]
    architecture = settings.get("architecture", "burgess")
    cpu = CPU_IMAGES_PER_SECOND.get(architecture)
    gpu = GPU_IMAGES_PER_SECOND.get(architecture)
    return {"preset": name, "scale": scale, "trials": trials, "steps": settings["steps"],
            "cpu_core_hours": images / cpu / 3600 if cpu else None,
            "gpu_hours": images / gpu / 3600 if gpu else None}


def presets_table(seeds: int = DEFAULT_SEEDS) -> str:
    def hours(value):
        return "not measured" if value is None else f"{value:,.2f}" if value < 10 else f"{value:,.0f}"

    lines = [f"{'preset':<12} {'scale':<6} {'trials':>6} {'steps/trial':>11} {'CPU-core-h':>12} "
             f"{'GPU-h':>12}   (training only, {seeds} seed; --seeds N multiplies)"]
    for name in sorted(PRESETS):
        for scale in PRESETS[name]["scales"]:
            cost = preset_cost(name, scale, seeds)
            lines.append(f"{name:<12} {scale:<6} {cost['trials']:>6} {cost['steps']:>11,} "
                         f"{hours(cost['cpu_core_hours']):>12} {hours(cost['gpu_hours']):>12}")
        lines.append(f"  {name}: {PRESETS[name]['description']}")
    lines.append("CPU figures: measured burgess throughput on a 2-core x86_64 machine "
                 "(benchmarks/README.md). GPU figures: not measured yet.")
    return "\n".join(lines)
