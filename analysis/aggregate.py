"""Aggregation: experiment directories → pandas → Spearman correlations."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from analysis.schema import HISTORY_FILE, TRIALS_FILE, read_results

DISENTANGLEMENT_METRICS = ["d_score", "dci_disentanglement"]
GENERALISATION_SCORES = ["test_nll", "train_nll"]


def load_trials(*experiment_dirs: str) -> pd.DataFrame:
    """The trials of one or more experiments as one DataFrame (an error if none has results)."""
    return _load(experiment_dirs, TRIALS_FILE)


def load_history(*experiment_dirs: str) -> pd.DataFrame:
    return _load(experiment_dirs, HISTORY_FILE)


def _load(experiment_dirs, filename: str) -> pd.DataFrame:
    frames = []
    for directory in experiment_dirs:
        if not os.path.exists(os.path.join(directory, filename)):
            raise FileNotFoundError(
                f"{directory}: no {filename}; pass an experiment directory such as "
                "./disgen_results/default (the folder that holds trials.parquet)"
            )
        frames.append(read_results(directory, filename))
    return pd.concat(frames, ignore_index=True)


def spearman(df: pd.DataFrame, x: str, y: str, *, n_bootstrap: int = 1000,
             seed: int = 0) -> dict[str, float]:
    """Spearman ρ between columns ``x`` and ``y`` over the rows where both are finite, with a
    percentile bootstrap 95% interval. ρ is NaN with fewer than 3 rows or a constant column."""
    pairs = df[[x, y]].astype(float).replace([np.inf, -np.inf], np.nan).dropna().to_numpy()
    n = len(pairs)
    result = {"x": x, "y": y, "n": n, "rho": np.nan, "low": np.nan, "high": np.nan}
    if n < 3 or np.ptp(pairs[:, 0]) == 0 or np.ptp(pairs[:, 1]) == 0:
        return result
    result["rho"] = float(spearmanr(pairs[:, 0], pairs[:, 1]).statistic)
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(n_bootstrap):
        sample = pairs[rng.integers(0, n, n)]
        if np.ptp(sample[:, 0]) > 0 and np.ptp(sample[:, 1]) > 0:
            draws.append(spearmanr(sample[:, 0], sample[:, 1]).statistic)
    if draws:
        result["low"], result["high"] = (float(v) for v in np.percentile(draws, [2.5, 97.5]))
    return result


def correlations(df: pd.DataFrame, by: list[str] | None = None, *,
                 metrics=DISENTANGLEMENT_METRICS, scores=GENERALISATION_SCORES,
                 n_bootstrap: int = 1000) -> pd.DataFrame:
    """Spearman ρ of every disentanglement metric against every generalisation score, over all
    trials and, with ``by``, within each group."""
    groups = [((), df)] if not by else list(df.groupby(by, dropna=False))
    rows = []
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        for metric in metrics:
            for score in scores:
                row = spearman(group, metric, score, n_bootstrap=n_bootstrap)
                rows.append({**dict(zip(by or [], key)), **row})
    return pd.DataFrame(rows)
