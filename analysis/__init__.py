"""Analysis: metrics, evaluation of trained models, aggregation, figures, reports. No Ray.

Names are imported on first use, so that importing ``analysis.metrics`` (in a joblib worker, say)
does not import torch.
"""

import importlib

_EXPORTS = {
    "add_derived_columns": "analysis.aggregate",
    "best_seeds": "analysis.aggregate",
    "configurations": "analysis.aggregate",
    "seed_summary": "analysis.aggregate",
    "correlation_table": "analysis.aggregate",
    "correlations": "analysis.aggregate",
    "finished_models": "analysis.aggregate",
    "load_errors": "analysis.loading",
    "load_history": "analysis.loading",
    "load_trials": "analysis.loading",
    "spearman": "analysis.aggregate",
    "evaluate": "analysis.evaluation",
    "load_checkpoint": "analysis.trained_models",
    "model_figures": "analysis.trained_models",
    "write_html_report": "analysis.html_report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
