"""Splits that fit any factor space: for a generic labelled dataset, or any dataset by its factors.

Two families, named so that ``get_split`` can build them on demand:

- ``<factor>_gt<hundredths>`` (extrapolation), e.g. ``hue_gt050``: the classes of ``factor`` whose
  value, normalised to [0, 1] over the factor's class values, lies strictly above the cut-off
  never train. M21's cut-offs 0.16, 0.25, 0.5 and 0.75 are ``_gt016``, ``_gt025``, ``_gt050`` and
  ``_gt075``. A class exactly on the cut-off trains, as on dSprites' ``blank_side`` (posX > 0.5).
  On evenly spaced values (equal-width bins, linspace grids) this is the registry's position rule.
- ``random_combinations[_<percent>][_seed<k>]`` (recombination to element): each combination of
  all factors' classes is held out with probability percent/100 (default 10), decided by a seeded
  hash of the combination (:class:`~data_pipeline.splits.rules.RandomCombinations`), so every image
  of a held-out combination is test-only and the combination never appears in training.
"""

from __future__ import annotations

import re

import numpy as np

from data_pipeline.factors import FactorSpace
from data_pipeline.splits.rules import RandomCombinations, Split

EXTRAPOLATION_CUTOFFS = (0.16, 0.25, 0.5, 0.75)  # M21's cut-offs
DEFAULT_HELD_OUT_PERCENT = 10
_EXTRAPOLATION = re.compile(r"^(?P<factor>.+)_gt(?P<hundredths>\d{2,3})$")
_RANDOM = re.compile(r"^random_combinations(?:_(?P<percent>\d{1,2}))?(?:_seed(?P<seed>\d+))?$")
NAME_FORMS = "<factor>_gt<hundredths> (e.g. <factor>_gt050), random_combinations[_<percent>][_seed<k>]"


def extrapolation_split(dataset: str, space: FactorSpace, factor: str, cutoff: float) -> Split:
    """Values of ``factor`` above ``cutoff`` (normalised to [0, 1] over its classes) never train."""
    col = space.position(factor)
    values = np.asarray(space.values[col], dtype=np.float64)
    if len(values) < 2:
        raise ValueError(f"extrapolation on {factor!r}: the factor has one class; nothing to hold out")
    if not 0 < cutoff < 1:
        raise ValueError(f"extrapolation cut-off must be strictly between 0 and 1; got {cutoff}")
    low, high = values.min(), values.max()
    position = np.round((values - low) / (high - low), 9)  # rounding: float noise never decides
    held_out = tuple(int(c) for c in np.flatnonzero(position > cutoff))
    name = f"{factor}_gt{round(cutoff * 100):03d}"
    return Split(name, dataset, "extrapolation", {factor: held_out},
                 f"{factor} above {cutoff:g} of its range never seen in training", source="generic")


def random_combinations_split(dataset: str, space: FactorSpace, percent: int = DEFAULT_HELD_OUT_PERCENT,
                              seed: int = 0) -> Split:
    """A seeded ``percent`` % of the factor-class combinations held out (each independently)."""
    if not 0 < percent < 100:
        raise ValueError(f"random_combinations: percent must be in 1..99; got {percent}")
    name = "random_combinations" + (f"_{percent}" if percent != DEFAULT_HELD_OUT_PERCENT else "") + \
        (f"_seed{seed}" if seed else "")
    return Split(name, dataset, "recombination_to_element", RandomCombinations(percent / 100, seed),
                 f"about {percent} % of the combinations of {', '.join(space.names)} held out "
                 f"(seeded hash, seed {seed})", source="generic")


def generic_split(dataset: str, space: FactorSpace, name: str) -> Split:
    """The generic split called ``name`` on ``space`` (forms in the module docstring)."""
    found = _RANDOM.match(name)
    if found:
        return random_combinations_split(dataset, space, int(found["percent"] or DEFAULT_HELD_OUT_PERCENT),
                                         int(found["seed"] or 0))
    found = _EXTRAPOLATION.match(name)
    if found and found["factor"] in space.names:
        return extrapolation_split(dataset, space, found["factor"], int(found["hundredths"]) / 100)
    raise KeyError(f"no generic split {name!r} for {dataset!r}; generic names are {NAME_FORMS} "
                   f"with factors {', '.join(space.names)}")


def generic_splits(dataset: str, space: FactorSpace, factors: tuple[str, ...] | None = None) -> list[Split]:
    """``random_combinations`` and M21's four extrapolation cut-offs on each factor (or ``factors``)
    with more than one class."""
    splits = [random_combinations_split(dataset, space)]
    for factor in factors or space.names:
        if space.sizes[space.position(factor)] > 1:
            splits += [extrapolation_split(dataset, space, factor, c) for c in EXTRAPOLATION_CUTOFFS]
    return splits
