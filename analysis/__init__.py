"""Analysis: metrics, evaluation of trained models, aggregation, figures, reports. No Ray."""

from analysis.aggregate import correlations, load_history, load_trials, spearman
from analysis.evaluate import evaluate

__all__ = ["correlations", "evaluate", "load_history", "load_trials", "spearman"]
