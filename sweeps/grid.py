"""Sweep specifications: from a preset or a user's grid file to validated trial configs.

A spec is data: ``description``, ``fixed`` settings shared by every trial, ``axes`` (each a list
of values; the grid is their cartesian product, with the seeds as one more axis) and ``scales``
(settings that depend on how big the run is). Presets live in ``sweeps.presets``; users write the
same structure in a YAML or Python file and pass it with ``--grid FILE``. Everything is checked
before Ray starts, with errors naming the bad key or value.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import os
from dataclasses import fields

from data_pipeline.splits import get_split
from sweeps.errors import UsageError
from sweeps.presets import PRESETS, SCALES

# Settings that change how a trial is logged, not what it computes; left out of the trial key.
NOT_IN_KEY = ("report_every", "preset", "scale")
# Settings a trial config may hold besides the model's (models.ModelConfig's fields).
DATA_AND_EVALUATION_KEYS = {
    "dataset": "dataset name",
    "n_images": "grid points to render (null: the full grid)",
    "data_seed": "seed of the image subset",
    "data_source": "procedural (rendered by disgen's generators, the default) or real (the dataset's "
                   "real file from --data-dir or $DISGEN_DATA)",
    "split": "held-out split name",
    "report_every": "steps between progress reports",
    "n_nll": "images per side for the NLL",
    "n_metric": "codes for the disentanglement metrics",
    "dci_estimator": "gbt (standard), hist_gbt (faster) or none (skip disentanglement metrics)",
    "metrics": "the metrics to compute (analysis.evaluation.METRICS; default: all)",
}
SPEC_KEYS = ("description", "fixed", "axes", "scales", "search")
DISTRIBUTIONS = ("uniform", "loguniform", "randint", "choice")


def model_keys() -> set[str]:
    from models import ModelConfig

    return {f.name for f in fields(ModelConfig)}


def trial_key(config: dict) -> str:
    """A short, stable identifier: a hash of everything that decides the trial's results."""
    content = {k: v for k, v in sorted(config.items()) if k not in NOT_IN_KEY and k != "trial_key"}
    if content.get("data_source") == "procedural":  # the default: keys from before the setting stay
        del content["data_source"]
    digest = hashlib.sha1(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:10]


def trial_dirname(config: dict) -> str:
    """A short, readable folder name for a trial, unique by its key."""
    beta = f"{config['beta']:g}" if "beta" in config else "na"
    return f"{config['split']}-b{beta}-s{config['seed']}-{config['trial_key'][:6]}"


def flatten(config: dict) -> dict:
    """Resolve a raw trial config into flat settings.

    An axis value may be a mapping of settings (a *variant*, such as ``{objective: factor_vae,
    gamma: 20}`` or ``{dataset: shapes3d, split: fhue_gt50}``): its settings are merged in. A
    ``by_dataset`` mapping then applies the settings given for the trial's dataset (for example
    M21's 65 epochs on 3DShapes against 100 on dSprites).
    """
    flat: dict = {}
    variants: list[dict] = []
    for key, value in config.items():
        if isinstance(value, dict) and key != "by_dataset":
            variants.append(value)
        else:
            flat[key] = value
    for variant in variants:
        flat.update(variant)
    by_dataset = flat.pop("by_dataset", None) or {}
    flat.update(by_dataset.get(flat.get("dataset"), {}))
    return flat


def complete_config(config: dict) -> dict:
    """A trial's flat config with what follows from it: the split's condition type and the key."""
    config = {k: v for k, v in flatten(config).items() if k not in ("condition", "trial_key")}
    config.setdefault("data_source", "procedural")
    config["condition"] = get_split(config["dataset"], config["split"]).condition
    config["trial_key"] = trial_key(config)
    return config


# ----------------------------------------------------------------------------------------------
# Specs
# ----------------------------------------------------------------------------------------------


def get_spec(preset: str) -> dict:
    if preset not in PRESETS:
        raise UsageError(f"unknown preset {preset!r}; choose one of: {', '.join(sorted(PRESETS))} "
                         "(python -m sweeps.paper_grid --list)")
    return PRESETS[preset]


def load_grid_file(path: str) -> dict:
    """A user's spec from a YAML file (``.yaml``/``.yml``) or a Python file defining ``GRID``."""
    if not os.path.isfile(path):
        raise UsageError(f"--grid {path}: no such file")
    if path.endswith((".yaml", ".yml")):
        import yaml

        try:
            with open(path) as f:
                spec = yaml.safe_load(f)
        except yaml.YAMLError as error:
            raise UsageError(f"--grid {path}: not valid YAML ({str(error).splitlines()[0]})") from None
    elif path.endswith(".py"):
        module_spec = importlib.util.spec_from_file_location("disgen_user_grid", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        if not hasattr(module, "GRID"):
            raise UsageError(f"--grid {path}: a Python grid file must define a dict named GRID")
        spec = module.GRID
    else:
        raise UsageError(f"--grid {path}: use a .yaml, .yml or .py file")
    if not isinstance(spec, dict):
        raise UsageError(f"--grid {path}: the file must hold a mapping with keys {', '.join(SPEC_KEYS)}")
    return spec


def check_spec(spec: dict, source: str) -> None:
    """Structural checks: the keys of a spec, and that every axis is a non-empty list."""
    unknown = set(spec) - set(SPEC_KEYS)
    if unknown:
        raise UsageError(f"{source}: unknown key {sorted(unknown)[0]!r}; a grid has {', '.join(SPEC_KEYS)}")
    for part in ("fixed", "axes", "scales"):
        if not isinstance(spec.get(part, {}), dict):
            raise UsageError(f"{source}: {part!r} must be a mapping")
    for axis, values in spec.get("axes", {}).items():
        if not isinstance(values, list):
            raise UsageError(f"{source}: axis {axis!r} must be a list of values; got {values!r}")
        if not values:
            raise UsageError(f"{source}: axis {axis!r} is empty, so the grid has zero trials")
    for scale, settings in spec.get("scales", {}).items():
        if scale not in SCALES:
            raise UsageError(f"{source}: unknown scale {scale!r}; scales are {', '.join(SCALES)}")
        if not isinstance(settings, dict):
            raise UsageError(f"{source}: scale {scale!r} must be a mapping of settings")
        for axis, values in settings.get("axes", {}).items():
            if not isinstance(values, list) or not values:
                raise UsageError(f"{source}: scales.{scale}.axes.{axis} must be a non-empty list")


def pin_setting(spec: dict, key: str, value) -> dict:
    """The spec with ``key`` set to ``value`` for every trial, whatever its fixed settings, axes
    and scales said (a command-line option such as ``--data-source`` wins over the grid)."""
    scales = {scale: {k: v for k, v in settings.items() if k != key}
              for scale, settings in spec.get("scales", {}).items()}
    for settings in scales.values():
        if isinstance(settings.get("axes"), dict):
            settings["axes"] = {k: v for k, v in settings["axes"].items() if k != key}
    return {**spec, "fixed": {**spec.get("fixed", {}), key: value}, "scales": scales,
            "axes": {k: v for k, v in spec.get("axes", {}).items() if k != key}}


def grid_axes(spec: dict, name: str, scale: str, seeds: list[int]) -> tuple[dict, dict]:
    """(fixed settings, axes): what every trial shares, and the values each axis takes.

    A scale's settings override the fixed ones; a scale may also replace whole axes (under its
    own ``axes`` key), so that a CI-sized run keeps the grid's shape with fewer points."""
    scales = spec.get("scales", {})
    if scales and scale not in scales:
        raise UsageError(f"unknown scale {scale!r} for preset {name!r}; choose one of: {', '.join(scales)}")
    settings = dict(scales.get(scale, {}))
    scale_axes = settings.pop("axes", {})
    settings.pop("seeds", None)
    fixed = {"preset": name, "scale": scale, **spec.get("fixed", {}), **settings}
    axes = {**spec.get("axes", {}), **scale_axes, "seed": list(seeds)}
    return fixed, axes


def check_trial(config: dict, source: str) -> None:
    """One trial config: known keys, a model config that validates, a split of its dataset."""
    from models import ModelConfig

    allowed = model_keys() | set(DATA_AND_EVALUATION_KEYS) | {"preset", "scale"}
    config = flatten(config)
    unknown = sorted(set(config) - allowed)
    if unknown:
        raise UsageError(f"{source}: unknown setting {unknown[0]!r}; allowed: {', '.join(sorted(allowed))}")
    for key in ("dataset", "split"):
        if key not in config:
            raise UsageError(f"{source}: no {key!r} given; set it under 'fixed' or 'axes'")
    try:
        get_split(config["dataset"], config["split"])
    except KeyError as error:
        raise UsageError(f"{source}: {error.args[0]}") from None
    if config.get("data_source", "procedural") not in ("procedural", "real"):
        raise UsageError(f"{source}: data_source: unknown {config['data_source']!r}; "
                         "choose one of procedural, real")
    if config.get("dci_estimator", "gbt") not in ("gbt", "hist_gbt", "none"):
        raise UsageError(f"{source}: dci_estimator: unknown {config['dci_estimator']!r}; "
                         "choose one of gbt, hist_gbt, none")
    if "metrics" in config:
        from analysis.evaluation import METRICS

        unknown_metrics = [m for m in config["metrics"] or [] if m not in METRICS]
        if not isinstance(config["metrics"], list) or unknown_metrics:
            raise UsageError(f"{source}: metrics: unknown {unknown_metrics or config['metrics']!r}; "
                             f"choose from {', '.join(METRICS)}")
    try:
        ModelConfig.from_dict(config)
    except (ValueError, TypeError) as error:
        raise UsageError(f"{source}: {error}") from None


def trial_configs(spec: dict, name: str, scale: str, seeds: list[int]) -> list[dict]:
    """Every trial of the spec at ``scale``, one per point of the axes × seeds, validated."""
    check_spec(spec, name)
    fixed, axes = grid_axes(spec, name, scale, seeds)
    configs = [{**fixed, **dict(zip(axes, values))} for values in itertools.product(*axes.values())]
    if not configs:
        raise UsageError(f"{name}: the grid has zero trials")
    checked = set()
    for config in configs:
        signature = json.dumps(config, sort_keys=True, default=str)
        if signature not in checked:
            check_trial(config, name)
            checked.add(signature)
    return [complete_config(config) for config in configs]


def search_space(spec: dict, name: str) -> dict:
    """The spec's ``search`` block, checked: ``metric``, ``mode`` (min or max) and ``space``, a
    mapping of setting → {uniform|loguniform|randint: [low, high]} or {choice: [values]}.
    Every bound is validated as a trial setting, so a negative β range is refused up front."""
    search = spec.get("search")
    if not isinstance(search, dict) or not isinstance(search.get("space"), dict) or not search["space"]:
        raise UsageError(f"{name}: --search optuna needs a 'search' block with metric, mode and a "
                         "non-empty space (see README, 'Your own grid')")
    if search.get("mode") not in ("min", "max"):
        raise UsageError(f"{name}: search.mode must be min or max; got {search.get('mode')!r}")
    if not isinstance(search.get("metric"), str):
        raise UsageError(f"{name}: search.metric must name a result, e.g. test_nll or d_score")
    for setting, domain in search["space"].items():
        if not isinstance(domain, dict) or len(domain) != 1 or next(iter(domain)) not in DISTRIBUTIONS:
            raise UsageError(f"{name}: search.space.{setting} must be one of "
                             f"{', '.join(f'{{{d}: [...]}}' for d in DISTRIBUTIONS)}; got {domain!r}")
        kind, values = next(iter(domain.items()))
        is_range = isinstance(values, list) and len(values) == 2 and values[0] < values[1]
        if kind != "choice" and not is_range:
            raise UsageError(f"{name}: search.space.{setting}.{kind} must be [low, high] with low < high")
        if kind == "loguniform" and values[0] <= 0:
            raise UsageError(f"{name}: search.space.{setting}.loguniform needs low > 0")
        if kind == "choice" and (not isinstance(values, list) or not values):
            raise UsageError(f"{name}: search.space.{setting}.choice must be a non-empty list")
    return search["space"]


def check_search_bounds(spec: dict, name: str, config: dict) -> None:
    """Validate a trial at each end of every search range."""
    config = {k: v for k, v in config.items() if k not in ("condition", "trial_key")}
    for setting, domain in search_space(spec, name).items():
        for value in next(iter(domain.values())):
            check_trial({**config, setting: value}, f"{name} (search.space.{setting}={value!r})")


def default_seeds(spec: dict, scale: str) -> int:
    """The number of seeds a scale runs when --seeds is not given (the paper's count at full)."""
    return int(spec.get("scales", {}).get(scale, {}).get("seeds", 1))


def parse_seeds(text: str) -> list[int]:
    """``"3"`` → [0, 1, 2]; ``"0,5,7"`` → [0, 5, 7]."""
    try:
        if "," in text:
            seeds = [int(s) for s in text.split(",") if s.strip()]
        else:
            seeds = list(range(int(text)))
    except ValueError:
        raise UsageError(f"--seeds {text!r}: give a count (3) or a comma list (0,5,7)") from None
    if not seeds or any(s < 0 for s in seeds):
        raise UsageError(f"--seeds {text!r}: need at least one seed, none negative")
    return seeds
