"""Aggregation: the Spearman correlations of disentanglement against generalisation and transfer,
and the one seed aggregation (docs/analysis.md, "Aggregation"). Every function takes the finished
models only (:func:`finished_only`) and groups by :data:`CELL` (dataset and split) first: a
correlation never pools datasets or held-out splits (``within=()`` pools on purpose). A
*configuration* is every setting but the seed (:func:`configurations`).
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from analysis.metrics.registry import DISENTANGLEMENT_SCORES

# the disentanglement scores, as the metric registry marks them
DISENTANGLEMENT_METRICS = DISENTANGLEMENT_SCORES
GENERALISATION_SCORES = ["test_nll", "train_nll", "nll_gap"]
TRANSFER_SCORES = [f"transfer_{regressor}_{scenario}" for regressor in ("gbt", "mlp")
                   for scenario in ("ood1_a", "ood1_b", "ood1_c", "ood2")]
# the columns every correlation and summary is taken within (see the module docstring)
CELL = ("dataset", "split")
# the groupings correlation_table adds within each cell
GROUPINGS = ["supervision", "architecture", "condition"]
# columns that differ between the seeds of one configuration, or that are not settings at all
NOT_SETTINGS = ("experiment", "trial_key", "seed", "config", "preset", "scale")
WEAKLY_SUPERVISED_OBJECTIVES = ("ada_gvae",)
# M21 reports, of each configuration's seeds, the one with the highest disentanglement.
BEST_SEED_METRICS = ("d_score", "dci_disentanglement")


def finished_models(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of the models that finished (``status == "finished"``); a frame without a status
    column (built by hand), or with finished models only, is returned as it is."""
    if "status" not in df.columns:
        return df
    finished = (df["status"].astype(object) == "finished").to_numpy(dtype=bool)
    return df if finished.all() else df[finished]


def finished_only(function):
    """``function`` of a trials DataFrame (its first argument), given the finished models only."""

    @functools.wraps(function)
    def on_finished(df, *args, **kwargs):
        return function(finished_models(df), *args, **kwargs)

    return on_finished


@finished_only
def spearman(df: pd.DataFrame, x: str, y: str, *, n_bootstrap: int = 1000,
             seed: int = 0) -> dict[str, float]:
    """Spearman ρ between columns ``x`` and ``y`` over the finished models' rows where both are finite, with a
    percentile bootstrap 95% interval. ρ is NaN with fewer than 3 rows or a constant column."""
    pairs = df[[x, y]].astype(float).replace([np.inf, -np.inf], np.nan).dropna().to_numpy()
    n = len(pairs)
    result = {"x": x, "y": y, "n": n, "rho": np.nan, "low": np.nan, "high": np.nan}
    if n < 3 or np.ptp(pairs[:, 0]) == 0 or np.ptp(pairs[:, 1]) == 0:
        return result
    result["rho"] = float(spearmanr(pairs[:, 0], pairs[:, 1]).statistic)
    draws = _bootstrap_spearman(pairs, n_bootstrap, np.random.default_rng(seed))
    if len(draws):
        result["low"], result["high"] = (float(v) for v in np.percentile(draws, [2.5, 97.5]))
    return result


def _resample_ranks(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Average ranks (1-based, ties shared) of each original row within each resample, where
    ``counts`` (b, n) says how often each row was drawn: with the rows sorted by value, a row's rank
    is the number of draws of smaller values plus the mean position among its ties. O(b·n)."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])  # tie groups
    group_counts = np.add.reduceat(counts[:, order], starts, axis=1)  # (b, groups)
    below = np.cumsum(group_counts, axis=1) - group_counts
    group_rank = below + (group_counts + 1) / 2
    group_of_row = np.empty(len(values), dtype=np.int64)
    group_of_row[order] = np.cumsum(np.r_[True, sorted_values[1:] != sorted_values[:-1]]) - 1
    return group_rank[:, group_of_row]


def _bootstrap_spearman(pairs: np.ndarray, n_bootstrap: int, rng: np.random.Generator,
                        chunk: int = 250) -> np.ndarray:
    """Spearman ρ of ``n_bootstrap`` resamples (with replacement) of the rows of ``pairs`` (n, 2),
    all at once, without sorting each resample: each resample is a count per row
    (``_resample_ranks``), and ρ is the count-weighted Pearson r of the ranks, whose mean is
    always (n + 1) / 2. Resamples in which a column is constant have no ρ and are left out."""
    n, out = len(pairs), []
    for start in range(0, n_bootstrap, chunk):
        draws = rng.integers(0, n, (min(chunk, n_bootstrap - start), n))
        counts = np.zeros(draws.shape, dtype=np.float64)
        np.add.at(counts, (np.arange(len(draws))[:, None], draws), 1.0)
        dx = _resample_ranks(pairs[:, 0], counts) - (n + 1) / 2
        dy = _resample_ranks(pairs[:, 1], counts) - (n + 1) / 2
        sxx, syy = (counts * dx * dx).sum(1), (counts * dy * dy).sum(1)
        ok = (sxx > 0) & (syy > 0)
        out.append((counts * dx * dy).sum(1)[ok] / np.sqrt(sxx[ok] * syy[ok]))
    return np.concatenate(out) if out else np.zeros(0)


def cell_columns(df: pd.DataFrame, by=None, within=CELL) -> list[str]:
    """The grouping columns: those of ``within`` (default :data:`CELL`) that ``df`` has, then the
    columns named in ``by`` (a name or a list). A name in ``by`` that ``df`` lacks is an error."""
    by = [by] if isinstance(by, str) else list(by or [])
    missing = [c for c in by if c not in df.columns]
    if missing:
        raise KeyError(f"by: no column {missing} in the results; columns are {sorted(df.columns)}")
    return [c for c in within if c in df.columns and c not in by] + by


def correlations(df: pd.DataFrame, by=None, *, metrics=None, scores=None, n_bootstrap: int = 1000,
                 within=CELL) -> pd.DataFrame:
    """Spearman ρ of every disentanglement metric against every generalisation score (by default
    those of :data:`DISENTANGLEMENT_METRICS` and :data:`GENERALISATION_SCORES` with values) within
    each cell and group of ``by``: :func:`correlation_table` without its groupings."""
    table = correlation_table(df, metrics=metrics, scores=GENERALISATION_SCORES if scores is None else scores,
                              groupings=(), by=by, within=within, n_bootstrap=n_bootstrap)
    return table.drop(columns=["group_by", "group"])


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
    return [column for column in columns if column in df.columns and finite(df[column]).notna().any()]


@finished_only
def correlation_table(df: pd.DataFrame, *, metrics=None, scores=None, groupings=GROUPINGS, by=None,
                      within=CELL, n_bootstrap: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Spearman ρ with bootstrap 95% intervals of each metric against each score, long format: within
    each cell (``within`` and ``by``, :func:`cell_columns`), one block over all its trials
    (``group_by`` "all"), then one per grouping column with at least two values in the cell.
    ``metrics`` and ``scores`` default to :data:`DISENTANGLEMENT_METRICS` and the generalisation
    and transfer scores that have values. Columns: the cell columns, group_by, group, x, y, n, rho,
    low, high."""
    df = add_derived_columns(df)
    metrics = present(df, DISENTANGLEMENT_METRICS if metrics is None else metrics)
    scores = present(df, GENERALISATION_SCORES + TRANSFER_SCORES if scores is None else scores)
    columns = cell_columns(df, by, within)
    cells = [((), df)] if not columns else list(df.groupby(columns, dropna=False, sort=True, observed=True))
    rows = []
    for key, cell in cells:
        key = dict(zip(columns, key if isinstance(key, tuple) else (key,)))
        blocks = [("all", [("all", cell)])]
        for column in groupings:
            if column in cell.columns and column not in columns and cell[column].nunique(dropna=True) >= 2:
                blocks.append((column, [(str(k), g) for k, g in
                                        cell.groupby(column, dropna=True, observed=True)]))
        for group_by, groups in blocks:
            for group, frame in groups:
                for metric in metrics:
                    for score in scores:
                        result = spearman(frame, metric, score, n_bootstrap=n_bootstrap, seed=seed)
                        rows.append({**key, "group_by": group_by, "group": group, **result})
    return pd.DataFrame(rows, columns=[*columns, "group_by", "group", "x", "y", "n", "rho", "low", "high"])


def cell_label(row, columns=CELL) -> str:
    """"dataset=…, split=…" for a row (a dict or Series) of a grouped table; "" without cell columns."""
    return ", ".join(f"{c}={row[c]}" for c in columns if c in row and not pd.isna(row[c]))


def configuration_columns(df: pd.DataFrame) -> list[str]:
    """The columns that say what was run, apart from the seed: the settings of the results schema
    that ``df`` has, less :data:`NOT_SETTINGS`."""
    from analysis.schema import SETTINGS

    return [name for name in SETTINGS if name in df.columns and name not in NOT_SETTINGS]


def configurations(df: pd.DataFrame, by=None) -> list[tuple[dict, pd.DataFrame]]:
    """The configurations of ``df`` as [(key, rows)], sorted by key: the distinct combinations of
    :func:`configuration_columns` (every setting but the seed), or of ``by`` if given (``by=[]``:
    one group of every row). This is the one grouping rule for seeds."""
    columns = configuration_columns(df) if by is None else ([by] if isinstance(by, str) else list(by))
    if not columns:
        return [({}, df)]
    return [(dict(zip(columns, key if isinstance(key, tuple) else (key,))), group)
            for key, group in df.groupby(columns, dropna=False, sort=True, observed=True)]


def best_seed_metric(df: pd.DataFrame) -> str | None:
    """The metric the best seed is chosen by, by default: the first of :data:`BEST_SEED_METRICS` that
    ``df`` has values of (D-score, or DCI disentanglement where there is none), or None."""
    return next(iter(present(df, BEST_SEED_METRICS)), None)


@finished_only
def best_seeds(df: pd.DataFrame, best_seed_by: str = "d_score", *, by=None) -> pd.DataFrame:
    """One row per configuration (:func:`configurations`): the seed with the highest
    ``best_seed_by`` (Montero et al. 2021, §3). Rows where the metric is NaN are never chosen unless
    every seed's is; ties go to the first row. Raises KeyError if the column is missing."""
    if best_seed_by not in df.columns:
        choices = ", ".join(present(df, DISENTANGLEMENT_METRICS)) or "d_score"
        raise KeyError(f"best_seed_by: no column {best_seed_by!r} in the results; choose a metric such as "
                       f"{choices}")
    return df.loc[[group.index[int(np.argmax(finite(group[best_seed_by]).fillna(-np.inf)))]
                   for _, group in configurations(df, by)]]


def finite(values: pd.Series) -> pd.Series:
    """``values`` as floats, with anything missing or not finite as NaN."""
    return pd.to_numeric(values, errors="coerce").astype(float).replace([np.inf, -np.inf], np.nan)


def _seed_text(value) -> str:
    return "–" if pd.isna(value) else str(value)


@finished_only
def seed_summary(df: pd.DataFrame, metrics=None, *, best_seed_by: str | None = "d_score",
                 by=None) -> pd.DataFrame:
    """Per configuration (:func:`configurations`) and metric, over the seeds' finite values: the mean
    ± sd and, with ``best_seed_by``, the value at the seed with the highest ``best_seed_by``.

    Long format: the configuration columns, then ``metric``, ``seeds`` (those that ran),
    ``failed`` (those with no finite value of any of ``metrics``), ``n_seeds`` (with a value),
    ``mean``, ``sd`` (ddof 1; NaN with one seed), ``best_seed``, ``best`` and ``shown``: "best seed
    by <metric>" (as M21) or "mean" (without ``best_seed_by``)."""
    df = add_derived_columns(df).reset_index(drop=True)
    metrics = present(df, DISENTANGLEMENT_METRICS + GENERALISATION_SCORES + TRANSFER_SCORES) \
        if metrics is None else list(metrics)
    shown = f"best seed by {best_seed_by}" if best_seed_by else "mean"
    numbers = pd.DataFrame({m: finite(df[m]) for m in metrics}, index=df.index)
    seeds = df["seed"].astype(object).map(_seed_text) if "seed" in df else pd.Series("–", index=df.index)
    groups, rows = configurations(df, by), []
    best = best_seeds(df, best_seed_by, by=by) if best_seed_by else None  # a row per group, in order
    for k, (key, group) in enumerate(groups):
        values, ran = numbers.loc[group.index], seeds.loc[group.index]
        failed = ran[values.isna().all(axis=1)] if metrics else ran.iloc[:0]
        count, mean, sd = values.count(), values.mean(), values.std(ddof=1)
        for metric in metrics:
            rows.append({**key, "metric": metric, "seeds": ", ".join(ran), "failed": ", ".join(failed),
                         "n_seeds": int(count[metric]), "mean": float(mean[metric]), "sd": float(sd[metric]),
                         "best_seed": None if best is None or "seed" not in best else best["seed"].iloc[k],
                         "best": np.nan if best is None else float(best[metric].iloc[k]), "shown": shown})
    columns = list(groups[0][0]) if groups else []
    return pd.DataFrame(rows, columns=[*columns, "metric", "seeds", "failed", "n_seeds", "mean", "sd",
                                       "best_seed", "best", "shown"])
