"""The self-contained HTML report: tables, figures (PNG data URIs) and the configuration.

Nothing in the page is fetched: no scripts, styles or fonts from elsewhere. One small inline script
counts, once the page has loaded, how many images decoded, and writes the counts onto ``<body>``
(``data-images-total`` and ``data-images-ok``), so that a headless browser can check the page.
"""

from __future__ import annotations

import base64
import datetime as dt
import glob
import html
import os
import traceback

import pandas as pd

from analysis.aggregate import (
    CELL,
    DISENTANGLEMENT_METRICS,
    GENERALISATION_SCORES,
    TRANSFER_SCORES,
    add_derived_columns,
    cell_label,
    correlation_table,
    present,
    seed_summary,
)
from analysis.figures import disentanglement_vs_nll, spearman_heatmap, violins_by
from analysis.schema import CONFIG_FIELDS

REPORT_FILE = "report.html"
# Files of the experiment folder shown as its configuration (Ray's own state files are not).
SPEC_PATTERNS = ("*.yaml", "*.yml", "*.toml", "spec*.json", "config*.json", "sweep*.json")
_MAX_SPEC_CHARS = 20_000

_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 1400px; }
table { border-collapse: collapse; font-size: 12px; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
th { background: #eee; }
td:first-child, th:first-child { text-align: left; }
figure { display: inline-block; margin: 0.5em; vertical-align: top; }
figcaption { font-size: 12px; color: #555; max-width: 700px; }
img { max-width: 100%; border: 1px solid #ddd; }
pre { background: #f6f6f6; padding: 0.5em; font-size: 12px; overflow-x: auto; }
.note { color: #a40; }
"""

_CHECK_IMAGES = """
window.addEventListener("load", function () {
  var images = document.images, ok = 0;
  for (var i = 0; i < images.length; i++) {
    if (images[i].complete && images[i].naturalWidth > 0) { ok++; }
  }
  document.body.setAttribute("data-images-total", images.length);
  document.body.setAttribute("data-images-ok", ok);
});
"""


def _image(path: str, caption: str) -> str:
    with open(path, "rb") as f:
        data = base64.b64encode(f.read()).decode("ascii")
    alt = html.escape(os.path.basename(path))
    return (
        f'<figure><img alt="{alt}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def _table(df: pd.DataFrame) -> str:
    return df.to_html(index=False, border=0, na_rep="–", float_format=lambda v: f"{v:.3f}", escape=True)


def _correlation_rows(table: pd.DataFrame) -> pd.DataFrame:
    shown = table.copy()
    shown["95% interval"] = [
        "–" if pd.isna(low) else f"[{low:+.2f}, {high:+.2f}]"
        for low, high in zip(shown["low"], shown["high"])
    ]
    shown["rho"] = shown["rho"].map(lambda v: "–" if pd.isna(v) else f"{v:+.2f}")
    cell = [c for c in CELL if c in shown.columns]
    return shown[[*cell, "group_by", "group", "x", "y", "n", "rho", "95% interval"]].rename(
        columns={"group_by": "grouped by", "x": "metric", "y": "score", "rho": "Spearman ρ"}
    )


def _spec_files(experiment_dirs) -> list[tuple[str, str]]:
    found = []
    for directory in experiment_dirs:
        for pattern in SPEC_PATTERNS:
            for path in sorted(glob.glob(os.path.join(directory, pattern))):
                with open(path, errors="replace") as f:
                    text = f.read(_MAX_SPEC_CHARS + 1)
                if len(text) > _MAX_SPEC_CHARS:
                    text = text[:_MAX_SPEC_CHARS] + "\n… (cut)"
                found.append((path, text))
    return found


def write_html_report(
    experiment_dirs,
    out_dir: str,
    *,
    df: pd.DataFrame | None = None,
    max_models: int = 4,
    n_bootstrap: int = 1000,
    command=None,
) -> str:
    """Write ``out_dir/report.html`` (and its PNGs under ``out_dir/figures``) for the experiments
    in ``experiment_dirs``; returns the path of the HTML file."""
    from analysis.aggregate import load_trials
    from analysis.report import TABLE_COLUMNS  # the columns of the printed table come first

    experiment_dirs = list(experiment_dirs)
    if df is None:
        df = load_trials(*experiment_dirs)
    df = add_derived_columns(df)
    figures_dir = os.path.join(out_dir, "figures")
    os.makedirs(figures_dir, exist_ok=True)
    metrics = present(df, DISENTANGLEMENT_METRICS)
    scores = present(df, GENERALISATION_SCORES + TRANSFER_SCORES)
    sections = []

    # --- trials ----------------------------------------------------------------------------
    columns = [
        c
        for c in ["experiment"] + TABLE_COLUMNS + [m for m in metrics + scores if m not in TABLE_COLUMNS]
        if c in df.columns
    ]
    order = [c for c in ("experiment", "split", "beta", "seed") if c in columns]
    sections.append(f"<h2>Trials ({len(df)})</h2>" + _table(df[columns].sort_values(order)))

    # --- seeds: M21 reports the most disentangled seed ----------------------------------------
    if "seed" in df.columns and df["seed"].nunique() >= 2 and "d_score" in metrics:
        summary = seed_summary(df, [m for m in ("train_nll", "test_nll", "d_score") if m in df.columns])
        sections.append("<h2>Seeds</h2><p>Per configuration: <b>best</b> is the value at the seed with "
                        "the highest d_score (what Montero et al. 2021 report, shown first), next to the "
                        "mean ± sd over seeds.</p>" + _table(summary))

    # --- correlations ----------------------------------------------------------------------
    table = correlation_table(df, metrics=metrics, scores=scores, n_bootstrap=n_bootstrap)
    body = [
        "<h2>Spearman correlations</h2>",
        "<p>Spearman ρ of each disentanglement metric against each generalisation and transfer score "
        f"across trials, with percentile-bootstrap 95% intervals ({n_bootstrap} resamples); "
        "n is the number of trials with both values. Lower NLL and lower transfer MAE are better, "
        "so a negative ρ means more disentangled models generalise better.</p>",
    ]
    if table.empty:
        body.append('<p class="note">No metric and score pair has values.</p>')
    else:
        cell = [c for c in CELL if c in table.columns]
        for key, part in table.groupby([*cell, "group_by", "group"], sort=False, dropna=False):
            group_by, group = key[-2:]
            where = cell_label(part.iloc[0], cell)
            name = ("all trials" if group_by == "all" else f"{group_by} = {group}") + (
                f" ({where})" if where else "")
            if not part["rho"].notna().any():
                body.append(f'<p class="note">No correlation for {html.escape(name)}: it needs at least '
                            "3 trials that differ.</p>")
                continue
            path = os.path.join(figures_dir, f"spearman_{where}_{group_by}_{group}.png".replace("/", "_")
                                .replace(", ", "_").replace("=", "-"))
            body.append(
                _image(
                    spearman_heatmap(part, path, title=f"Spearman ρ, {name}"),
                    f"Spearman ρ, {name} (D21 Figs 4–6, right)",
                )
            )
        body.append(_table(_correlation_rows(table)))
    sections.append("\n".join(body))

    # --- distributions and scatters --------------------------------------------------------
    body = ["<h2>Metrics by group</h2>"]
    for by in ("supervision", "condition", "architecture"):
        # supervision always (D21's violins); the others only where they split the trials
        if by in df.columns and df[by].nunique(dropna=True) >= (1 if by == "supervision" else 2):
            path = violins_by(df, metrics + scores, os.path.join(figures_dir, f"violins_{by}.png"), by=by)
            body.append(
                _image(
                    path,
                    f"Every metric and score by {by} (violins where a group has spread; dots are trials)",
                )
            )
    if {"split", "beta", "train_nll", "test_nll"} <= set(df.columns):
        for metric in [m for m in ("d_score", "dci_disentanglement", "mig") if m in metrics]:
            path = disentanglement_vs_nll(df, os.path.join(figures_dir, f"{metric}_vs_nll.png"), metric)
            body.append(_image(path, f"{metric} against train and held-out NLL (M21 Fig. 3)"))
    sections.append("\n".join(body))

    # --- trained models --------------------------------------------------------------------
    body = ["<h2>Trained models</h2>"]
    if max_models > 0:
        body.extend(_model_sections(experiment_dirs, figures_dir, max_models))
    else:
        body.append('<p class="note">Skipped (--max-models 0).</p>')
    sections.append("\n".join(body))

    # --- configuration ---------------------------------------------------------------------
    config_columns = [f.name for f in CONFIG_FIELDS if f.name in df.columns]
    body = [
        "<h2>Configuration</h2>",
        "<p>Command: <code>" + html.escape(" ".join(command or ["(called from Python)"])) + "</code></p>",
        "<p>Experiment folders: "
        + ", ".join(f"<code>{html.escape(os.path.abspath(d))}</code>" for d in experiment_dirs)
        + "</p>",
        "<h3>Every trial's configuration</h3>",
        _table(df[config_columns]),
    ]
    for path, text in _spec_files(experiment_dirs):
        body.append(f"<h3>{html.escape(path)}</h3><pre>{html.escape(text)}</pre>")
    sections.append("\n".join(body))

    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    names = ", ".join(os.path.basename(os.path.normpath(d)) for d in experiment_dirs)
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>disgen report: {html.escape(names)}</title>
<style>{_STYLE}</style>
<script>{_CHECK_IMAGES}</script>
</head><body>
<h1>disgen report</h1>
<p>{len(df)} trials from {len(experiment_dirs)} experiment folder(s); generated {generated}.</p>
{"".join(f"<section>{s}</section>" for s in sections)}
</body></html>
"""
    path = os.path.join(out_dir, REPORT_FILE)
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
    return path


def _model_sections(experiment_dirs, figures_dir, max_models) -> list[str]:
    try:
        from analysis.checkpoints import count_models, find_checkpoints, model_figures
    except ImportError as error:  # pragma: no cover - torch or models missing
        return [f'<p class="note">Model figures unavailable: {html.escape(str(error))}</p>']
    checkpoints = [c for d in experiment_dirs for c in find_checkpoints(d)]
    if not checkpoints:
        return ['<p class="note">No checkpoints (<code>*/checkpoint_*/trainer.pt</code>) found.</p>']
    # one entry per trained model: a pack's checkpoint holds several
    models = [(c, member) for c in checkpoints for member in range(count_models(c))]
    body = []
    if len(models) > max_models:
        body.append(f"<p>Showing {max_models} of {len(models)} trained models (--max-models).</p>")
    for checkpoint, member in models[:max_models]:
        trial = os.path.basename(os.path.dirname(os.path.dirname(checkpoint)))
        body.append(f"<h3>{html.escape(trial)}{f' · member {member}' if member else ''}</h3>")
        try:
            made = model_figures(checkpoint, figures_dir, member=member)
        except Exception as error:  # one broken checkpoint must not lose the whole report
            body.append(
                f'<p class="note">Could not draw {html.escape(checkpoint)}: '
                f"{html.escape(repr(error))}</p><pre>{html.escape(traceback.format_exc(limit=3))}</pre>"
            )
            continue
        captions = {
            "reconstructions": "Training and held-out images (top rows) and reconstructions",
            "traversal": "Latent traversal: each row moves one code from −2 to +2 around a training image",
            "hinton": "Hinton diagram of the importance matrix (codes × factors)",
        }
        body.extend(_image(made[kind], captions[kind]) for kind in ("reconstructions", "traversal", "hinton"))
    return body
