"""Figures, as PNG files (matplotlib's Agg backend, headless): the papers' views from the results
tables alone (M21's scatter and NLL bars, D21's heat-maps, violins and transfer scatter, M22's
diagnosis, training curves), and a trained model's reconstructions, traversal and Hinton diagram."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.aggregate import cell_label, finished_only  # noqa: E402

MARKERS = "osD^v<>p*h"
_MAX_PANELS = 24  # facets beyond this are summarised in the title


def _save(fig, path: str, dpi: int = 100) -> str:
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def _grid(n: int, columns: int = 4, size=(3.6, 2.8)):
    columns = max(1, min(columns, n))
    rows = int(np.ceil(n / columns))
    fig, axes = plt.subplots(rows, columns, figsize=(size[0] * columns + 1.8, size[1] * rows + 0.6),
                             squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, axes.flat


def palette(n: int) -> list:
    """``n`` distinguishable colours: tab10 or tab20 where they suffice, else a colour map."""
    if n <= 10:
        return list(plt.cm.tab10.colors[:n])
    if n <= 20:
        return list(plt.cm.tab20.colors[:n])
    return [tuple(c) for c in plt.cm.turbo(np.linspace(0.05, 0.95, n))]


def legend_outside(fig, handles, labels, *, max_entries: int = 16, title: str | None = None) -> None:
    """A legend to the right of the axes, with at most ``max_entries`` entries; the rest are
    summarised in a last entry ("… and 12 more")."""
    if len(labels) > max_entries:
        hidden = len(labels) - (max_entries - 1)
        handles = list(handles[:max_entries - 1]) + [plt.Line2D([], [], linestyle="none")]
        labels = list(labels[:max_entries - 1]) + [f"… and {hidden} more"]
    labels = [label if len(label) <= 60 else label[:57] + "…" for label in labels]
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(0.81, 0.5), fontsize=7,
               frameon=False, title=title, title_fontsize=8)


@finished_only
def disentanglement_vs_nll(df: pd.DataFrame, path: str, metric: str = "d_score") -> str:
    """Montero et al. 2021 Figure 3: disentanglement (x) against train and test NLL (y), one
    panel each, coloured by held-out condition. β is the marker where there are at most 10
    values, and the marker size (larger β, larger marker) where there are more (an Optuna run).
    Any number of conditions: a colour map, and a legend outside the axes. Writes a PNG."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    # one colour per dataset and split: a split name (leave1out) exists on several datasets
    if "dataset" in df.columns and "split" in df.columns:
        split = pd.Series([cell_label(row) for _, row in df.iterrows()], index=df.index)
    elif "split" in df.columns:
        split = df["split"].astype(object).fillna("?")
    else:
        split = pd.Series("all", index=df.index)
    conditions = sorted(split.unique())
    colours = dict(zip(conditions, palette(len(conditions))))
    beta = pd.to_numeric(df["beta"], errors="coerce").astype(float) if "beta" in df.columns else pd.Series(
        np.nan, index=df.index)
    betas = sorted(beta.dropna().unique())
    few_betas = len(betas) <= len(MARKERS)
    markers = dict(zip(betas, MARKERS))
    if not few_betas:  # size by the rank of log β, 15 to 90 points²
        sizes = 15 + 75 * (np.log(beta.clip(lower=1e-12)).rank(pct=True).fillna(0.5))
    x = pd.to_numeric(df[metric], errors="coerce").astype(float)
    for ax, column, title in zip(axes, ["train_nll", "test_nll"], ["train", "test (held out)"]):
        y = pd.to_numeric(df[column], errors="coerce").astype(float)
        for condition in conditions:
            rows = (split == condition).to_numpy()
            if few_betas:
                for value in betas + [np.nan]:
                    match = beta.isna() if np.isnan(value) else beta == value
                    chosen = rows & match.to_numpy()
                    if chosen.any():
                        ax.scatter(x[chosen], y[chosen], color=colours[condition],
                                   marker=markers.get(value, "X"), s=40, edgecolor="black", linewidth=0.4)
            else:
                ax.scatter(x[rows], y[rows], color=colours[condition], s=sizes[rows], marker="o",
                           edgecolor="black", linewidth=0.3, alpha=0.8)
        ax.set_xlabel({"d_score": "D-score (Lasso, M21)",
                       "dci_disentanglement": "DCI disentanglement"}.get(metric, metric))
        ax.set_ylabel("NLL per image (nats)")
        ax.set_title(f"Reconstruction, {title}")
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], marker="o", linestyle="none", color=colours[c]) for c in conditions]
    labels = list(conditions)
    if few_betas and betas:
        handles += [plt.Line2D([], [], marker=markers[b], linestyle="none", color="grey") for b in betas]
        labels += [f"β={b:g}" for b in betas]
    elif betas:
        handles.append(plt.Line2D([], [], linestyle="none"))
        labels.append(f"β {betas[0]:g}–{betas[-1]:g}: size")
    legend_outside(fig, handles, labels, title="condition, β")
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    return _save(fig, path)


def hinton(matrix: np.ndarray, path: str, *, row_labels=None, column_labels=None,
           title: str = "Importance matrix", xlabel: str = "factor", ylabel: str = "code") -> str:
    """Hinton diagram of a non-negative (n_codes, n_factors) matrix: one white square per entry,
    its area proportional to the entry (the largest entry fills its cell). Writes a PNG."""
    matrix = np.asarray(matrix, dtype=float)
    if matrix.ndim != 2 or 0 in matrix.shape:
        raise ValueError(f"matrix must be a non-empty 2-D array (n_codes, n_factors); "
                         f"got shape {matrix.shape}.")
    if not np.all(np.isfinite(matrix)) or np.any(matrix < 0):
        raise ValueError("matrix must be finite and non-negative.")
    n_rows, n_columns = matrix.shape
    biggest = matrix.max() or 1.0
    fig, ax = plt.subplots(figsize=(max(4.0, 1.5 + 0.45 * n_columns), 1.5 + 0.45 * n_rows))
    ax.set_facecolor("grey")
    for (row, column), value in np.ndenumerate(matrix):
        side = np.sqrt(value / biggest) * 0.95
        ax.add_patch(plt.Rectangle((column - side / 2, row - side / 2), side, side, facecolor="white",
                                   edgecolor="white"))
    ax.set_xlim(-0.5, n_columns - 0.5)
    ax.set_ylim(n_rows - 0.5, -0.5)
    ax.set_aspect("equal")
    ax.set_xticks(range(n_columns), column_labels or range(n_columns), rotation=45, ha="right")
    ax.set_yticks(range(n_rows), row_labels or range(n_rows))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


@finished_only
def violins_by(df: pd.DataFrame, metrics: list[str], path: str, by: str = "supervision") -> str:
    """Violin plots of each metric (one panel each) across the values of column ``by``
    (D21's metrics by supervision). Groups with no finite value are left out. Writes a PNG."""
    metrics = [m for m in metrics if m in df.columns] or ["(none)"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(2.6 * len(metrics) + 1, 3.2), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        groups, labels = [], []
        if metric in df.columns and by in df.columns:
            for key, group in df.groupby(by, dropna=True, observed=True):
                values = pd.to_numeric(group[metric], errors="coerce").astype(float).to_numpy()
                values = values[np.isfinite(values)]
                if values.size:
                    groups.append(values)
                    labels.append(str(key))
        if groups:
            # a violin needs spread; a single value or a constant group is drawn as points only
            spread = [i for i, g in enumerate(groups) if g.size > 1 and np.ptp(g) > 0]
            if spread:
                ax.violinplot([groups[i] for i in spread], positions=[i + 1 for i in spread],
                              showmedians=True)
            for i, values in enumerate(groups):
                ax.scatter(np.full(values.size, i + 1.0), values, s=12, color="black", zorder=3)
            ax.set_xticks(range(1, len(labels) + 1), labels, rotation=30, ha="right")
        else:
            ax.text(0.5, 0.5, "no values", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel(by)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def spearman_heatmap(table: pd.DataFrame, path: str, *, title: str = "Spearman ρ") -> str:
    """Heat-map of Spearman ρ, disentanglement metrics (rows) against scores (columns), from the
    long table of :func:`analysis.aggregate.correlation_table` restricted to one group (D21
    Figs 4–6, right). Cells are annotated with ρ; NaN cells are blank. Writes a PNG."""
    if table.empty:
        matrix = pd.DataFrame([[np.nan]], index=["(none)"], columns=["(none)"])
    else:
        matrix = table.pivot_table(index="x", columns="y", values="rho", aggfunc="first", dropna=False)
        matrix = matrix.reindex(index=list(dict.fromkeys(table["x"])),
                                columns=list(dict.fromkeys(table["y"])))
    values = matrix.to_numpy(dtype=float)
    fig, ax = plt.subplots(figsize=(1.5 + 0.8 * values.shape[1], 1.2 + 0.45 * values.shape[0]))
    image = ax.imshow(np.ma.masked_invalid(values), cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
    for (row, column), value in np.ndenumerate(values):
        if np.isfinite(value):
            ax.text(column, row, f"{value:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if abs(value) > 0.6 else "black")
    ax.set_xticks(range(values.shape[1]), matrix.columns, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(values.shape[0]), matrix.index, fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.04)
    fig.tight_layout()
    return _save(fig, path)


def reconstruction_figure(panels: dict, path: str, title: str = "") -> str:
    """One PNG of reconstruction grids: ``panels`` maps a name ("train", "held out") to a (C, H, W)
    image in [0, 1], originals above reconstructions (``analysis.trained_models.reconstruction_grid``)."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.2 * len(panels)), squeeze=False)
    for ax, (name, grid) in zip(axes[:, 0], panels.items()):
        image = np.transpose(grid, (1, 2, 0))
        ax.imshow(image[:, :, 0] if image.shape[2] == 1 else np.clip(image, 0, 1), cmap="gray",
                  vmin=0, vmax=1)
        ax.set_title(name, fontsize=9)
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def judged_strip(truth: np.ndarray, reconstructions: np.ndarray, captions: list[str], right: list[bool],
                 path: str, title: str = "") -> str:
    """M21's Figure 2 with the rendering judge's reading: held-out ground truth (top row) above the
    model's reconstructions (bottom row), each column captioned with what the judge read from the
    reconstruction (green where it read every rule factor right, red where not). ``truth`` and
    ``reconstructions``: (N, C, H, W), uint8 or floats in [0, 1]."""
    def shown(image):
        scale = 255.0 if image.dtype == np.uint8 else 1.0
        image = np.transpose(np.asarray(image, dtype=np.float32) / scale, (1, 2, 0))
        return image[:, :, 0] if image.shape[2] == 1 else np.clip(image, 0, 1)

    n = len(truth)
    fig, axes = plt.subplots(2, n, figsize=(1.6 * n + 0.6, 3.9), squeeze=False)
    for column in range(n):
        for row, images in enumerate((truth, reconstructions)):
            ax = axes[row, column]
            ax.imshow(shown(images[column]), cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
        axes[1, column].set_xlabel(captions[column], fontsize=6,
                                   color="tab:green" if right[column] else "tab:red")
    axes[0, 0].set_ylabel("ground truth", fontsize=7)
    axes[1, 0].set_ylabel("reconstruction", fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return _save(fig, path, dpi=90)


def traversal_figure(images: np.ndarray, path: str, *, values=None, title: str = "Latent traversal") -> str:
    """Latent traversal: ``images`` of shape (n_codes, n_steps, C, H, W), row i showing the
    decoder's output as code i moves through ``values`` while the others stay fixed."""
    images = np.asarray(images, dtype=np.float32)
    n_codes, n_steps = images.shape[:2]
    fig, axes = plt.subplots(n_codes, n_steps, figsize=(0.8 * n_steps + 0.8, 0.8 * n_codes + 0.5),
                             squeeze=False)
    for (row, column), ax in np.ndenumerate(axes):
        image = np.transpose(images[row, column], (1, 2, 0))
        shown = image[:, :, 0] if image.shape[2] == 1 else np.clip(image, 0, 1)
        ax.imshow(shown, cmap="gray", vmin=0, vmax=1)
        ax.set_xticks([])
        ax.set_yticks([])
        if column == 0:
            ax.set_ylabel(f"z{row}", fontsize=7)
        if row == n_codes - 1 and values is not None:
            ax.set_xlabel(f"{values[column]:+.1f}", fontsize=6)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return _save(fig, path, dpi=80)


def _paired_bars(table: pd.DataFrame, path: str, bars, *, ylabel: str, title: str, height: float,
                 top: float, lines=()) -> str:
    """Per condition of ``table`` (a panel each) and model, two bars side by side: ``bars`` is two
    (column, sd column or None, colour, label); ``lines`` are (y, colour, style) reference lines."""
    conditions = list(dict.fromkeys(table["condition"]))
    shown = conditions[:_MAX_PANELS]
    fig, axes = _grid(len(shown), columns=3, size=(4.2, height))
    for ax, condition in zip(axes, shown):
        part = table[table["condition"] == condition]
        positions = np.arange(len(part))
        for offset, (column, sd, colour, label) in zip((-0.2, 0.2), bars):
            ax.bar(positions + offset, part[column], width=0.4, color=colour, label=label, capsize=2,
                   yerr=None if sd is None else part[sd].fillna(0).to_numpy(), error_kw={"linewidth": 0.8})
        for y, colour, style in lines:
            ax.axhline(y, color=colour, linewidth=0.6, linestyle=style)
        ax.set_xticks(positions, part["model"], rotation=40, ha="right", fontsize=7)
        ax.set_title(str(condition), fontsize=9)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    legend_outside(fig, *axes[0].get_legend_handles_labels())
    more = f"; first {len(shown)} of {len(conditions)} conditions" if len(conditions) > len(shown) else ""
    fig.suptitle(title + more, fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.8, top))
    return _save(fig, path, dpi=90)


def nll_bars(table: pd.DataFrame, path: str, *, best_seed: bool = False) -> str:
    """M21's bar chart from :func:`analysis.tables.nll_table`: per condition (one panel each) and
    model, the NLL on training images and on held-out images; mean ± sd over seeds, or the best
    seed's values (``best_seed``)."""
    which = "best seed (highest disentanglement)" if best_seed else "mean ± sd over seeds"
    bars = [(f"{side}_{'best' if best_seed else 'mean'}", None if best_seed else f"{side}_sd", colour, label)
            for side, colour, label in (("train", "#4c72b0", "training images"),
                                        ("test", "#dd8452", "held-out images"))]
    return _paired_bars(table, path, bars, ylabel="NLL (nats)", height=3.0, top=0.96,
                        title=f"NLL on training and held-out images, {which}")


@finished_only
def metric_vs_score(df: pd.DataFrame, path: str, *, x: str, y: str, colour_by: str | None = None,
                    title: str = "") -> str:
    """A scatter of column ``x`` against column ``y`` (D21: DCI against OOD1 error), coloured by
    ``colour_by``'s values (a colour map and a legend outside the axes for many)."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    xs = pd.to_numeric(df[x], errors="coerce").astype(float)
    ys = pd.to_numeric(df[y], errors="coerce").astype(float)
    groups = (df[colour_by].astype(object).fillna("?").astype(str) if colour_by in df.columns
              else pd.Series("all", index=df.index))
    names = sorted(groups.unique())
    for name, colour in zip(names, palette(len(names))):
        rows = (groups == name).to_numpy()
        ax.scatter(xs[rows], ys[rows], s=14, color=colour, label=name, alpha=0.75, edgecolor="none")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title or f"{x} against {y}", fontsize=9)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if len(names) > 1:
        legend_outside(fig, handles, labels, title=colour_by)
    fig.tight_layout(rect=(0, 0, 0.8 if len(names) > 1 else 1, 1))
    return _save(fig, path, dpi=90)


def diagnosis_figure(table: pd.DataFrame, path: str) -> str:
    """M22's diagnosis from :func:`analysis.tables.diagnosis_table`: per split (rows) and model,
    the held-out/training error ratio of the encoder and of the decoder; 1 means no loss on
    held-out combinations, and a ratio above 1.5 fails."""
    bars = [("encoder ratio", None, "#55a868", "encoder"), ("decoder ratio", None, "#c44e52", "decoder")]
    return _paired_bars(table, path, bars, ylabel="held-out / training error", height=2.8, top=0.95,
                        lines=[(1.0, "black", "-"), (1.5, "grey", "--")],
                        title="Encoder versus decoder on held-out combinations (M22); dashed: the 1.5× "
                              "threshold")


def training_curves(history: pd.DataFrame, labels: pd.Series, terms: list[str], path: str, *,
                    max_configurations: int = 12) -> str:
    """Loss terms (one panel each) against step for each configuration (a colour each): its seeds
    as thin lines and their mean as a thick one. ``labels`` maps a trial key to its configuration;
    the ``max_configurations`` with the most seeds are drawn, the rest counted in the title."""
    history = history.assign(_configuration=history["trial_key"].astype(object).map(labels))
    history = history.dropna(subset=["_configuration"])
    counts = history.groupby("_configuration", observed=True)["trial_key"].nunique()
    counts = counts.sort_values(ascending=False, kind="stable")
    chosen = list(counts.index[:max_configurations])
    colours = dict(zip(chosen, palette(len(chosen))))
    fig, axes = _grid(len(terms), columns=3, size=(4.0, 2.8))
    for ax, term in zip(axes, terms):
        part = history[history["_configuration"].isin(chosen)]
        values = pd.to_numeric(part[term], errors="coerce").astype(float)
        wide = pd.DataFrame({"step": part["step"].astype(float), "value": values,
                             "key": part["trial_key"].astype(object),
                             "configuration": part["_configuration"]}).dropna(subset=["value"])
        for configuration in chosen:
            one = wide[wide["configuration"] == configuration]
            if one.empty:
                continue
            table = one.pivot_table(index="step", columns="key", values="value", aggfunc="mean")
            ax.plot(table.index, table.to_numpy(), color=colours[configuration], linewidth=0.5, alpha=0.5)
            ax.plot(table.index, table.mean(axis=1), color=colours[configuration], linewidth=2,
                    label=configuration)
        ax.set_title(term, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=colours[c], linewidth=2) for c in chosen]
    legend_outside(fig, handles, chosen, max_entries=max_configurations)
    more = (f" ({len(chosen)} of {len(counts)} configurations, most seeds first)"
            if len(counts) > len(chosen) else "")
    fig.suptitle(f"Training curves: seeds thin, their mean thick{more}", fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.8, 0.95))
    return _save(fig, path, dpi=90)


CONTROL_CONDITION = "recombination_to_element"


def ratio_forest(table: pd.DataFrame, path: str, *, bar: float = 1.5, title: str = "") -> str:
    """A reconstruction finding's forest plot, from its table (``analysis.findings``): per split, the
    held-out / in-distribution NLL ratio (geometric mean, 95% interval, log scale), the splits where
    the paper expects failure in red beside their recombination-to-element control in blue, the
    test/train ratio as a hollow grey mark (context); a dashed line at ``bar``. Where the table has
    the rendering judge's gap (held-out − in-distribution accuracy), a second panel shows it per split
    with its interval."""
    rows = table[np.isfinite(pd.to_numeric(table.get("ratio"), errors="coerce"))] if "ratio" in table \
        else table.iloc[0:0]
    labels = [f"{r.get('split', '?')}" + (f" [{r['kinds']}]" if isinstance(r.get("kinds"), str) else "")
              + (" (context)" if r.get("evidence") == "context" else "") for _, r in table.iterrows()]
    has_gap = "render_gap" in table and pd.to_numeric(table["render_gap"], errors="coerce").notna().any()
    fig, axes = plt.subplots(1, 2 if has_gap else 1, squeeze=False,
                             figsize=(9.5 if has_gap else 6.5, 0.45 * len(table) + 1.4))
    y = np.arange(len(table))[::-1]
    control = (table["condition"].astype(str) == CONTROL_CONDITION).to_numpy() if "condition" in table \
        else np.zeros(len(table), bool)
    colours = np.where(control, "#4c72b0", "#c44e52")
    ax = axes[0][0]
    for column, low, high, style in (("ratio", "low", "high", "filled"), ("train_ratio", "train_low",
                                                                         "train_high", "context")):
        if column not in table:
            continue
        mid = pd.to_numeric(table[column], errors="coerce").to_numpy(float)
        lo = pd.to_numeric(table.get(low), errors="coerce").to_numpy(float)
        hi = pd.to_numeric(table.get(high), errors="coerce").to_numpy(float)
        shift = 0.0 if style == "filled" else -0.22
        for k in range(len(table)):
            if not np.isfinite(mid[k]):
                continue
            colour = colours[k] if style == "filled" else "grey"
            if np.isfinite(lo[k]) and np.isfinite(hi[k]):
                ax.plot([lo[k], hi[k]], [y[k] + shift] * 2, color=colour, lw=2 if style == "filled" else 1)
            ax.plot(mid[k], y[k] + shift, "o", color=colour, mfc=colour if style == "filled" else "none",
                    ms=6 if style == "filled" else 5)
    if len(rows):
        ax.set_xscale("log")
    ax.axvline(1.0, color="black", lw=0.8)
    ax.axvline(bar, color="grey", ls="--", lw=0.8)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("held-out NLL / in-distribution NLL (95% interval); hollow: / training NLL", fontsize=8)
    ax.grid(alpha=0.3, axis="x")
    if has_gap:
        ax = axes[0][1]
        gap = pd.to_numeric(table["render_gap"], errors="coerce").to_numpy(float)
        lo = pd.to_numeric(table["render_low"], errors="coerce").to_numpy(float)
        hi = pd.to_numeric(table["render_high"], errors="coerce").to_numpy(float)
        for k in range(len(table)):
            if np.isfinite(gap[k]):
                if np.isfinite(lo[k]):
                    ax.plot([lo[k], hi[k]], [y[k]] * 2, color=colours[k], lw=2)
                ax.plot(gap[k], y[k], "s", color=colours[k], ms=6)
        ax.axvline(0.0, color="black", lw=0.8)
        ax.set_yticks(y, [""] * len(y))
        ax.set_xlabel("rendering judge: held-out − in-distribution accuracy", fontsize=8)
        ax.grid(alpha=0.3, axis="x")
    fig.suptitle(title or "Reconstruction against its in-distribution control: red, the paper expects "
                          "failure; blue, the recombination-to-element control", fontsize=9)
    fig.tight_layout()
    return _save(fig, path, dpi=90)


def grouped_scatter(points: pd.DataFrame, path: str, *, x: str, ys: list[str], group: str,
                    title: str = "") -> str:
    """D21's evidence: ``x`` (DCI) against each of ``ys`` (OOD1 transfer errors), one panel each,
    coloured by ``group`` (supervision), each group with its own least-squares line: a relation
    within the groups shows as sloped lines, a gap between them as offset clouds."""
    ys = [c for c in ys if c in points.columns] or ys[:1]
    fig, axes = _grid(len(ys), columns=3)
    axes = list(axes)
    groups = points[group].astype(object).fillna("?").astype(str) if group in points else \
        pd.Series("all", index=points.index)
    names = sorted(groups.unique())
    xs = pd.to_numeric(points.get(x), errors="coerce").astype(float)
    for ax, column in zip(axes, ys):
        values = pd.to_numeric(points.get(column), errors="coerce").astype(float)
        for name, colour in zip(names, palette(len(names))):
            rows = ((groups == name) & xs.notna() & values.notna()).to_numpy()
            ax.scatter(xs[rows], values[rows], s=16, color=colour, label=name, alpha=0.8, edgecolor="none")
            if rows.sum() >= 2 and np.ptp(xs[rows]) > 0:
                slope, intercept = np.polyfit(xs[rows], values[rows], 1)
                line = np.linspace(xs[rows].min(), xs[rows].max(), 2)
                ax.plot(line, slope * line + intercept, color=colour, lw=1.5)
        ax.set_xlabel(x, fontsize=8)
        ax.set_ylabel(column, fontsize=8)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    legend_outside(fig, handles, labels, title=group)
    fig.suptitle(title or f"{x} against OOD1 transfer error, coloured by {group}, each group's own fit",
                 fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.8, 0.95))
    return _save(fig, path, dpi=90)
