"""The sections of the HTML report, one function each. Each takes what it shows and returns HTML
(an empty string where the results have nothing for it), so the report is the list of them."""

from __future__ import annotations

import html
import os

import pandas as pd

from analysis import html_page, study_figures, tables
from analysis.aggregate import CELL, cell_label, seed_summary
from analysis.figures import disentanglement_vs_nll, spearman_heatmap, violins_by
from analysis.schema import CONFIG_FIELDS, LOSS_TERMS

READOUTS = {"gbt": "GBT", "mlp": "MLP"}
SCENARIOS = ["ood1_a", "ood1_b", "ood1_c", "ood2"]


def _path(figures_dir: str, name: str) -> str:
    return os.path.join(figures_dir, name.replace("/", "_").replace(" ", "_").replace(",", "_")
                        .replace("=", "-"))


def findings(found) -> str:
    """The papers' headline findings (analysis.findings): the paper's statement, ✓/✗/?, the
    numbers behind each, and its precondition with whether it held (the readout accuracy per
    factor behind it)."""
    if not found:
        return ""
    body = ["<h2>Findings</h2><p>Each paper statement beside what these results show: "
            "✓ reproduced, ✗ not reproduced, ? inconclusive at this scale (the rules: docs/analysis.md). "
            "A split counts only where its precondition holds: the models learned, on their training "
            "images, the factors it recombines.</p>"]
    for f in found:
        body.append(f"<h3>{f.symbol} {html.escape(f.study)}, {html.escape(f.source)}: "
                    f"{html.escape(f.status)}</h3><p><b>The paper:</b> {html.escape(f.paper)}</p>"
                    f"<p><b>Here:</b> {html.escape(f.result)}</p>")
        if not f.table.empty:
            body.append(html_page.table(f.table))
        if f.precondition:
            body.append(f"<p><b>Precondition</b> (fixed before any result): {html.escape(f.precondition)}</p>"
                        f"<p><b>Did it hold?</b> {html.escape(f.precondition_result)}</p>")
        if not f.readout.empty:
            body.append("<p>The readout accuracy per factor behind it (mean over the models, 95% interval, "
                        "chance and the bar):</p>" + html_page.table(f.readout))
    return "\n".join(body)


def summary(df, errors, skipped, correlations, experiments) -> str:
    """What ran, what failed, and the strongest correlations with their intervals."""
    configurations = tables.configuration_labels(df).nunique()
    seeds = df["seed"].nunique() if "seed" in df.columns else 1
    items = [f"<b>Ran:</b> {len(df)} trained models, {configurations} configuration(s) × up to {seeds} "
             f"seed(s), from {len(experiments)} experiment(s)."]
    for column in ("preset", "scale", "dataset", "split", "objective"):
        if column in df.columns and df[column].notna().any():
            values = sorted(str(v) for v in df[column].dropna().unique())
            shown = ", ".join(values[:8]) + (f" and {len(values) - 8} more" if len(values) > 8 else "")
            items.append(f"{column}: {html.escape(shown)}")
    no_values = tables.numeric(df["train_nll"]).isna().sum() if "train_nll" in df.columns else 0
    stopped = int((errors["status"] == "stopped").sum()) if "status" in errors.columns else 0
    failed = len(errors) - stopped + int(no_values)
    items.append(f"<b>Failed:</b> {failed} trial(s)" + (" (see the seed table)" if failed or stopped else "")
                 + (f"; <b>stopped early</b> (ASHA): {stopped}" if stopped else "")
                 + f"; {len(skipped)} model(s) skipped in the figures" + (" (see “skipped, and why”)."
                                                                         if skipped else "."))
    top = tables.strongest(correlations) if not correlations.empty else correlations
    if top.empty:
        items.append("<b>Strongest correlations:</b> none computable (each needs ≥ 3 trials that differ).")
    else:
        lines = [f"{html.escape(r.x)} vs {html.escape(r.y)}: ρ = {r.rho:+.2f} "
                 f"[{r.low:+.2f}, {r.high:+.2f}], n = {r.n}" for r in top.itertuples()]
        items.append("<b>Strongest correlations</b> over all trials (95% bootstrap interval):<ul>"
                     + "".join(f"<li>{line}</li>" for line in lines) + "</ul>")
    return "<h2>Summary</h2><ul class=\"summary\">" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


def trials(df, values, links: pd.Series | None) -> str:
    frame = tables.trials_frame(df, values)
    if links is not None and "trial_key" in frame.columns:
        frame = frame.assign(_link=links.reindex(frame.index))
        body = html_page.table(frame.drop(columns=["tensorboard_dir"], errors="ignore"),
                               links={"trial_key": "_link"}).replace("<th>_link</th>", "<th>link</th>")
    else:
        body = html_page.table(frame)
    return (f"<h2>Trials ({len(df)})</h2><p>One row per trained model; click a key to open its "
            "TensorBoard folder, a header to sort.</p>" + body)


def seeds(df, values, errors, best_seed_by: str = "d_score") -> str:
    parts = []
    if "seed" in df.columns and df["seed"].nunique() >= 2 and best_seed_by in df.columns:
        shown = [m for m in ("train_nll", "test_nll", best_seed_by) if m in df.columns]
        parts += ["<h2>Seeds</h2>",
                  "<p>Per configuration: <b>best</b> is the value at the seed with the highest "
                  f"{best_seed_by} (what Montero et al. 2021 report, shown first), next to the mean ± sd "
                  "over seeds.</p>",
                  html_page.table(seed_summary(df, shown, best_seed_by=best_seed_by))]
    table = tables.seed_table(df, values)
    parts += ["<h2>Seeds: mean ± sd per configuration</h2>",
             "<p>Mean ± standard deviation over the seeds of each configuration (one value where one "
             "seed has it). A seed whose values are all missing failed.</p>", html_page.table(table)]
    if not errors.empty:
        parts.append(f"<h3>Models that did not finish ({len(errors)})</h3>"
                     "<p>Failed (with the error) or stopped early by ASHA: they have a row in "
                     "<code>trials.parquet</code> with their settings but no metrics, and no table or "
                     "figure counts them.</p>" + html_page.table(errors))
    return "\n".join(parts)


def correlations(table, figures_dir, n_bootstrap) -> str:
    body = [
        "<h2>Spearman correlations</h2>",
        "<p>Spearman ρ of each disentanglement metric against each generalisation and transfer score "
        f"across trials, with percentile-bootstrap 95% intervals ({n_bootstrap} resamples); "
        "n is the number of trials with both values. Lower NLL and lower transfer MAE are better, "
        "so a negative ρ means more disentangled models generalise better.</p>",
    ]
    shown, dropped = tables.computable_correlations(table)
    if shown.empty:
        body.append(html_page.note("No correlation can be computed: each needs at least 3 trials with "
                                   "both values, and values that differ."))
        return "\n".join(body)
    cell = [c for c in CELL if c in shown.columns]  # never pooled across datasets and splits
    for key, part in shown.groupby([*cell, "group_by", "group"], sort=False, dropna=False, observed=True):
        group_by, group = key[-2:]
        where = cell_label(part.iloc[0], cell)
        name = "all trials" if group_by == "all" else f"{group_by} = {group}"
        name += f" ({where})" if where else ""
        path = _path(figures_dir, f"spearman_{where}_{group_by}_{group}.png")
        body.append(html_page.image(spearman_heatmap(part, path, title=f"Spearman ρ, {name}"),
                                    f"Spearman ρ, {name} (D21 Figs 4–6, right)"))
    if dropped:
        body.append(f"<p>{dropped} of {len(table)} metric-and-score rows are left out: they need at least "
                    "3 trials with both values, and values that differ.</p>")
    body.append(html_page.table(tables.correlation_rows(shown)))
    return "\n".join(body)


def m21_nll(df, figures_dir) -> str:
    if not {"train_nll", "test_nll"} <= set(df.columns) or tables.numeric(df["test_nll"]).isna().all():
        return ""
    table = tables.nll_table(df)
    body = ["<h2>NLL on training and held-out images (M21)</h2>"]
    for best in (False, True):
        name = "nll_bars_best_seed.png" if best else "nll_bars_mean_sd.png"
        path = study_figures.nll_bars(table, _path(figures_dir, name), best_seed=best)
        which = "the best seed (highest disentanglement, as M21 reports)" if best else "mean ± sd over seeds"
        body.append(html_page.image(path, "Per model and condition: NLL on training images against "
                                    f"held-out images; {which}"))
    body.append(html_page.table(table))
    return "\n".join(body)


def d21_transfer(df, table, figures_dir) -> str:
    body = []
    overall = table[(table["group_by"] == "all") & table["rho"].notna()] if not table.empty else table
    for readout, name in READOUTS.items():
        columns = [f"transfer_{readout}_{s}" for s in SCENARIOS]
        part = overall[overall["y"].isin(columns)] if not overall.empty else overall
        if part.empty:
            continue
        path = _path(figures_dir, f"d21_heatmap_{readout}.png")
        body.append(html_page.image(spearman_heatmap(part, path, title=f"Spearman ρ, {name} readout"),
                                    f"Every disentanglement metric against the {name} readout's transfer "
                                    "error under each OOD scenario (D21 Figs 4–6)"))
    for readout in READOUTS:
        error = f"transfer_{readout}_ood1_a"
        if {"dci_disentanglement", error} <= set(df.columns) and tables.numeric(df[error]).notna().any():
            colour = "supervision" if "supervision" in df.columns else "objective"
            path = study_figures.metric_vs_score(df, _path(figures_dir, f"dci_vs_{error}.png"),
                                                 x="dci_disentanglement", y=error, colour_by=colour,
                                                 title=f"DCI disentanglement against OOD1 error ({readout})")
            body.append(html_page.image(path, "DCI against OOD1-A transfer error (D21)"))
            break
    return "<h2>Transfer (D21)</h2>" + "\n".join(body) if body else ""


def m22_diagnosis(df, figures_dir) -> str:
    if "encoder_error_test" not in df.columns or tables.numeric(df["encoder_error_test"]).isna().all():
        return ""
    table = tables.diagnosis_table(df)
    path = study_figures.diagnosis_figure(table, _path(figures_dir, "m22_diagnosis.png"))
    return ("<h2>Encoder versus decoder (M22)</h2><p>Per split and model, means over seeds. The "
            "encoder's error is a linear readout's MAE; the decoder's is the NLL of decoding the codes "
            "the held-out images should have. A side fails when its held-out error exceeds 1.5× its "
            "training error (and by 0.05 MAE or 5%).</p>"
            + html_page.image(path, "Held-out/training error ratios per split (M22)")
            + html_page.table(table))


def training_curves(df, history, figures_dir) -> str:
    if history is None or history.empty:
        return ""
    terms = [t for t in LOSS_TERMS if t in history.columns and tables.numeric(history[t]).notna().any()]
    if not terms:
        return ""
    labels = pd.Series(tables.configuration_labels(df).to_numpy(), index=df["trial_key"].astype(object))
    labels = labels[~labels.index.duplicated()]
    path = study_figures.training_curves(history, labels, terms, _path(figures_dir, "training_curves.png"))
    return ("<h2>Training curves</h2>"
            + html_page.image(path, "Loss terms against step from history.parquet, per configuration"))


def groups(df, values, figures_dir) -> str:
    metrics = [m for m in values if m in df.columns]
    body = ["<h2>Metrics by group</h2>"]
    for by in ("supervision", "condition", "architecture"):
        # supervision always (D21's violins); the others only where they split the trials
        if by in df.columns and df[by].nunique(dropna=True) >= (1 if by == "supervision" else 2):
            path = violins_by(df, metrics, _path(figures_dir, f"violins_{by}.png"), by=by)
            body.append(html_page.image(path, f"Every metric and score by {by} (violins where a group "
                                        "has spread; dots are trials)"))
    if {"split", "train_nll", "test_nll"} <= set(df.columns):
        for metric in [m for m in ("d_score", "dci_disentanglement", "mig") if m in metrics]:
            path = disentanglement_vs_nll(df, _path(figures_dir, f"{metric}_vs_nll.png"), metric)
            body.append(html_page.image(path, f"{metric} against train and held-out NLL (M21 Fig. 3)"))
    return "\n".join(body)


def trained_models(drawn, skipped, note: str | None) -> str:
    body = ["<h2>Trained models</h2>"]
    if note:
        body.append(html_page.note(note))
    captions = {
        "reconstructions": "Training and held-out images (top rows) and reconstructions",
        "traversal": "Latent traversal: each row moves one code from −2 to +2 around a training image",
        "hinton": "Hinton diagram of the importance matrix (codes × factors)",
    }
    for model in drawn:
        events = model.events
        body.append(f"<h3>{html.escape(model.trial_key)} · {html.escape(model.label)}</h3>"
                    f"<p>TensorBoard folder <code>{html.escape(str(model.tensorboard_dir))}</code>: "
                    f"{events.get('events', 0)} events, last step {events.get('last_step')}.</p>")
        body.extend(html_page.image(model.figures[k], captions[k]) for k in captions if k in model.figures)
    if skipped:
        rows = pd.DataFrame([{"trial_key": s.trial_key, "model": s.label, "why": s.reason} for s in skipped])
        body.append(f"<h3>Skipped, and why ({len(skipped)})</h3>" + html_page.table(rows))
    return "\n".join(body)


def configuration(df, experiments, command, spec_files) -> str:
    config_columns = [f.name for f in CONFIG_FIELDS
                      if f.name in df.columns and f.name != "config" and df[f.name].notna().any()]
    body = [
        "<h2>Configuration</h2>",
        "<p>Command: <code>" + html.escape(" ".join(command or ["(called from Python)"])) + "</code></p>",
        "<p>Experiments: " + ", ".join(f"<code>{html.escape(str(d))}</code>" for d in experiments) + "</p>",
        "<h3>Every trial's configuration</h3><p>(Each trial's whole configuration, as JSON, is the "
        "<code>config</code> column of <code>trials.parquet</code>.)</p>",
        html_page.table(df[config_columns]),
    ]
    for path, text in spec_files:
        body.append(f"<h3>{html.escape(path)}</h3><pre>{html.escape(text)}</pre>")
    return "\n".join(body)
