"""Tests for the HTML report: built from results and a real checkpoint, rendered in headless
Chromium, which must decode every image offline."""

import os
import re

import numpy as np
import pytest
import torch
from _chromium import CHROMIUM, open_page
from report_rows import trial, write_checkpoint, write_events

from analysis.report import main as report_main
from analysis.storage import write_results
from analysis.trained_models import load_checkpoint

pytestmark = pytest.mark.slow  # trains and reports a model in a module fixture: about 15 s


def checkpoint_of_k0(experiment):
    """Trial k0's final checkpoint and its TensorBoard file."""
    model = write_checkpoint(experiment / "blank_side-k0", "k0")
    write_events(experiment / "blank_side-k0")
    return model


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    experiment = tmp_path_factory.mktemp("experiment")
    rows = [
        trial(f"k{i}", split, objective, d, nll)
        for i, (split, objective, d, nll) in enumerate(
            [
                ("blank_side", "beta_vae", 0.1, 90),
                ("blank_side", "ada_gvae", 0.3, 80),
                ("leave1out", "beta_vae", 0.2, 60),
                ("leave1out", "ada_gvae", 0.4, 55),
                ("blank_side", "beta_vae", 0.5, 70),
            ]
        )
    ]
    write_results(experiment, rows)
    (experiment / "spec.yaml").write_text("preset: default  # <the spec>\n")
    model = checkpoint_of_k0(experiment)
    out = experiment / "report"
    assert report_main([str(experiment), "--out", str(out), "--n-bootstrap", "20", "--max-models", "1"]) == 0
    return experiment, out, model


def test_checkpoint_round_trip(report):
    experiment, _, model = report
    (checkpoint,) = experiment.glob("*/checkpoint_*/trainer.pt")
    loaded, config, data = load_checkpoint(str(checkpoint))
    assert config["trial_key"] == "k0" and len(data.images) == 400
    for a, b in zip(model.state_dict().values(), loaded.state_dict().values()):
        assert torch.equal(a, b)


def test_report_is_self_contained_and_holds_tables_figures_and_configuration(report):
    _, out, _ = report
    page = (out / "report.html").read_text()
    assert "<h2>Trials (5)</h2>" in page and "Spearman correlations" in page
    assert "supervision" in page and "weak" in page  # grouped by supervision
    assert "&lt;the spec&gt;" in page  # the experiment's spec file, escaped
    sources = re.findall(r'src="([^"]*)"', page)
    assert len(sources) >= 8 and all(s.startswith("data:image/png;base64,") for s in sources)
    assert not re.search(r'(href|src)="(https?:)?//', page)  # nothing is fetched
    for kind in ("reconstructions", "traversal", "hinton"):
        assert os.path.exists(out / "figures" / f"k0_{kind}.png")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_every_image_loads_in_headless_chromium(report, tmp_path):
    _, out, _ = report
    seen = open_page(out / "report.html", tmp_path / "profile")
    assert seen["images_total"] >= 8 and seen["images_ok"] == seen["images_total"]
    assert seen["script_errors"] == 0 and seen["console"] == []


def test_report_without_checkpoints_or_html(tmp_path, capsys):
    write_results(tmp_path, [trial("a", "blank_side", "beta_vae", 0.1, 90.0)])
    assert report_main([str(tmp_path), "--no-html"]) == 0
    assert not (tmp_path / "report.html").exists()
    assert report_main([str(tmp_path), "--n-bootstrap", "5"]) == 0
    page = (tmp_path / "report.html").read_text()
    assert "missing: no checkpoint_*/trainer.pt for trial a" in page and np.isfinite(len(page))
