"""The self-contained HTML report: a summary, the tables, the papers' figures (PNG data URIs), the
trained models and the configuration, in one file that opens offline.

:func:`write_html_report` runs named steps: read the results, compute the correlations, draw the
trained models (skipping, with the reason, any whose checkpoint or event file is broken), build
each section (``analysis/report_sections.py``) and write the page (``analysis/html_page.py``).
"""

from __future__ import annotations

import datetime as dt
import html
import os
from dataclasses import dataclass

import pandas as pd

from analysis import report_sections as sections
from analysis.aggregate import (
    DISENTANGLEMENT_METRICS,
    GENERALISATION_SCORES,
    TRANSFER_SCORES,
    add_derived_columns,
    correlation_table,
    finished_models,
    present,
)
from analysis.findings import findings
from analysis.html_page import page
from analysis.loading import load_errors, load_history, load_trials
from analysis.storage import experiment_name, is_remote, join, read_bytes, resolve

REPORT_FILE = "report.html"
# Files of the experiment folder shown as its configuration (Ray's own state files are not).
SPEC_PATTERNS = ("*.yaml", "*.yml", "*.toml", "spec*.json", "config*.json", "sweep*.json")
_MAX_SPEC_CHARS = 20_000


@dataclass
class Results:
    """What the report shows, read once."""

    experiments: list
    trials: pd.DataFrame
    history: pd.DataFrame | None
    errors: pd.DataFrame
    metrics: list
    scores: list


def read_results(experiments, trials: pd.DataFrame | None = None,
                 history: pd.DataFrame | None = None) -> Results:
    """Step 1: the finished models (with nll_gap and supervision), which every table and figure
    shows; their history; and the models that did not finish (failed or stopped, from their rows
    and, for older experiments, from ``errors.jsonl``)."""
    experiments = [str(e) for e in experiments]
    everything = add_derived_columns(load_trials(*experiments) if trials is None else trials)
    trials = finished_models(everything)
    if history is None:
        try:
            history = load_history(*experiments)
        except FileNotFoundError:
            history = None
    errors = not_finished(everything, load_errors(*experiments))
    metrics = present(trials, DISENTANGLEMENT_METRICS)
    scores = present(trials, GENERALISATION_SCORES + TRANSFER_SCORES)
    return Results(experiments, trials, history, errors, metrics, scores)


def not_finished(df: pd.DataFrame, logged: pd.DataFrame) -> pd.DataFrame:
    """The models that did not finish: their rows' key, status and error, then the failures that
    ``errors.jsonl`` alone names (an experiment from before failed models had rows)."""
    columns = ["experiment", "trial_key", "status", "error"]
    if "status" in df.columns:
        rows = df[(df["status"].astype(object) != "finished").to_numpy(dtype=bool)]
        rows = rows.reindex(columns=columns).astype(object)
    else:
        rows = pd.DataFrame(columns=columns)
    older = logged[~logged["trial_key"].isin(df["trial_key"].astype(object))].assign(status="failed")
    return pd.concat([rows, older.reindex(columns=columns).astype(object)], ignore_index=True)


def correlations(results: Results, n_bootstrap: int) -> pd.DataFrame:
    """Step 2: Spearman ρ with bootstrap intervals, overall and by group (analysis.aggregate)."""
    return correlation_table(results.trials, metrics=results.metrics, scores=results.scores,
                             n_bootstrap=n_bootstrap)


def trained_models(results: Results, figures_dir: str, *, max_models: int, with_checkpoints: bool,
                   progress=None):
    """Step 3: the figures of up to ``max_models`` models: (drawn, skipped, note)."""
    if max_models <= 0:
        return [], [], "Skipped (--max-models 0)."
    if any(is_remote(e) for e in results.experiments) and not with_checkpoints:
        return [], [], ("Checkpoint figures are not drawn for remote results unless asked "
                        "(--with-checkpoints): each checkpoint is downloaded.")
    try:
        from analysis.trained_models import draw_models
    except ImportError as error:  # pragma: no cover - torch or models missing
        return [], [], f"Model figures unavailable: {error}"
    drawn, skipped = draw_models(results.trials, results.experiments, figures_dir, max_models=max_models,
                                 progress=progress)
    return drawn, skipped, None


def tensorboard_links(results: Results, out_dir: str) -> pd.Series | None:
    """Step 4: each trial's TensorBoard folder as a link from the report: relative to the report
    for a local experiment, the full URI for a remote one."""
    df = results.trials
    if "tensorboard_dir" not in df.columns or df["tensorboard_dir"].isna().all():
        return None
    by_name = {experiment_name(e): e for e in results.experiments}
    first = results.experiments[0]
    experiment = df["experiment"].astype(object).map(lambda n: by_name.get(str(n), first)) if (
        "experiment" in df.columns) else pd.Series(first, index=df.index)
    links = []
    for location, folder in zip(experiment, df["tensorboard_dir"].astype(object)):
        if pd.isna(folder):
            links.append(None)
        elif is_remote(location):
            links.append(join(location, folder))
        else:
            links.append(os.path.relpath(os.path.join(location, folder), out_dir))
    return pd.Series(links, index=df.index)


def spec_files(experiments) -> list[tuple[str, str]]:
    """The experiments' own spec files (``*.yaml``, ``spec*.json``, ...), cut at 20,000 characters."""
    import fnmatch

    import pyarrow.fs as pafs

    found = []
    for location in experiments:
        fs, inner = resolve(location)
        infos = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
        names = sorted(os.path.basename(i.path) for i in infos if i.type == pafs.FileType.File)
        for pattern in SPEC_PATTERNS:
            for name in fnmatch.filter(names, pattern):
                path = join(location, name)
                text = (read_bytes(path) or b"").decode("utf-8", "replace")
                if len(text) > _MAX_SPEC_CHARS:
                    text = text[:_MAX_SPEC_CHARS] + "\n… (cut)"
                found.append((path, text))
    return found


def write_html_report(
    experiment_dirs,
    out_dir: str,
    *,
    df: pd.DataFrame | None = None,
    history: pd.DataFrame | None = None,
    max_models: int = 4,
    n_bootstrap: int = 1000,
    command=None,
    with_checkpoints: bool = False,
    progress=None,
    found=None,
) -> str:
    """Write ``out_dir/report.html`` (and its PNGs under ``out_dir/figures``) for the experiments
    (folders or URIs such as ``s3://bucket/prefix/name``); returns the path of the HTML file.
    ``found``: the papers' findings (``analysis.findings.findings``), if the caller has them already."""
    results = read_results(experiment_dirs, df, history)
    figures_dir = os.path.join(out_dir, "figures")
    os.makedirs(figures_dir, exist_ok=True)
    table = correlations(results, n_bootstrap)
    drawn, skipped, models_note = trained_models(results, figures_dir, max_models=max_models,
                                                 with_checkpoints=with_checkpoints, progress=progress)
    df, values = results.trials, results.metrics + results.scores
    parts = [
        sections.findings(findings(df) if found is None else found),
        sections.summary(df, results.errors, skipped, table, results.experiments),
        sections.trials(df, values, tensorboard_links(results, out_dir)),
        sections.seeds(df, values, results.errors),
        sections.correlations(table, figures_dir, n_bootstrap),
        sections.m21_nll(df, figures_dir),
        sections.d21_transfer(df, table, figures_dir),
        sections.m22_diagnosis(df, figures_dir),
        sections.training_curves(df, results.history, figures_dir),
        sections.groups(df, values, figures_dir),
        sections.trained_models(drawn, skipped, models_note),
        sections.configuration(df, results.experiments, command, spec_files(results.experiments)),
    ]
    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    names = ", ".join(experiment_name(e) for e in results.experiments)
    intro = (f"<p>{len(df)} trials from {len(results.experiments)} experiment(s): "
             f"{html.escape(names)}; generated {generated}.</p>")
    path = os.path.join(out_dir, REPORT_FILE)
    with open(path, "w", encoding="utf-8") as f:
        f.write(page(f"disgen report: {names}", "disgen report", [intro] + [p for p in parts if p]))
    return path
