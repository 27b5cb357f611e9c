"""The report's tables, as DataFrames: trials, seeds, the papers' own tables, and the correlations
with the rows that cannot be computed folded away. Plain pandas, no HTML; the seeds and
configurations come from ``analysis.aggregate``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.aggregate import (
    CELL,
    best_seed_metric,
    best_seeds,
    configuration_columns,
    finished_only,
    seed_summary,
)

# The columns of the printed trials table, in order; the HTML tables put them first too.
TABLE_COLUMNS = ["trial_key", "split", "condition", "objective", "beta", "seed", "steps",
                 "train_nll", "test_nll", "d_score", "dci_disentanglement",
                 "dci_completeness", "dci_informativeness"]
# M22's rule of thumb (analysis/metrics/encoder_decoder_diagnosis.py): a side fails when its
# held-out error exceeds 1.5× its training error, and by at least 0.05 MAE (encoder) or 5% (NLL).
DIAGNOSIS_TOLERANCE = 1.5


def numeric(series: pd.Series) -> pd.Series:
    return pd.to_numeric(series, errors="coerce").astype(float)


def config_columns(df: pd.DataFrame) -> list[str]:
    """The configuration columns that tell ``df``'s configurations apart (those that vary)."""
    return [c for c in configuration_columns(df) if df[c].nunique(dropna=False) > 1]


def configuration_labels(df: pd.DataFrame, columns: list[str] | None = None) -> pd.Series:
    """A short label per row naming its configuration, e.g. ``split=leave1out · objective=vae``."""
    columns = config_columns(df) if columns is None else columns
    if not columns or df.empty:
        return pd.Series("all trials", index=df.index)
    parts = pd.DataFrame({c: c + "=" + df[c].astype(object).map(_short) for c in columns}, index=df.index)
    return parts.agg(" · ".join, axis=1)


def _short(value) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
        return "–"
    return f"{value:g}" if isinstance(value, float) else str(value)


@finished_only
def trials_text(df: pd.DataFrame) -> str:
    """The trials as fixed-width text (the CLI's table)."""
    columns = [c for c in TABLE_COLUMNS if c in df.columns]
    ordered = df[columns].sort_values([c for c in ("split", "beta", "seed") if c in columns])
    with pd.option_context("display.width", 200, "display.max_columns", None,
                           "display.float_format", "{:.3f}".format):
        return ordered.to_string(index=False)


@finished_only
def trials_frame(df: pd.DataFrame, values: list[str]) -> pd.DataFrame:
    """Every trial: the key columns first, then the varying configuration, then ``values``."""
    names = ["experiment", *TABLE_COLUMNS[:4], "supervision", *TABLE_COLUMNS[4:]]
    first = [c for c in names if c in df.columns]
    rest = [c for c in config_columns(df) + values if c in df.columns and c not in first]
    columns = list(dict.fromkeys(first + rest + [c for c in ("tensorboard_dir",) if c in df.columns]))
    order = [c for c in ("experiment", "split", "beta", "seed") if c in columns]
    return df[columns].sort_values(order, kind="stable") if order else df[columns]


@finished_only
def seed_table(df: pd.DataFrame, values: list[str], best_seed_by: str | None = None) -> pd.DataFrame:
    """:func:`analysis.aggregate.seed_summary` as one row per configuration: the settings that vary,
    the seeds, those that failed (no finite value), and per value the mean ± sd over seeds (one
    value where one seed has it), after the best seed's value with ``best_seed_by``."""
    values = [v for v in values if v in df.columns]
    summary = seed_summary(df, values, best_seed_by=best_seed_by)  # len(values) rows per configuration
    first = summary.iloc[::len(values) or 1]
    out = pd.DataFrame({c: first[c].astype(object).map(_short) for c in config_columns(df)} or
                       {"configuration": "all trials"}, index=first.index)
    out["seeds"], out["n"] = first["seeds"], first["seeds"].str.count(", ") + 1
    out["failed"] = np.where(first["failed"] == "", "–", "seed " + first["failed"] + " failed")
    mean, sd = summary["mean"].map("{:.3f}".format), summary["sd"].map("{:.3f}".format)
    text = pd.Series(np.where(summary["n_seeds"] > 1, mean + " ± " + sd, mean),
                     index=summary.index).where(summary["n_seeds"] > 0, "–")
    if best_seed_by:
        out[f"best seed by {best_seed_by}"] = first["best_seed"].astype(object).map(_short)
        text = summary["best"].map(lambda v: "–" if np.isnan(v) else f"{v:.3f}") + " (" + text + ")"
    for j, value in enumerate(values):
        out[value] = text.iloc[j::len(values)].to_numpy()
    return out.reset_index(drop=True)


def model_label(df: pd.DataFrame) -> pd.Series:
    """A model's name as the papers use it: the objective (or task), with the objective's own
    setting (β, γ or λ) where the study varies it."""
    task = df["task"].astype(object) if "task" in df.columns else pd.Series(None, index=df.index)
    name = df["objective"].astype(object).fillna("?") if "objective" in df.columns else pd.Series(
        "model", index=df.index)
    name = name.where(task.isna() | (task == "vae"), task)
    for column, symbol in (("beta", "β"), ("gamma", "γ"), ("mmd_weight", "λ")):
        if column in df.columns:
            value = numeric(df[column])
            if value.nunique() > 1:
                name = name + value.map(lambda v, s=symbol: "" if np.isnan(v) else f" {s}={v:g}")
    return name


def condition_label(df: pd.DataFrame) -> pd.Series:
    """The held-out condition of each row: its split, with the dataset where there are several."""
    split = (df["split"].astype(object).fillna("?") if "split" in df.columns
             else pd.Series("all", index=df.index))
    if "dataset" in df.columns and df["dataset"].nunique() > 1:
        return df["dataset"].astype(object).fillna("?") + "/" + split
    return split


@finished_only
def nll_table(df: pd.DataFrame) -> pd.DataFrame:
    """M21's main result: NLL on training and on held-out images per model and condition, as
    mean, sd and the best seed's value."""
    frame = pd.DataFrame({"condition": condition_label(df), "model": model_label(df),
                          "train_nll": numeric(df["train_nll"]), "test_nll": numeric(df["test_nll"])})
    grouped = frame.groupby(["condition", "model"], sort=True, observed=True)
    out = grouped.agg(seeds=("train_nll", "size"), train_mean=("train_nll", "mean"),
                      train_sd=("train_nll", "std"), test_mean=("test_nll", "mean"),
                      test_sd=("test_nll", "std"))
    metric = best_seed_metric(df)
    best = best_seeds(df, metric) if metric else df.iloc[:0]
    best_frame = pd.DataFrame({"condition": condition_label(best), "model": model_label(best),
                               "train_best": numeric(best["train_nll"]),
                               "test_best": numeric(best["test_nll"])})
    best_frame = best_frame.groupby(["condition", "model"], sort=True, observed=True)[
        ["train_best", "test_best"]].first()
    return out.join(best_frame).reset_index()


@finished_only
def diagnosis_table(df: pd.DataFrame) -> pd.DataFrame:
    """M22's encoder-versus-decoder diagnosis per split and model: mean errors over seeds, the
    held-out/training ratios and the verdict."""
    columns = ["encoder_error_train", "encoder_error_test", "decoder_nll_train", "decoder_nll_test"]
    frame = pd.DataFrame({c: numeric(df[c]) if c in df.columns else np.nan for c in columns}, index=df.index)
    frame["condition"], frame["model"] = condition_label(df), model_label(df)
    out = frame.groupby(["condition", "model"], sort=True, observed=True)[columns].mean().dropna(how="all")
    enc_train, enc_test = out["encoder_error_train"], out["encoder_error_test"]
    dec_train, dec_test = out["decoder_nll_train"], out["decoder_nll_test"]
    out["encoder ratio"] = enc_test / enc_train
    out["decoder ratio"] = dec_test / dec_train
    encoder_fails = enc_test > np.maximum(DIAGNOSIS_TOLERANCE * enc_train, enc_train + 0.05)
    decoder_fails = dec_test > np.maximum(DIAGNOSIS_TOLERANCE * dec_train, 1.05 * dec_train)
    verdict = np.select([encoder_fails & decoder_fails, encoder_fails, decoder_fails],
                        ["both", "encoder", "decoder"], "neither")
    out["verdict"] = np.where(dec_test.isna(), np.where(encoder_fails, "encoder (decoder not tested)",
                                                        "neither (decoder not tested)"), verdict)
    return out.reset_index()


def correlation_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The long correlation table as the report shows it: ρ and its interval as text."""
    shown = table.copy()
    low, high, rho = shown["low"], shown["high"], shown["rho"]
    interval = "[" + low.map("{:+.2f}".format) + ", " + high.map("{:+.2f}".format) + "]"
    shown["95% interval"] = interval.where(low.notna(), "–")
    shown["rho"] = rho.map("{:+.2f}".format).where(rho.notna(), "–")
    cell = [c for c in CELL if c in shown.columns]  # correlations are within a dataset and split
    return shown[[*cell, "group_by", "group", "x", "y", "n", "rho", "95% interval"]].rename(
        columns={"group_by": "grouped by", "x": "metric", "y": "score", "rho": "Spearman ρ"})


def strongest(table: pd.DataFrame, n: int = 5) -> pd.DataFrame:
    """The ``n`` correlations over all trials with the largest |ρ| whose interval excludes 0,
    or the largest |ρ| if none does."""
    overall = table[(table["group_by"] == "all") & table["rho"].notna()]
    clear = overall[(overall["low"] > 0) | (overall["high"] < 0)]
    chosen = clear if not clear.empty else overall
    return chosen.reindex(chosen["rho"].abs().sort_values(ascending=False).index).head(n)
