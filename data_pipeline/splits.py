"""Held-out splits: which factor combinations are test-only.

A split is data, not code: a named rule over factor *classes* that marks images test-only, and the
condition type it probes (Montero et al. 2021, 2022). Training sees every other image. Rules are
written on classes rather than raw values because the authors' thresholds sit on grid points,
where float comparisons decide by accident (SPEC §2).

A rule is a conjunction: an image is held out when, for every factor the rule names, the image's
class is one of the listed classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from data_pipeline.factors import FactorSpace

CONDITIONS = (
    "interpolation",
    "recombination_to_element",
    "recombination_to_range",
    "extrapolation",
)


@dataclass(frozen=True)
class Split:
    """A named held-out rule on one dataset."""

    name: str
    dataset: str
    condition: str
    test_when: dict[str, tuple[int, ...]]
    description: str = ""
    aliases: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.condition not in CONDITIONS:
            raise ValueError(f"split {self.name!r}: condition must be one of {CONDITIONS}")

    def test_mask(self, classes: np.ndarray, space: FactorSpace) -> np.ndarray:
        """Boolean mask over rows of ``classes``: True where the image is held out (test-only)."""
        classes = space.check_classes(classes)
        mask = np.ones(len(classes), dtype=bool)
        for factor, allowed in self.test_when.items():
            mask &= np.isin(classes[:, space.position(factor)], np.asarray(allowed))
        return mask

    def train_test_indices(self, classes: np.ndarray, space: FactorSpace):
        """Row indices of the training and the test images; an error if either side is empty."""
        mask = self.test_mask(classes, space)
        train, test = np.flatnonzero(~mask), np.flatnonzero(mask)
        if len(train) == 0 or len(test) == 0:
            side = "training" if len(train) == 0 else "test"
            raise ValueError(
                f"split {self.name!r} on {self.dataset} leaves the {side} set empty "
                f"({len(train)} train / {len(test)} test of {len(classes)} images); "
                "use more images or another split"
            )
        return train, test


def _classes(first: int, last: int) -> tuple[int, ...]:
    """Classes first..last inclusive."""
    return tuple(range(first, last + 1))


# dSprites classes: shape 0 square / 1 ellipse / 2 heart; scale 0..5 = 0.5..1.0;
# orientation 0..39 = linspace(0, 2π, 40); posX, posY 0..31 = linspace(0, 1, 32).
_SPLITS = [
    Split(
        name="blank_side",
        dataset="dsprites",
        condition="extrapolation",
        test_when={"posX": _classes(16, 31)},
        description="posX > 0.5 never seen in training (M21)",
    ),
    Split(
        name="shape2tx",
        dataset="dsprites",
        condition="recombination_to_range",
        test_when={"shape": (0,), "posX": _classes(16, 31)},
        description="squares on the right half (posX > 0.5) held out (M21)",
    ),
    Split(
        name="leave1out",
        dataset="dsprites",
        condition="recombination_to_element",
        test_when={
            "shape": (1,),
            "scale": _classes(2, 5),
            "orientation": _classes(14, 25),
            "posX": _classes(21, 31),
            "posY": _classes(21, 31),
        },
        description=(
            "ellipse & scale > 0.6 & 2π/3 < orientation < 4π/3 & posX > 0.66 & posY > 0.66 "
            "(M21 code)"
        ),
    ),
]

SPLITS: dict[tuple[str, str], Split] = {(s.dataset, s.name): s for s in _SPLITS}


def get_split(dataset: str, name: str) -> Split:
    """The registered split ``name`` of ``dataset``; the error lists the known ones."""
    for split in _SPLITS:
        if split.dataset == dataset and (split.name == name or name in split.aliases):
            return split
    known = sorted(s.name for s in _SPLITS if s.dataset == dataset)
    raise KeyError(f"no split {name!r} for dataset {dataset!r}; known: {', '.join(known) or 'none'}")
