"""Aggregation: experiment directories → pandas → Spearman correlations.

``load_trials`` reads one or many experiments' ``trials.parquet`` into one DataFrame.
``correlation_table`` gives the Spearman ρ of every disentanglement metric against every
generalisation and transfer score, with percentile-bootstrap 95% intervals, over all trials and
within each group of supervision, architecture, dataset and held-out condition.

*Supervision* is a column of its own if the results have one; otherwise it is read off the
objective: ``ada_gvae`` (trained on pairs that share factors) is "weak", every other objective
"none" (unsupervised).
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from analysis.schema import HISTORY_FILE, TRIALS_FILE, read_results

DISENTANGLEMENT_METRICS = ["d_score", "dci_disentanglement", "dci_completeness", "mig", "sap",
                           "modularity", "explicitness", "beta_vae_score", "factor_vae_score"]
GENERALISATION_SCORES = ["test_nll", "train_nll", "nll_gap"]
TRANSFER_SCORES = [f"transfer_{regressor}_{scenario}" for regressor in ("gbt", "mlp")
                   for scenario in ("ood1_a", "ood1_b", "ood1_c", "ood2")]
GROUPINGS = ["supervision", "architecture", "dataset", "condition"]
WEAKLY_SUPERVISED_OBJECTIVES = ("ada_gvae",)


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
                 metrics=None, scores=None, n_bootstrap: int = 1000) -> pd.DataFrame:
    """Spearman ρ of every disentanglement metric against every generalisation score, over all
    trials and, with ``by``, within each group. By default the metrics and scores of
    :data:`DISENTANGLEMENT_METRICS` and :data:`GENERALISATION_SCORES` that ``df`` has."""
    if metrics is None or scores is None:
        derived = add_derived_columns(df)
        df = derived
        metrics = present(df, DISENTANGLEMENT_METRICS) if metrics is None else metrics
        scores = present(df, GENERALISATION_SCORES) if scores is None else scores
    groups = [((), df)] if not by else list(df.groupby(by, dropna=False))
    rows = []
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        for metric in metrics:
            for score in scores:
                row = spearman(group, metric, score, n_bootstrap=n_bootstrap)
                rows.append({**dict(zip(by or [], key)), **row})
    return pd.DataFrame(rows)


def add_derived_columns(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` with ``nll_gap`` (test − train NLL) and ``supervision`` (if missing)."""
    df = df.copy()
    if {"test_nll", "train_nll"} <= set(df.columns):
        df["nll_gap"] = df["test_nll"].astype(float) - df["train_nll"].astype(float)
    if "supervision" not in df.columns and "objective" in df.columns:
        objective = df["objective"].astype(object)
        df["supervision"] = np.where(objective.isin(WEAKLY_SUPERVISED_OBJECTIVES), "weak", "none")
        df.loc[objective.isna(), "supervision"] = None
    return df


def present(df: pd.DataFrame, columns) -> list[str]:
    """The columns of ``columns`` that ``df`` has with at least one finite value."""
    out = []
    for column in columns:
        if column in df.columns:
            values = pd.to_numeric(df[column], errors="coerce").astype(float)
            if np.isfinite(values).any():
                out.append(column)
    return out


def correlation_table(df: pd.DataFrame, *, metrics=None, scores=None, groupings=GROUPINGS,
                      n_bootstrap: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Spearman ρ with bootstrap 95% intervals of each metric against each score, long format.

    One block of rows over all trials (``group_by`` = "all"), then one per grouping column that
    the results have with at least two distinct values, one row per (group, metric, score).
    ``metrics`` defaults to the :data:`DISENTANGLEMENT_METRICS` and ``scores`` to the
    :data:`GENERALISATION_SCORES` and :data:`TRANSFER_SCORES` that have values.
    Columns: group_by, group, x, y, n, rho, low, high.
    """
    df = add_derived_columns(df)
    metrics = present(df, DISENTANGLEMENT_METRICS if metrics is None else metrics)
    scores = present(df, GENERALISATION_SCORES + TRANSFER_SCORES if scores is None else scores)
    blocks = [("all", [("all", df)])]
    for column in groupings:
        if column in df.columns and df[column].nunique(dropna=True) >= 2:
            blocks.append((column, [(str(key), group) for key, group in df.groupby(column, dropna=True)]))
    rows = []
    for group_by, groups in blocks:
        for group, frame in groups:
            for metric in metrics:
                for score in scores:
                    result = spearman(frame, metric, score, n_bootstrap=n_bootstrap, seed=seed)
                    rows.append({"group_by": group_by, "group": group, **result})
    return pd.DataFrame(rows, columns=["group_by", "group", "x", "y", "n", "rho", "low", "high"])
