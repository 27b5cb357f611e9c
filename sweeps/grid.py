"""From a preset to trial configs: the cartesian product of the axes, each with a stable key."""

from __future__ import annotations

import hashlib
import itertools
import json

from data_pipeline.splits import get_split
from sweeps.presets import PRESETS, check_preset

# Settings that change how a trial is logged, not what it computes; left out of the trial key.
NOT_IN_KEY = ("report_every", "preset", "scale")


def trial_key(config: dict) -> str:
    """A short, stable identifier: a hash of everything that decides the trial's results."""
    content = {k: v for k, v in sorted(config.items()) if k not in NOT_IN_KEY and k != "trial_key"}
    digest = hashlib.sha1(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:10]


def trial_dirname(config: dict) -> str:
    """A short, readable folder name for a trial, unique by its key."""
    beta = f"{config['beta']:g}"
    return f"{config['split']}-b{beta}-s{config['seed']}-{config['trial_key'][:6]}"


def grid_axes(preset: str, scale: str, seeds: list[int]) -> tuple[dict, dict]:
    """(fixed settings, axes): what every trial shares, and the values each axis takes."""
    check_preset(preset, scale)
    spec = PRESETS[preset]
    fixed = {"preset": preset, "scale": scale, **spec["fixed"], **spec["scales"][scale]}
    axes = {**spec["axes"], "seed": list(seeds)}
    return fixed, axes


def complete_config(config: dict) -> dict:
    """A trial's config with what follows from it: the split's condition type and the trial key."""
    config = {k: v for k, v in config.items() if k not in ("condition", "trial_key")}
    config["condition"] = get_split(config["dataset"], config["split"]).condition
    config["trial_key"] = trial_key(config)
    return config


def trial_configs(preset: str, scale: str, seeds: list[int]) -> list[dict]:
    """Every trial of ``preset`` at ``scale``, one per point of the axes × seeds."""
    fixed, axes = grid_axes(preset, scale, seeds)
    return [complete_config({**fixed, **dict(zip(axes, values))})
            for values in itertools.product(*axes.values())]


def parse_seeds(text: str) -> list[int]:
    """``"3"`` → [0, 1, 2]; ``"0,5,7"`` → [0, 5, 7]."""
    try:
        if "," in text:
            seeds = [int(s) for s in text.split(",") if s.strip()]
        else:
            seeds = list(range(int(text)))
    except ValueError:
        raise ValueError(f"--seeds {text!r}: give a count (3) or a comma list (0,5,7)") from None
    if not seeds or any(s < 0 for s in seeds):
        raise ValueError(f"--seeds {text!r}: need at least one seed, none negative")
    return seeds
