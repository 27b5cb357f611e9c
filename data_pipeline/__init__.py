"""Data: factor spaces, procedural generators, real-file loaders and held-out splits. No Ray."""

from data_pipeline.datasets import GroundTruthDataset, factor_space, load_procedural, render
from data_pipeline.factors import FactorSpace
from data_pipeline.splits import CONDITIONS, SPLITS, Split, get_split

__all__ = [
    "CONDITIONS",
    "SPLITS",
    "FactorSpace",
    "GroundTruthDataset",
    "Split",
    "factor_space",
    "get_split",
    "load_procedural",
    "render",
]
