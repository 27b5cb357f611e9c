"""Figures, as PNG files or image arrays. matplotlib runs headless (Agg)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def reconstruction_grid(originals: np.ndarray, reconstructions: np.ndarray) -> np.ndarray:
    """Originals (top row) above their reconstructions (bottom row), as one (C, H, W) float image
    in [0, 1] with a 2-pixel grey border between tiles. Inputs: (N, C, H, W), uint8 or float."""
    def as_float(a):
        a = np.asarray(a)
        return a.astype(np.float32) / 255.0 if a.dtype == np.uint8 else a.astype(np.float32)

    rows = [as_float(originals), as_float(reconstructions)]
    n, c, h, w = rows[0].shape
    pad = 2
    grid = np.full((c, 2 * h + 3 * pad, n * w + (n + 1) * pad), 0.5, np.float32)
    for r, images in enumerate(rows):
        for i, image in enumerate(images):
            top, left = pad + r * (h + pad), pad + i * (w + pad)
            grid[:, top:top + h, left:left + w] = image
    return grid


def disentanglement_vs_nll(df: pd.DataFrame, path: str, metric: str = "d_score") -> str:
    """Montero et al. 2021 Figure 3: disentanglement (x) against train and test NLL (y), one
    panel each, coloured by held-out condition and marked by β. Writes a PNG to ``path``."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    conditions = sorted(df["split"].dropna().unique())
    colours = dict(zip(conditions, plt.cm.tab10.colors))
    markers = dict(zip(sorted(df["beta"].dropna().unique()), "osD^v<>p*h"))
    for ax, column, title in zip(axes, ["train_nll", "test_nll"], ["train", "test (held out)"]):
        for (split, beta), group in df.groupby(["split", "beta"]):
            ax.scatter(group[metric], group[column], color=colours[split], marker=markers[beta],
                       s=60, edgecolor="black", linewidth=0.5, label=f"{split}, β={beta:g}")
        ax.set_xlabel({"d_score": "D-score (Lasso, M21)",
                       "dci_disentanglement": "DCI disentanglement"}.get(metric, metric))
        ax.set_ylabel("NLL per image (nats)")
        ax.set_title(f"Reconstruction, {title}")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
