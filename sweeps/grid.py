"""Sweep specifications: a preset (``sweeps.presets``) or a user's YAML or Python grid file (``--grid``),
whose ``fixed`` settings, ``axes`` × seeds and ``scales`` make validated trial configs, checked before Ray
starts with errors naming the bad key or value."""

from __future__ import annotations

import importlib.util
import itertools
import os
from collections import Counter

from sweeps.errors import UsageError
from sweeps.presets import PRESETS, SCALES
from sweeps.trials import TrialConfig

SPEC_KEYS = ("description", "fixed", "axes", "scales", "search", "datasets")
DISTRIBUTIONS = ("uniform", "loguniform", "randint", "choice")
MAX_SEEDS = 10_000


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
    if unknown := set(spec) - set(SPEC_KEYS):
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
    """The spec with ``key`` set to ``value`` for every trial, over its fixed settings, axes and scales."""
    scales = {scale: {k: v for k, v in settings.items() if k != key}
              for scale, settings in spec.get("scales", {}).items()}
    for settings in scales.values():
        if isinstance(settings.get("axes"), dict):
            settings["axes"] = {k: v for k, v in settings["axes"].items() if k != key}
    return {**spec, "fixed": {**spec.get("fixed", {}), key: value}, "scales": scales,
            "axes": {k: v for k, v in spec.get("axes", {}).items() if k != key}}


def with_dataset(spec: dict, name: str, dataset: str | None) -> dict:
    """The spec on one of its ``datasets`` (``--dataset``): that entry's settings pinned over the spec's."""
    offered = spec.get("datasets") or {}
    if dataset is None:
        return spec
    if dataset not in offered:
        own = spec.get("fixed", {}).get("dataset")
        raise UsageError(f"--dataset {dataset}: {name} offers "
                         + (f"{', '.join(offered)} (its default: {own})" if offered else
                            f"no other dataset than its own ({own})"))
    variant = offered[dataset]
    for key, value in variant.get("fixed", {}).items():
        spec = pin_setting(spec, key, value)
    scales = {scale: {**settings, **variant.get("scales", {}).get(scale, {})}
              for scale, settings in spec.get("scales", {}).items()}
    return {**spec, "scales": scales}


def unpin_axis(spec: dict, key: str) -> dict:
    """The spec without ``key`` as an axis (at any scale): a searched setting is sampled instead."""
    scales = {scale: {**settings, "axes": {k: v for k, v in settings.get("axes", {}).items() if k != key}}
              for scale, settings in spec.get("scales", {}).items()}
    return {**spec, "scales": scales, "axes": {k: v for k, v in spec.get("axes", {}).items() if k != key}}


def grid_axes(spec: dict, name: str, scale: str, seeds: list[int]) -> tuple[dict, dict]:
    """(fixed settings, axes) at ``scale``: its settings override the fixed ones, its ``axes`` whole axes."""
    scales = spec.get("scales", {})
    if scales and scale not in scales:
        raise UsageError(f"unknown scale {scale!r} for preset {name!r}; choose one of: {', '.join(scales)}")
    settings = dict(scales.get(scale, {}))
    scale_axes = settings.pop("axes", {})
    settings.pop("seeds", None)
    for where, part in (("fixed", spec.get("fixed", {})), ("axes", spec.get("axes", {})),
                        (f"scales.{scale}", settings), (f"scales.{scale}.axes", scale_axes)):
        if "seed" in part:
            raise UsageError(f"{name}: {where} sets 'seed', which --seeds decides; remove it and pass "
                             "--seeds (a count, or a list such as 0,5,7), or set the scale's 'seeds' count")
    fixed = {"preset": name, "scale": scale, **spec.get("fixed", {}), **settings}
    axes = {**spec.get("axes", {}), **scale_axes, "seed": list(seeds)}
    return fixed, axes


def trial_configs(spec: dict, name: str, scale: str, seeds: list[int]) -> list[TrialConfig]:
    """Every trial of the spec at ``scale`` (axes × seeds), complete and validated, none twice."""
    check_spec(spec, name)
    fixed, axes = grid_axes(spec, name, scale, seeds)
    points = [{**fixed, **dict(zip(axes, values))} for values in itertools.product(*axes.values())]
    if not points:
        raise UsageError(f"{name}: the grid has zero trials")
    trials = [TrialConfig.complete(point, name) for point in points]
    if repeated := [key for key, count in Counter(t.trial_key for t in trials).items() if count > 1]:
        twin = next(t for t in trials if t.trial_key == repeated[0])
        raise UsageError(f"{name}: {len(trials) - len(set(t.trial_key for t in trials))} trial(s) repeat "
                         f"another (e.g. {twin.dirname}); give each seed and axis value once")
    return trials


def search_space(spec: dict, name: str) -> dict:
    """The ``search`` block's space (setting → {uniform|loguniform|randint|choice: [...]}), checked."""
    search = spec.get("search")
    if not isinstance(search, dict) or not isinstance(search.get("space"), dict) or not search["space"]:
        raise UsageError(f"{name}: --search optuna needs a 'search' block with metric, mode and a "
                         "non-empty space (see README, 'Your own grid')")
    if search.get("mode") not in ("min", "max"):
        raise UsageError(f"{name}: search.mode must be min or max; got {search.get('mode')!r}")
    from analysis.schema import METRIC_FIELDS
    results = sorted({f.name for f in METRIC_FIELDS} | {"loss"})
    if search.get("metric") not in results:
        raise UsageError(f"{name}: search.metric must name a result column, e.g. test_nll or d_score; got "
                         f"{search.get('metric')!r} (choose from {', '.join(results)})")
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


def check_search_bounds(spec: dict, name: str, trial: TrialConfig) -> None:
    """Validate a trial at each end of every search range."""
    for setting, domain in search_space(spec, name).items():
        for value in next(iter(domain.values())):
            trial.replace(f"{name} (search.space.{setting}={value!r})", **{setting: value})


def default_seeds(spec: dict, scale: str) -> int:
    """The number of seeds a scale runs when --seeds is not given (the paper's count at full)."""
    return int(spec.get("scales", {}).get(scale, {}).get("seeds", 1))


def parse_seeds(text: str) -> list[int]:
    """``"3"`` → [0, 1, 2]; ``"0,5,7"`` → [0, 5, 7]."""
    try:
        if "," in text:
            seeds = [int(s) for s in text.split(",") if s.strip()]
        else:
            count = int(text)
            if count > MAX_SEEDS:
                raise UsageError(f"--seeds {text}: at most {MAX_SEEDS:,} seeds per configuration")
            seeds = list(range(count))
    except (ValueError, OverflowError):
        raise UsageError(f"--seeds {text!r}: give a count (3) or a comma list (0,5,7)") from None
    if not seeds or any(s < 0 for s in seeds):
        raise UsageError(f"--seeds {text!r}: need at least one seed, none negative")
    if len(seeds) != len(set(seeds)):
        raise UsageError(f"--seeds {text!r}: a seed is listed twice; give each seed once")
    return seeds
