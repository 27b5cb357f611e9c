"""The self-contained HTML report: a summary, the tables, the papers' figures (PNG data URIs), the
trained models and the configuration, in one file that opens offline (docs/analysis.md, "The
report"). :func:`write_html_report` reads the results once and builds each section with one
``*_section`` function (HTML, or "" where the results have nothing for it). Two small inline
scripts: one sorts a table by a clicked header; the other writes onto ``<body>`` the counts of
images decoded and script errors (``data-images-total``, ``data-images-ok``,
``data-script-errors``) for a headless browser to check.
"""

from __future__ import annotations

import base64
import datetime as dt
import fnmatch
import html
import os
from dataclasses import dataclass

import pandas as pd
import pyarrow.fs as pafs

from analysis import figures, tables
from analysis.aggregate import (
    CELL,
    DISENTANGLEMENT_METRICS,
    GENERALISATION_SCORES,
    TRANSFER_SCORES,
    add_derived_columns,
    best_seed_metric,
    cell_label,
    correlation_table,
    finished_models,
    present,
)
from analysis.findings import FAIL_RATIO, findings
from analysis.loading import load_errors, load_history, load_trials
from analysis.schema import CONFIG_FIELDS, LOSS_TERMS
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


def trained_models(results: Results, figures_dir: str, *, max_models: int, with_checkpoints: bool,
                   progress=None):
    """Step 2: the figures of up to ``max_models`` models: (drawn, skipped, note)."""
    if max_models <= 0:
        return [], [], "Skipped (--max-models 0)."
    if any(is_remote(e) for e in results.experiments) and not with_checkpoints:
        return [], [], ("Checkpoint figures are not drawn for remote results unless asked "
                        "(--with-checkpoints): each checkpoint is downloaded.")
    from analysis.trained_models import draw_models  # torch, only when models are drawn
    drawn, skipped = draw_models(results.trials, results.experiments, figures_dir, max_models=max_models,
                                 progress=progress)
    return drawn, skipped, None


def tensorboard_links(results: Results, out_dir: str) -> pd.Series | None:
    """Step 3: each trial's TensorBoard folder as a link from the report: relative to the report
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


def write_html_report(experiment_dirs, out_dir: str, *, df: pd.DataFrame | None = None,
                      history: pd.DataFrame | None = None, max_models: int = 4, n_bootstrap: int = 1000,
                      command=None, with_checkpoints: bool = False, progress=None, found=None) -> str:
    """Write ``out_dir/report.html`` (and its PNGs under ``out_dir/figures``) for the experiments
    (folders or URIs such as ``s3://bucket/prefix/name``); returns the path of the HTML file.
    ``found``: the papers' findings (``analysis.findings.findings``), if the caller has them already."""
    results = read_results(experiment_dirs, df, history)
    figures_dir = os.path.join(out_dir, "figures")
    os.makedirs(figures_dir, exist_ok=True)
    table = correlation_table(results.trials, metrics=results.metrics, scores=results.scores,
                              n_bootstrap=n_bootstrap)
    drawn, skipped, models_note = trained_models(results, figures_dir, max_models=max_models,
                                                 with_checkpoints=with_checkpoints, progress=progress)
    df, values = results.trials, results.metrics + results.scores
    parts = [
        findings_section(findings(df) if found is None else found, figures_dir, drawn),
        summary_section(df, results.errors, skipped, table, results.experiments),
        trials_section(df, values, tensorboard_links(results, out_dir)),
        seeds_section(df, values, results.errors),
        correlations_section(table, figures_dir, n_bootstrap),
        m21_nll_section(df, figures_dir),
        d21_transfer_section(df, table, figures_dir),
        m22_diagnosis_section(df, figures_dir),
        training_curves_section(df, results.history, figures_dir),
        groups_section(df, values, figures_dir),
        trained_models_section(drawn, skipped, models_note),
        configuration_section(df, results.experiments, command, spec_files(results.experiments)),
    ]
    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    names = ", ".join(experiment_name(e) for e in results.experiments)
    intro = (f"<p>{len(df)} trials from {len(results.experiments)} experiment(s): "
             f"{html.escape(names)}; generated {generated}.</p>")
    path = os.path.join(out_dir, REPORT_FILE)
    with open(path, "w", encoding="utf-8") as f:
        f.write(page(f"disgen report: {names}", [intro] + [p for p in parts if p]))
    return path


STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 1500px; }
.scroll { max-height: 480px; max-width: 100%; overflow: auto; border: 1px solid #ddd; margin: 0.5em 0 1.5em; }
table { border-collapse: collapse; font-size: 12px; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; white-space: nowrap; }
th { background: #eee; position: sticky; top: 0; cursor: pointer; }
th.sorted-asc::after { content: " ▲"; } th.sorted-desc::after { content: " ▼"; }
td:first-child, th:first-child { text-align: left; }
figure { display: inline-block; margin: 0.5em; vertical-align: top; }
figcaption { font-size: 12px; color: #555; max-width: 700px; }
img { max-width: 100%; border: 1px solid #ddd; }
pre { background: #f6f6f6; padding: 0.5em; font-size: 12px; overflow-x: auto; }
.note { color: #a40; }
.summary li { margin: 0.2em 0; }
"""

SCRIPT = """
var scriptErrors = 0;
window.addEventListener("error", function () { scriptErrors++; });
function sortTable(th) {
  var table = th.closest("table"), body = table.tBodies[0];
  var column = Array.prototype.indexOf.call(th.parentNode.children, th);
  var ascending = !th.classList.contains("sorted-asc");
  Array.prototype.forEach.call(th.parentNode.children, function (h) {
    h.classList.remove("sorted-asc", "sorted-desc");
  });
  th.classList.add(ascending ? "sorted-asc" : "sorted-desc");
  var rows = Array.prototype.slice.call(body.rows);
  function key(row) {
    var text = row.cells[column] ? row.cells[column].textContent.trim() : "";
    var number = parseFloat(text.replace("\\u2212", "-"));
    return isNaN(number) ? text : number;
  }
  rows.sort(function (a, b) {
    var x = key(a), y = key(b);
    if (typeof x === "number" && typeof y === "number") { return ascending ? x - y : y - x; }
    if (typeof x === "number") { return -1; }
    if (typeof y === "number") { return 1; }
    return ascending ? String(x).localeCompare(String(y)) : String(y).localeCompare(String(x));
  });
  rows.forEach(function (row) { body.appendChild(row); });
}
document.addEventListener("click", function (event) {
  var th = event.target.closest && event.target.closest("table.sortable th");
  if (th) { sortTable(th); }
});
window.addEventListener("load", function () {
  var images = document.images, ok = 0;
  for (var i = 0; i < images.length; i++) {
    if (images[i].complete && images[i].naturalWidth > 0) { ok++; }
  }
  document.body.setAttribute("data-images-total", images.length);
  document.body.setAttribute("data-images-ok", ok);
  document.body.setAttribute("data-script-errors", scriptErrors);
});
"""


def html_image(path: str, caption: str) -> str:
    with open(path, "rb") as f:
        data = base64.b64encode(f.read()).decode("ascii")
    alt = html.escape(os.path.basename(path))
    return (
        f'<figure><img alt="{alt}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def html_table(df: pd.DataFrame, *, links: dict[str, str] | None = None) -> str:
    """A sortable table in its own scrolling box. ``links`` maps a column to the column that holds
    each row's link target (relative URL): that column's cells become links."""
    shown = pd.DataFrame({c: df[c].astype(object).map(_cell) for c in df.columns}, index=df.index)
    if links:
        for column, target in links.items():
            text = df[column].astype(object).map(_cell)
            href = df[target].astype(object).map(
                lambda v: None if pd.isna(v) else html.escape(str(v), quote=True))
            shown[column] = [t if h is None else f'<a href="{h}/">{t}</a>' for t, h in zip(text, href)]
    body = shown.to_html(index=False, border=0, escape=False, classes="sortable")
    return f'<div class="scroll">{body}</div>'


def _cell(value) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 1e6 else f"{value:.4g}"
    return html.escape(str(value))


def note(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


def page(title: str, sections: list[str]) -> str:
    body = "".join(f"<section>{s}</section>" for s in sections)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{html.escape(title)}</title>
<link rel="icon" href="data:,">
<style>{STYLE}</style>
<script>{SCRIPT}</script>
</head><body>
<h1>disgen report</h1>
{body}
</body></html>
"""


READOUTS = {"gbt": "GBT", "mlp": "MLP"}


def _path(figures_dir: str, name: str) -> str:
    return os.path.join(figures_dir, name.replace("/", "_").replace(" ", "_").replace(",", "_")
                        .replace("=", "-"))


FOREST_CAPTION = (
    "Each split's held-out / in-distribution NLL ratio (geometric mean, 95% interval, log scale): red where "
    "the paper expects failure, blue the recombination-to-element control; hollow grey, the test/train "
    "ratio (context); dashed, the {bar:g}× bar. Right, where recorded: the rendering judge's accuracy on "
    "held-out minus in-distribution reconstructions.")
SCATTER_CAPTION = (
    "DCI disentanglement against OOD1 transfer error per model, coloured by supervision group, each group "
    "with its own least-squares line: the verdict reads the relation within the groups, not the gap "
    "between them.")


JUDGED_CAPTION = (
    "{label}: held-out ground truth (top) and the model's {what} (bottom), captioned with what the "
    "rendering judge reads (red: a rule factor read wrong; “seen”: read as a training combination)")
# which drawn models a finding shows: the ground-truth decoder's finding its decoders' renderings,
# the end-to-end finding its VAEs' reconstructions
FINDING_TASKS = {"m21_ground_truth_decoder": "ground_truth_decoder", "m21_held_out": "vae",
                 "m22_diagnosis": "composition"}
WHAT_IS_DRAWN = {"ground_truth_decoder": "renderings of the true factor values",
                 "composition": "predictions of them as targets composed from training images",
                 "vae": "reconstructions"}


def finding_figures(finding, figures_dir: str, name: str, drawn=()) -> str:
    """A finding's evidence as pictures, beside its numbers: for a reconstruction finding, each
    split's ratio interval beside its control's (a forest plot, with the rendering judge's gap where
    recorded) and, from the report's drawn models (``drawn``), each split's held-out ground truth
    beside the model's output with what the judge read (M21's Fig. 2); for D21, DCI against each
    OOD1 transfer error coloured by supervision group, each group with its own fit."""
    parts = []
    table = finding.table
    if "ratio" in table.columns and pd.to_numeric(table["ratio"], errors="coerce").notna().any():
        path = figures.ratio_forest(table, _path(figures_dir, f"finding_{name}_forest.png"), bar=FAIL_RATIO)
        parts.append(html_image(path, FOREST_CAPTION.format(bar=FAIL_RATIO)))
    task = FINDING_TASKS.get(name)
    if task and {"dataset", "split"} <= set(table.columns):
        splits = set(zip(table["dataset"].astype(str), table["split"].astype(str)))
        what = WHAT_IS_DRAWN[task]
        for model in drawn:
            if model.task == task and (model.dataset, model.split) in splits and "judged" in model.figures:
                parts.append(html_image(model.figures["judged"], JUDGED_CAPTION.format(
                    label=f"{model.split} · {model.label}", what=what)))
    points = getattr(finding, "points", pd.DataFrame())
    scores = [c for c in points.columns if c.startswith("transfer_")] if not points.empty else []
    if scores and "dci_disentanglement" in points.columns:
        path = figures.grouped_scatter(points, _path(figures_dir, f"finding_{name}_scatter.png"),
                                       x="dci_disentanglement", ys=scores, group="supervision")
        parts.append(html_image(path, SCATTER_CAPTION))
    return "".join(parts)


def findings_section(found, figures_dir: str | None = None, drawn=()) -> str:
    """The papers' headline findings (analysis.findings): the paper's statement, ✓/✗/?, the
    numbers behind each and its evidence as pictures (:func:`finding_figures`, where
    ``figures_dir`` is given), and its precondition with whether it held (the readout accuracy
    per factor behind it)."""
    if not found:
        return ""
    body = ["<h2>Findings</h2><p>Each paper statement beside what these results show: "
            "✓ reproduced, ✗ not reproduced, ? inconclusive at this scale (the rules: docs/analysis.md). "
            "A split counts only where its precondition holds: the models learned, on their training "
            "images, the factors it recombines.</p>"]
    for k, f in enumerate(found):
        body.append(f"<h3>{f.symbol} {html.escape(f.study)}, {html.escape(f.source)}: "
                    f"{html.escape(f.status)}</h3><p><b>The paper:</b> {html.escape(f.paper)}</p>"
                    f"<p><b>Here:</b> {html.escape(f.result)}</p>"
                    + (f"<p><b>Note:</b> {html.escape(f.note)}</p>" if f.note else ""))
        if not f.table.empty:
            body.append(html_table(f.table))
        if figures_dir is not None:
            body.append(finding_figures(f, figures_dir, getattr(f, "name", "") or f"finding{k + 1}", drawn))
        if f.precondition:
            body.append(f"<p><b>Precondition</b> (fixed before any result): {html.escape(f.precondition)}</p>"
                        f"<p><b>Did it hold?</b> {html.escape(f.precondition_result)}</p>")
        if not f.readout.empty:
            body.append("<p>The readout per factor behind it (per split and factor: its kind and score, the "
                        "models read and how many learned it, the mean, lowest and highest score, chance "
                        "and the bar):</p>" + html_table(f.readout))
    return "\n".join(body)


def summary_section(df, errors, skipped, correlations, experiments) -> str:
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


def trials_section(df, values, links: pd.Series | None) -> str:
    frame = tables.trials_frame(df, values)
    if links is not None and "trial_key" in frame.columns:
        frame = frame.assign(_link=links.reindex(frame.index))
        body = html_table(frame.drop(columns=["tensorboard_dir"], errors="ignore"),
                          links={"trial_key": "_link"}).replace("<th>_link</th>", "<th>link</th>")
    else:
        body = html_table(frame)
    return (f"<h2>Trials ({len(df)})</h2><p>One row per trained model; click a key to open its "
            "TensorBoard folder, a header to sort.</p>" + body)


def seeds_section(df, values, errors) -> str:
    """One row per configuration: its seeds, and per value the mean ± sd over seeds, after the
    value at the most disentangled seed (what Montero et al. 2021 report) where seeds vary."""
    metric = best_seed_metric(df) if "seed" in df.columns and df["seed"].nunique() >= 2 else None
    best = (f"Each cell: the value at the seed with the highest {metric} (<b>best seed by {metric}</b>, "
            "what Montero et al. 2021 report), then the mean ± sd over seeds. ") if metric else ""
    parts = ["<h2>Seeds</h2>", f"<p>Per configuration. {best}The mean ± sd is over the seeds with a value "
             "(one value where one seed has it); a seed whose values are all missing failed.</p>",
             html_table(tables.seed_table(df, values, best_seed_by=metric))]
    if not errors.empty:
        parts.append(f"<h3>Models that did not finish ({len(errors)})</h3>"
                     "<p>Failed (with the error) or stopped early by ASHA: they have a row in "
                     "<code>trials.parquet</code> with their settings but no metrics, and no table or "
                     "figure counts them.</p>" + html_table(errors))
    return "\n".join(parts)


def correlations_section(table, figures_dir, n_bootstrap) -> str:
    body = [
        "<h2>Spearman correlations</h2>",
        "<p>Spearman ρ of each disentanglement metric against each generalisation and transfer score "
        f"across trials, with percentile-bootstrap 95% intervals ({n_bootstrap} resamples); "
        "n is the number of trials with both values. Lower NLL and lower transfer MAE are better, "
        "so a negative ρ means more disentangled models generalise better.</p>",
    ]
    shown = table[table["rho"].notna()]
    dropped = len(table) - len(shown)
    if shown.empty:
        body.append(note("No correlation can be computed: each needs at least 3 trials with both values, "
                         "and values that differ."))
        return "\n".join(body)
    cell = [c for c in CELL if c in shown.columns]  # never pooled across datasets and splits
    for key, part in shown.groupby([*cell, "group_by", "group"], sort=False, dropna=False, observed=True):
        group_by, group = key[-2:]
        where = cell_label(part.iloc[0], cell)
        name = "all trials" if group_by == "all" else f"{group_by} = {group}"
        name += f" ({where})" if where else ""
        path = _path(figures_dir, f"spearman_{where}_{group_by}_{group}.png")
        body.append(html_image(figures.spearman_heatmap(part, path, title=f"Spearman ρ, {name}"),
                               f"Spearman ρ, {name} (D21 Figs 4–6, right)"))
    if dropped:
        body.append(f"<p>{dropped} of {len(table)} metric-and-score rows are left out: they need at least "
                    "3 trials with both values, and values that differ.</p>")
    body.append(html_table(tables.correlation_rows(shown)))
    return "\n".join(body)


def m21_nll_section(df, figures_dir) -> str:
    if not {"train_nll", "test_nll"} <= set(df.columns) or tables.numeric(df["test_nll"]).isna().all():
        return ""
    table = tables.nll_table(df)
    body = ["<h2>NLL on training and held-out images (M21)</h2>"]
    for best in (False, True):
        name = "nll_bars_best_seed.png" if best else "nll_bars_mean_sd.png"
        path = figures.nll_bars(table, _path(figures_dir, name), best_seed=best)
        which = "the best seed (highest disentanglement, as M21 reports)" if best else "mean ± sd over seeds"
        body.append(html_image(path, f"Per model and condition: NLL on training images against held-out "
                               f"images; {which}"))
    body.append(html_table(table))
    return "\n".join(body)


def d21_transfer_section(df, table, figures_dir) -> str:
    body = []
    overall = table[(table["group_by"] == "all") & table["rho"].notna()] if not table.empty else table
    for readout, name in READOUTS.items():
        part = overall[overall["y"].str.startswith(f"transfer_{readout}_")] if not overall.empty else overall
        if part.empty:
            continue
        path = _path(figures_dir, f"d21_heatmap_{readout}.png")
        body.append(html_image(figures.spearman_heatmap(part, path, title=f"Spearman ρ, {name} readout"),
                               f"Every disentanglement metric against the {name} readout's transfer "
                               "error under each OOD scenario (D21 Figs 4–6)"))
    for readout in READOUTS:
        error = f"transfer_{readout}_ood1_a"
        if {"dci_disentanglement", error} <= set(df.columns) and tables.numeric(df[error]).notna().any():
            colour = "supervision" if "supervision" in df.columns else "objective"
            path = figures.metric_vs_score(df, _path(figures_dir, f"dci_vs_{error}.png"),
                                           x="dci_disentanglement", y=error, colour_by=colour,
                                           title=f"DCI disentanglement against OOD1 error ({readout})")
            body.append(html_image(path, "DCI against OOD1-A transfer error (D21)"))
            break
    return "<h2>Transfer (D21)</h2>" + "\n".join(body) if body else ""


def m22_diagnosis_section(df, figures_dir) -> str:
    if "encoder_error_test" not in df.columns or tables.numeric(df["encoder_error_test"]).isna().all():
        return ""
    table = tables.diagnosis_table(df)
    path = figures.diagnosis_figure(table, _path(figures_dir, "m22_diagnosis.png"))
    return ("<h2>Encoder versus decoder (M22)</h2><p>Per split and model, means over seeds. The "
            "encoder's error is a linear readout's MAE; the decoder's is the NLL of decoding the codes "
            "the held-out images should have. A side fails when its held-out error exceeds 1.5× its "
            "training error (and by 0.05 MAE or 5%).</p>"
            + html_image(path, "Held-out/training error ratios per split (M22)")
            + html_table(table))


def training_curves_section(df, history, figures_dir) -> str:
    if history is None or history.empty:
        return ""
    terms = [t for t in LOSS_TERMS if t in history.columns and tables.numeric(history[t]).notna().any()]
    if not terms:
        return ""
    labels = pd.Series(tables.configuration_labels(df).to_numpy(), index=df["trial_key"].astype(object))
    labels = labels[~labels.index.duplicated()]
    path = figures.training_curves(history, labels, terms, _path(figures_dir, "training_curves.png"))
    return ("<h2>Training curves</h2>"
            + html_image(path, "Loss terms against step from history.parquet, per configuration"))


def groups_section(df, values, figures_dir) -> str:
    metrics = [m for m in values if m in df.columns]
    body = ["<h2>Metrics by group</h2>"]
    for by in ("supervision", "condition", "architecture"):
        # supervision always (D21's violins); the others only where they split the trials
        if by in df.columns and df[by].nunique(dropna=True) >= (1 if by == "supervision" else 2):
            path = figures.violins_by(df, metrics, _path(figures_dir, f"violins_{by}.png"), by=by)
            body.append(html_image(path, f"Every metric and score by {by} (violins where a group "
                                   "has spread; dots are trials)"))
    if {"split", "train_nll", "test_nll"} <= set(df.columns):
        for metric in [m for m in ("d_score", "dci_disentanglement", "mig") if m in metrics]:
            path = figures.disentanglement_vs_nll(df, _path(figures_dir, f"{metric}_vs_nll.png"), metric)
            body.append(html_image(path, f"{metric} against train and held-out NLL (M21 Fig. 3)"))
    return "\n".join(body)


def trained_models_section(drawn, skipped, why: str | None) -> str:
    body = ["<h2>Trained models</h2>"]
    if why:
        body.append(note(why))
    captions = {
        "reconstructions": "Training and held-out images (top rows) and reconstructions",
        "judged": "Held-out ground truth (top) and reconstructions (bottom), captioned with what the "
                  "rendering judge reads from each reconstruction (red: a rule factor read wrong; "
                  "“seen”: read as a training combination)",
        "traversal": "Latent traversal: each row moves one code from −2 to +2 around a training image",
        "hinton": "Hinton diagram of the importance matrix (codes × factors)",
    }
    for model in drawn:
        events = model.events
        body.append(f"<h3>{html.escape(model.trial_key)} · {html.escape(model.label)}</h3>"
                    f"<p>TensorBoard folder <code>{html.escape(str(model.tensorboard_dir))}</code>: "
                    f"{events.get('events', 0)} events, last step {events.get('last_step')}.</p>")
        body.extend(html_image(model.figures[k], captions[k]) for k in captions if k in model.figures)
    if skipped:
        rows = pd.DataFrame([{"trial_key": s.trial_key, "model": s.label, "why": s.reason} for s in skipped])
        body.append(f"<h3>Skipped, and why ({len(skipped)})</h3>" + html_table(rows))
    return "\n".join(body)


def configuration_section(df, experiments, command, spec_files) -> str:
    config_columns = [f.name for f in CONFIG_FIELDS
                      if f.name in df.columns and f.name != "config" and df[f.name].notna().any()]
    body = [
        "<h2>Configuration</h2>",
        "<p>Command: <code>" + html.escape(" ".join(command or ["(called from Python)"])) + "</code></p>",
        "<p>Experiments: " + ", ".join(f"<code>{html.escape(str(d))}</code>" for d in experiments) + "</p>",
        "<h3>Every trial's configuration</h3><p>(Each trial's whole configuration, as JSON, is the "
        "<code>config</code> column of <code>trials.parquet</code>.)</p>",
        html_table(df[config_columns]),
    ]
    for path, text in spec_files:
        body.append(f"<h3>{html.escape(path)}</h3><pre>{html.escape(text)}</pre>")
    return "\n".join(body)
