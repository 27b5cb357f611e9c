"""Held-out rules: which factor combinations are test-only, written as data.

A :class:`Split` marks images test-only; training sees every other image (Montero et al. 2021,
2022). Its rule is written on factor *classes*, not raw values, because the authors' thresholds
sit on grid points where float comparisons decide by accident.

A rule is one *clause* or a tuple of clauses (an image matches when any clause matches). A clause
is a dict ``{factor: allowed}``; an image matches it when, for every factor named, its class is
allowed. ``allowed`` is either a tuple of class numbers or a :class:`Range` over the factor's
normalised grid position ``class / (size - 1)``, resolved to classes in exact rational arithmetic
(used by the Circles-family splits, whose grid sizes come from the user's file). A rule may
instead be a :class:`RandomCombinations`: a seeded share of the factor-class combinations.

A :class:`Modifier` keeps only some images and ANDs onto both sides of a split: an image outside
it is in neither the training nor the test set (M22's ``sparse_posX``, ``four_shapes``…).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Union

import numpy as np

from data_pipeline.factors import FactorSpace

CONDITIONS = (
    "interpolation",
    "recombination_to_element",
    "recombination_to_range",
    "extrapolation",
)

# The M22 code's condition names.
CONDITION_ALIASES = {
    "interp": "interpolation",
    "recomb2element": "recombination_to_element",
    "recomb2range": "recombination_to_range",
    "extrp": "extrapolation",
    "extrap": "extrapolation",
}


@dataclass(frozen=True)
class Range:
    """An interval of a factor's normalised grid position ``class / (size - 1)`` in [0, 1].

    Bounds are exact fractions (``Range(low="1/2", include_low=False)`` is "above one half"), so
    a bound that sits on a grid point is decided by ``include_low``/``include_high``, never by
    float rounding. With ``unit="class"`` the bounds are class numbers instead.
    """

    low: Fraction | str | int | None = None
    high: Fraction | str | int | None = None
    include_low: bool = True
    include_high: bool = True
    unit: str = "position"

    def __post_init__(self) -> None:
        if self.unit not in ("position", "class"):
            raise ValueError(f"Range: unit must be 'position' (class / (size - 1)) or 'class'; "
                             f"got {self.unit!r}")

    def classes(self, size: int) -> tuple[int, ...]:
        """The classes of a factor with ``size`` classes whose position lies in the interval."""
        low = None if self.low is None else Fraction(self.low)
        high = None if self.high is None else Fraction(self.high)
        chosen = []
        for c in range(size):
            position = Fraction(c, max(size - 1, 1)) if self.unit == "position" else Fraction(c)
            if low is not None and (position < low or (position == low and not self.include_low)):
                continue
            if high is not None and (position > high or (position == high and not self.include_high)):
                continue
            chosen.append(c)
        return tuple(chosen)


@dataclass(frozen=True)
class RandomCombinations:
    """A rule holding out a seeded pseudo-random share of factor-class combinations.

    Each combination of the classes of ``factors`` (all factors when empty) is held out with
    probability ``fraction``, decided by a hash of the combination and ``seed`` (splitmix64), so the
    decision depends only on the combination: every image of a held-out combination is test-only,
    on any subset of rows and any dataset with these factors. Fits any factor space, including a
    generic labelled dataset's, where the grid need not be full.
    """

    fraction: float
    seed: int = 0
    factors: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not 0 < self.fraction < 1:
            raise ValueError(f"RandomCombinations: fraction must be strictly between 0 and 1; "
                             f"got {self.fraction}")
        if self.seed < 0:
            raise ValueError(f"RandomCombinations: seed must be a non-negative integer; got {self.seed}")

    def mask(self, classes: np.ndarray, space: FactorSpace) -> np.ndarray:
        """True for rows whose combination is held out."""
        columns = [space.position(f) for f in self.factors] or range(space.n_factors)
        with np.errstate(over="ignore"):
            state = _splitmix64(np.full(len(classes), self.seed, dtype=np.uint64))
            for col in columns:
                state = _splitmix64(state ^ classes[:, col].astype(np.uint64))
        uniform = (state >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
        return uniform < self.fraction


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 mixing function on a uint64 array (wrapping arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


Allowed = Union[tuple, Range]  # noqa: UP007 (a runtime alias on Python 3.10)
Clause = dict  # factor name -> Allowed
# one clause, a tuple of clauses (any may match), or a RandomCombinations rule
Rule = Union[Clause, tuple, RandomCombinations]  # noqa: UP007


def _clauses(rule: Rule) -> tuple[Clause, ...]:
    if isinstance(rule, dict):
        return (rule,)
    return tuple(rule)


def rule_mask(rule: Rule, classes: np.ndarray, space: FactorSpace) -> np.ndarray:
    """True for rows of ``classes`` that match ``rule`` (any clause; all terms of a clause)."""
    if isinstance(rule, RandomCombinations):
        return rule.mask(classes, space)
    mask = np.zeros(len(classes), dtype=bool)
    for clause in _clauses(rule):
        part = np.ones(len(classes), dtype=bool)
        for factor, allowed in clause.items():
            col = space.position(factor)
            if isinstance(allowed, Range):
                allowed = allowed.classes(space.sizes[col])
            part &= np.isin(classes[:, col], np.asarray(allowed, dtype=np.int64))
        mask |= part
    return mask


def _check_rule(owner: str, rule: Rule) -> None:
    if isinstance(rule, RandomCombinations):
        return
    clauses = _clauses(rule)
    if not clauses:
        raise ValueError(f"{owner}: a rule needs at least one clause")
    for clause in clauses:
        if not isinstance(clause, dict) or not clause:
            raise ValueError(f"{owner}: each clause must be a non-empty dict {{factor: classes}}")
        for factor, allowed in clause.items():
            if not isinstance(allowed, (tuple, Range)):
                raise ValueError(
                    f"{owner}: factor {factor!r} must map to a tuple of classes or a Range; "
                    f"got {type(allowed).__name__}"
                )


@dataclass(frozen=True)
class Modifier:
    """A filter that keeps only some images, on both sides of a split.

    ``keep_when`` is a rule (see the module docstring). ``apart`` adds terms of the form
    ``(factor_a, factor_b, gap)``: keep an image only when the normalised positions of the two
    factors differ by more than ``gap`` (M22's ``noverlap`` for TwoShapes).
    """

    name: str
    dataset: str
    keep_when: Rule = field(default_factory=dict)
    apart: tuple[tuple[str, str, Fraction | str], ...] = ()
    description: str = ""
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.keep_when:
            _check_rule(f"modifier {self.name!r}", self.keep_when)
        elif not self.apart:
            raise ValueError(f"modifier {self.name!r}: needs keep_when or apart")

    def keep_mask(self, classes: np.ndarray, space: FactorSpace) -> np.ndarray:
        """True for rows of ``classes`` the modifier keeps."""
        classes = space.check_classes(classes)
        mask = rule_mask(self.keep_when, classes, space) if self.keep_when else np.ones(len(classes), bool)
        for a, b, gap in self.apart:
            ia, ib = space.position(a), space.position(b)
            na, nb = max(space.sizes[ia] - 1, 1), max(space.sizes[ib] - 1, 1)
            gap = Fraction(gap)
            # |ca/na - cb/nb| > gap, in integers: |ca*nb - cb*na| > gap * na * nb
            diff = np.abs(classes[:, ia] * nb - classes[:, ib] * na)
            mask &= diff * gap.denominator > gap.numerator * na * nb
        return mask


@dataclass(frozen=True)
class Split:
    """A named held-out rule on one dataset.

    ``test_when`` is the rule marking images test-only (a dict of factor -> classes, or a tuple of
    such dicts). ``modifiers`` are :class:`Modifier` objects ANDed onto both sides.
    """

    name: str
    dataset: str
    condition: str
    test_when: Rule
    description: str = ""
    aliases: tuple[str, ...] = field(default=())
    modifiers: tuple[Modifier, ...] = field(default=())
    source: str = ""

    def __post_init__(self) -> None:
        condition = CONDITION_ALIASES.get(self.condition, self.condition)
        if condition not in CONDITIONS:
            raise ValueError(f"split {self.name!r}: condition must be one of {CONDITIONS}; "
                             f"got {self.condition!r}")
        object.__setattr__(self, "condition", condition)
        _check_rule(f"split {self.name!r}", self.test_when)

    def with_modifiers(self, *modifiers: Modifier) -> Split:
        """This split with ``modifiers`` ANDed onto both sides; its name gains ``+modifier``."""
        name = "+".join([self.name, *(m.name for m in modifiers)])
        return replace(self, name=name, aliases=(), modifiers=self.modifiers + tuple(modifiers))

    def factor_names(self, space: FactorSpace) -> tuple[str, ...]:
        """The factors the held-out rule names, in order: the keys of its clauses (their union,
        for several), or a random-combinations rule's factors (every factor of ``space`` when it
        names none). Modifiers only filter and add none."""
        rule = self.test_when
        if isinstance(rule, RandomCombinations):
            return tuple(rule.factors) or tuple(space.names)
        return tuple(dict.fromkeys(name for clause in _clauses(rule) for name in clause))

    def held_out_mask(self, classes: np.ndarray, space: FactorSpace) -> np.ndarray:
        """True where the rule holds the image out, ignoring modifiers."""
        classes = space.check_classes(classes)
        return rule_mask(self.test_when, classes, space)

    def keep_mask(self, classes: np.ndarray, space: FactorSpace) -> np.ndarray:
        """True where every modifier keeps the image (all True without modifiers)."""
        classes = space.check_classes(classes)
        mask = np.ones(len(classes), dtype=bool)
        for modifier in self.modifiers:
            mask &= modifier.keep_mask(classes, space)
        return mask

    def test_mask(self, classes: np.ndarray, space: FactorSpace) -> np.ndarray:
        """Boolean mask over rows of ``classes``: True where the image is in the test set."""
        return self.held_out_mask(classes, space) & self.keep_mask(classes, space)

    def test_grid_indices(self, space: FactorSpace) -> np.ndarray:
        """The flat grid indices (``space.index_of``'s, ascending) of every combination of the
        whole factor grid of ``space`` that the test set takes (modifiers included): the held-out
        images a generator can render. About 0.1 s for dSprites' 737,280 combinations and 0.2 s
        for MPI3D's 1,036,800."""
        return np.flatnonzero(self.test_mask(space.all_classes(), space)).astype(np.int64)

    def train_mask(self, classes: np.ndarray, space: FactorSpace) -> np.ndarray:
        """Boolean mask over rows of ``classes``: True where the image is in the training set."""
        return ~self.held_out_mask(classes, space) & self.keep_mask(classes, space)

    def train_test_indices(self, classes: np.ndarray, space: FactorSpace):
        """Row indices of the training and the test images; an error if either side is empty."""
        held_out, keep = self.held_out_mask(classes, space), self.keep_mask(classes, space)
        train, test = np.flatnonzero(~held_out & keep), np.flatnonzero(held_out & keep)
        if len(train) == 0 or len(test) == 0:
            side = "training" if len(train) == 0 else "test"
            raise ValueError(
                f"split {self.name!r} on {self.dataset} leaves the {side} set empty "
                f"({len(train)} train / {len(test)} test of {len(classes)} images); "
                "use more images or another split"
            )
        return train, test
