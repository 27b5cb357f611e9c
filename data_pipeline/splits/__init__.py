"""Held-out splits: which factor combinations are test-only (SPEC §2).

``rules`` defines what a split is; ``registry`` lists every split of the three studies;
``python -m data_pipeline.splits`` prints them with their train and test counts.
"""

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
from data_pipeline.splits.rules import CONDITION_ALIASES, CONDITIONS, Modifier, Range, Split, rule_mask

__all__ = [
    "CONDITIONS",
    "CONDITION_ALIASES",
    "D21_ENCODER_HELD_OUT_HUES",
    "D21_ENCODER_HUES",
    "MODIFIERS",
    "SPLITS",
    "Modifier",
    "Range",
    "Split",
    "get_modifier",
    "get_split",
    "modifiers_of",
    "rule_mask",
    "splits_of",
]
