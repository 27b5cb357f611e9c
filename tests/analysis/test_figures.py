"""Tests for analysis.figures: every figure writes a PNG, and bad input is refused."""

import numpy as np
import pandas as pd
import pytest

from analysis.aggregate import correlation_table
from analysis.figures import hinton, reconstruction_figure, spearman_heatmap, traversal_figure, violins_by
from analysis.trained_models import reconstruction_grid

PNG = b"\x89PNG\r\n\x1a\n"


def is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == PNG


def test_hinton(tmp_path):
    path = hinton(np.diag([1.0, 0.5, 0.0]), str(tmp_path / "h.png"), column_labels=["a", "b", "c"])
    assert is_png(path)
    with pytest.raises(ValueError, match="non-negative"):
        hinton(-np.ones((2, 2)), str(tmp_path / "bad.png"))
    with pytest.raises(ValueError, match=r"\(n_codes, n_factors\)"):
        hinton(np.ones(3), str(tmp_path / "bad.png"))


def test_violins_with_groups_single_values_and_missing_metrics(tmp_path):
    df = pd.DataFrame({"supervision": ["none", "none", "weak"], "mig": [0.1, 0.3, 0.2], "sap": np.nan})
    assert is_png(violins_by(df, ["mig", "sap", "absent"], str(tmp_path / "v.png")))


def test_spearman_heatmap(tmp_path):
    df = pd.DataFrame({"d_score": [0.1, 0.2, 0.3, 0.4], "test_nll": [4, 3, 2, 1.0], "mig": [1, 2, 3, 4.0]})
    table = correlation_table(df, n_bootstrap=10)
    assert is_png(spearman_heatmap(table, str(tmp_path / "s.png")))
    assert is_png(spearman_heatmap(table.iloc[:0], str(tmp_path / "empty.png")))


def test_reconstruction_and_traversal_figures(tmp_path):
    images = np.random.default_rng(0).integers(0, 256, (4, 1, 8, 8)).astype(np.uint8)
    panels = {"train": reconstruction_grid(images, images / 255.0),
              "held out": reconstruction_grid(images[:2], images[:2] / 255.0)}
    assert is_png(reconstruction_figure(panels, str(tmp_path / "r.png"), title="t"))
    rgb = np.random.default_rng(1).random((3, 5, 3, 8, 8))
    assert is_png(traversal_figure(rgb, str(tmp_path / "t.png"), values=np.linspace(-2, 2, 5)))
