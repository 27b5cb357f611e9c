"""Analysis: metrics, evaluation of trained models, aggregation, figures, reports. No Ray.

Names are imported on first use, so that importing ``analysis.metrics`` (in a joblib worker, say)
does not import torch.
"""

import importlib

_MODULES = {
    "analysis.aggregate": ("add_derived_columns", "best_seeds", "configurations", "seed_summary",
                           "correlation_table", "correlations", "finished_models", "spearman"),
    "analysis.loading": ("load_errors", "load_history", "load_trials"),
    "analysis.evaluation": ("evaluate",),
    "analysis.trained_models": ("load_checkpoint", "model_figures"),
    "analysis.html_report": ("write_html_report",),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
