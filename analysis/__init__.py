"""Analysis: metrics, evaluation of trained models, aggregation, figures, reports. No Ray.

Names are imported on first use, so that importing ``analysis.metrics`` (in a joblib worker, say)
does not import torch.
"""

import importlib

_EXPORTS = {
    "correlations": "analysis.aggregate",
    "load_history": "analysis.aggregate",
    "load_trials": "analysis.aggregate",
    "spearman": "analysis.aggregate",
    "evaluate": "analysis.evaluate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
