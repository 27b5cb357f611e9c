"""Data: factor spaces, procedural generators, real-file loaders and downloads, and held-out splits.

No Ray here except in :mod:`data_pipeline.prepare`; no torch.
"""

from data_pipeline.datasets import GroundTruthDataset, dataset_channels, factor_space, load_procedural, render
from data_pipeline.factors import FactorSpace
from data_pipeline.labelled import load_labelled
from data_pipeline.spaces import DATASETS
from data_pipeline.splits import (
    CONDITIONS,
    MODIFIERS,
    SPLITS,
    Modifier,
    Range,
    Split,
    get_modifier,
    get_split,
)

__all__ = [
    "CONDITIONS",
    "DATASETS",
    "MODIFIERS",
    "SPLITS",
    "FactorSpace",
    "GroundTruthDataset",
    "dataset_channels",
    "Modifier",
    "Range",
    "Split",
    "factor_space",
    "get_modifier",
    "get_split",
    "load_labelled",
    "load_procedural",
    "render",
]
