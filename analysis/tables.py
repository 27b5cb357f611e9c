"""The report's tables, as DataFrames: trials, seeds (mean ± sd), the papers' own tables, and the
correlations with the rows that cannot be computed folded away. Plain pandas, no HTML.

A *configuration* is every setting of a trial but its seed (and its identifiers): the seeds of one
configuration are repeats of one experiment.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.aggregate import CELL, finished_only
from analysis.schema import CONFIG_FIELDS

# The columns of the printed trials table, in order; the HTML tables put them first too.
TABLE_COLUMNS = ["trial_key", "split", "condition", "objective", "beta", "seed", "steps",
                 "train_nll", "test_nll", "d_score", "dci_disentanglement",
                 "dci_completeness", "dci_informativeness"]
# Identify a run rather than describe it: left out of a configuration.
IDENTIFIERS = ["trial_key", "status", "error", "trial_id", "tensorboard_dir", "seed", "config"]
# M21 reports, of each configuration's seeds, the one with the highest disentanglement.
BEST_SEED_METRICS = ("d_score", "dci_disentanglement")
# M22's rule of thumb (analysis/metrics/encoder_decoder_diagnosis.py): a side fails when its
# held-out error exceeds 1.5× its training error, and by at least 0.05 MAE (encoder) or 5% (NLL).
DIAGNOSIS_TOLERANCE = 1.5


def numeric(series: pd.Series) -> pd.Series:
    return pd.to_numeric(series, errors="coerce").astype(float)


def config_columns(df: pd.DataFrame) -> list[str]:
    """The configuration columns that tell ``df``'s configurations apart (those that vary)."""
    names = [f.name for f in CONFIG_FIELDS if f.name in df.columns and f.name not in IDENTIFIERS]
    return [c for c in names if df[c].nunique(dropna=False) > 1]


def configuration_labels(df: pd.DataFrame, columns: list[str] | None = None) -> pd.Series:
    """A short label per row naming its configuration, e.g. ``split=leave1out · objective=vae``."""
    columns = config_columns(df) if columns is None else columns
    if not columns:
        return pd.Series("all trials", index=df.index)
    parts = [c + "=" + df[c].astype(object).map(_short) for c in columns]
    label = parts[0]
    for part in parts[1:]:
        label = label + " · " + part
    return label


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
def seed_table(df: pd.DataFrame, values: list[str]) -> pd.DataFrame:
    """Mean ± sd over seeds of each configuration and value, with the seeds that ran and those
    that failed (a seed whose values are all missing or not finite)."""
    columns = config_columns(df)
    values = [v for v in values if v in df.columns]
    numbers = pd.DataFrame({v: numeric(df[v]) for v in values}, index=df.index)
    numbers = numbers.replace([np.inf, -np.inf], np.nan)
    failed = numbers.isna().all(axis=1) if values else pd.Series(False, index=df.index)
    keys = ([df[c].astype(object).map(_short).rename(c) for c in columns]
            or [pd.Series("all trials", index=df.index, name="configuration")])
    grouped = numbers.groupby(keys, sort=True, dropna=False, observed=True)
    mean, sd, count = grouped.mean(), grouped.std(ddof=1), grouped.count()
    seeds = df["seed"].astype(object).map(_short) if "seed" in df.columns else pd.Series("–", index=df.index)
    meta = pd.DataFrame({"seeds": seeds, "failed": np.where(failed, seeds, None)}, index=df.index)
    meta = meta.groupby(keys, sort=True, dropna=False, observed=True).agg(
        seeds=("seeds", lambda s: ", ".join(s)), n=("seeds", "size"),
        failed=("failed", lambda s: ", ".join(str(x) for x in s if pd.notna(x))))
    out = meta.copy()
    out["failed"] = np.where(out["failed"] == "", "–", "seed " + out["failed"] + " failed")
    for v in values:
        text = mean[v].map("{:.3f}".format) + " ± " + sd[v].map("{:.3f}".format)
        text = text.where(count[v] > 1, mean[v].map("{:.3f}".format))
        out[v] = text.where(count[v] > 0, "–")
    return out.reset_index()


@finished_only
def best_seeds(df: pd.DataFrame) -> pd.DataFrame:
    """Of each configuration's seeds, the one with the highest disentanglement (M21's choice):
    D-score, or DCI disentanglement where there is no D-score. All rows if neither has values."""
    metric = next((m for m in BEST_SEED_METRICS if m in df.columns and numeric(df[m]).notna().any()), None)
    if metric is None:
        return df
    columns = config_columns(df)
    if not columns:
        return df.loc[[numeric(df[metric]).idxmax()]]
    ranked = df.assign(_score=numeric(df[metric]).fillna(-np.inf))
    keys = [df[c].astype(object).map(_short) for c in columns]
    index = ranked.groupby(keys, sort=False, observed=True)["_score"].idxmax()
    return df.loc[index.to_numpy()]


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
    best = best_seeds(df)
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


def computable_correlations(table: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The correlation rows that have a ρ, and how many were dropped for having none."""
    keep = table["rho"].notna()
    return table[keep], int((~keep).sum())


def correlation_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The long correlation table as the report shows it: ρ and its interval as text."""
    shown = table.copy()
    low, high, rho = shown["low"], shown["high"], shown["rho"]
    interval = "[" + low.map("{:+.2f}".format) + ", " + high.map("{:+.2f}".format) + "]"
    shown["95% interval"] = interval.where(low.notna(), "–")
    shown["rho"] = rho.map("{:+.2f}".format).where(rho.notna(), "–")
    cell = [c for c in CELL if c in shown.columns]  # correlations are within a dataset and split
    return shown[[*cell, "group_by", "group", "x", "y", "n", "rho", "95% interval"]].rename(
        columns={"group_by": "grouped by", "x": "metric", "y": "score", "rho": "Spearman ρ"}
    )


def strongest(table: pd.DataFrame, n: int = 5) -> pd.DataFrame:
    """The ``n`` correlations over all trials with the largest |ρ| whose interval excludes 0,
    or the largest |ρ| if none does."""
    overall = table[(table["group_by"] == "all") & table["rho"].notna()]
    clear = overall[(overall["low"] > 0) | (overall["high"] < 0)]
    chosen = clear if not clear.empty else overall
    return chosen.reindex(chosen["rho"].abs().sort_values(ascending=False).index).head(n)
