"""Sweeps: a study's grid → Ray Tune trials → results. ``sweeps.run`` runs one from Python, as ``python -m
sweeps.paper_grid`` does from a shell. Names are imported on first use, so that ``import sweeps`` stays
light (and imports no Ray)."""

import importlib

_EXPORTS = {
    "run": "sweeps.paper_grid",
    "SweepInterrupted": "sweeps.paper_grid",
    "UsageError": "sweeps.errors",
    "TrialConfig": "sweeps.trials",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'sweeps' has no attribute {name!r}")
