"""The papers' own views, each from the results tables alone, as PNGs (matplotlib's Agg backend):

- M21: NLL on training against held-out images, per model and condition (bars; mean ± sd over
  seeds, or the best seed);
- D21: DCI disentanglement against the OOD1 transfer error (scatter);
- M22: the encoder-versus-decoder diagnosis per split (held-out/training error ratios);
- training curves from ``history.parquet``: seeds as thin lines, their mean as a thick one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.aggregate import finished_only
from analysis.figures import legend_outside, palette, plt

DPI = 90
_MAX_PANELS = 24  # facets beyond this are summarised in the title


def _save(fig, path: str) -> str:
    fig.savefig(path, dpi=DPI)
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


def nll_bars(table: pd.DataFrame, path: str, *, best_seed: bool = False) -> str:
    """M21's bar chart from :func:`analysis.tables.nll_table`: per condition (one panel each) and
    model, the NLL on training images and on held-out images; mean ± sd over seeds, or the best
    seed's values (``best_seed``)."""
    conditions = list(dict.fromkeys(table["condition"]))
    shown = conditions[:_MAX_PANELS]
    fig, axes = _grid(len(shown), columns=3, size=(4.2, 3.0))
    for ax, condition in zip(axes, shown):
        part = table[table["condition"] == condition]
        positions = np.arange(len(part))
        for offset, side, colour, label in ((-0.2, "train", "#4c72b0", "training images"),
                                            (0.2, "test", "#dd8452", "held-out images")):
            values = part[f"{side}_best"] if best_seed else part[f"{side}_mean"]
            errors = None if best_seed else part[f"{side}_sd"].fillna(0).to_numpy()
            ax.bar(positions + offset, values, width=0.4, yerr=errors, color=colour, label=label,
                   capsize=2, error_kw={"linewidth": 0.8})
        ax.set_xticks(positions, part["model"], rotation=40, ha="right", fontsize=7)
        ax.set_title(str(condition), fontsize=9)
        ax.set_ylabel("NLL (nats)", fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    legend_outside(fig, handles, labels)
    which = "best seed (highest disentanglement)" if best_seed else "mean ± sd over seeds"
    more = f"; first {len(shown)} of {len(conditions)} conditions" if len(conditions) > len(shown) else ""
    fig.suptitle(f"NLL on training and held-out images, {which}{more}", fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.8, 0.96))
    return _save(fig, path)


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
    return _save(fig, path)


def diagnosis_figure(table: pd.DataFrame, path: str) -> str:
    """M22's diagnosis from :func:`analysis.tables.diagnosis_table`: per split (rows) and model,
    the held-out/training error ratio of the encoder and of the decoder; 1 means no loss on
    held-out combinations, and a ratio above 1.5 fails."""
    conditions = list(dict.fromkeys(table["condition"]))[:_MAX_PANELS]
    fig, axes = _grid(len(conditions), columns=3, size=(4.2, 2.8))
    for ax, condition in zip(axes, conditions):
        part = table[table["condition"] == condition]
        positions = np.arange(len(part))
        ax.bar(positions - 0.2, part["encoder ratio"], width=0.4, color="#55a868", label="encoder")
        ax.bar(positions + 0.2, part["decoder ratio"], width=0.4, color="#c44e52", label="decoder")
        ax.axhline(1.0, color="black", linewidth=0.6)
        ax.axhline(1.5, color="grey", linewidth=0.6, linestyle="--")
        ax.set_xticks(positions, part["model"], rotation=40, ha="right", fontsize=7)
        ax.set_title(str(condition), fontsize=9)
        ax.set_ylabel("held-out / training error", fontsize=7)
    handles, labels = axes[0].get_legend_handles_labels()
    legend_outside(fig, handles, labels)
    fig.suptitle("Encoder versus decoder on held-out combinations (M22); dashed: the 1.5× threshold",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.8, 0.95))
    return _save(fig, path)


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
    return _save(fig, path)
