"""Held-out splits: which factor combinations are test-only.

``rules`` defines what a split is; ``registry`` lists every split of the three studies;
``generic`` builds splits that fit any factor space (a user's labelled dataset);
``python -m data_pipeline.splits`` prints them with their train and test counts.
"""

from data_pipeline.splits.generic import (
    EXTRAPOLATION_CUTOFFS,
    extrapolation_split,
    generic_split,
    generic_splits,
    random_combinations_split,
)
from data_pipeline.splits.registry import (
    D21_ENCODER_HELD_OUT_HUES,
    D21_ENCODER_HUES,
    MODIFIERS,
    SPLITS,
    get_modifier,
    get_split,
    modifiers_of,
    splits_of,
)
from data_pipeline.splits.rules import (
    CONDITION_ALIASES,
    CONDITIONS,
    Modifier,
    RandomCombinations,
    Range,
    Split,
    rule_mask,
)

__all__ = [
    "CONDITIONS",
    "CONDITION_ALIASES",
    "D21_ENCODER_HELD_OUT_HUES",
    "D21_ENCODER_HUES",
    "EXTRAPOLATION_CUTOFFS",
    "MODIFIERS",
    "SPLITS",
    "Modifier",
    "RandomCombinations",
    "Range",
    "Split",
    "extrapolation_split",
    "generic_split",
    "generic_splits",
    "get_modifier",
    "get_split",
    "modifiers_of",
    "random_combinations_split",
    "rule_mask",
    "splits_of",
]
