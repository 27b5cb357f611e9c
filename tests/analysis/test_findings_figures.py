"""The findings' evidence as pictures in the HTML report (issue 40, item 9): each reconstruction
finding's forest plot (every split's held-out / in-distribution ratio interval beside its control's,
the rendering judge's gap beside it) and D21's scatter coloured by supervision group with each
group's own fit, drawn from planted tables without Ray, a browser or a results folder."""

from __future__ import annotations

import base64
import re

import pandas as pd
import pytest
from test_findings import GOOD_JUDGE, RATIOS, d21_table, decoders, m21_table

from analysis import figures
from analysis import findings as F
from analysis.html_report import findings_section

PNG = b"\x89PNG\r\n\x1a\n"


def images(page: str) -> dict[str, bytes]:
    """The page's images: file name (alt) -> PNG bytes."""
    return {alt: base64.b64decode(data)
            for alt, data in re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)"', page)}


@pytest.mark.slow  # draws three figures: about 4 s
def test_each_finding_shows_its_evidence_beside_its_numbers(tmp_path):
    df = pd.concat([m21_table(RATIOS, judge=GOOD_JUDGE), decoders({**RATIOS, "leave1out": 1.0}),
                    d21_table(-0.2, mlp=True)])
    found = F.findings(df)
    assert [f.name for f in found] == ["m21_held_out", "m21_ground_truth_decoder", "m21_disentanglement",
                                       "d21_transfer"]
    page = findings_section(found, str(tmp_path))
    drawn = images(page)
    assert set(drawn) == {"finding_m21_held_out_forest.png", "finding_m21_ground_truth_decoder_forest.png",
                          "finding_d21_transfer_scatter.png"}  # the null is a correlation: no forest
    assert all(data.startswith(PNG) for data in drawn.values())
    # each picture sits under its finding's heading, after its numbers
    for name, source in (("m21_held_out", "§2.1, Fig. 3:"), ("m21_ground_truth_decoder", "§2.1, Fig. 2 to 4"),
                         ("d21_transfer", "§5, Fig. 4")):
        at = page.index(f'alt="finding_{name}_')
        heading = page.rindex("<h3>", 0, at)
        assert source in page[heading:page.index("</h3>", heading)]
        assert page.rindex('<div class="scroll">', 0, at) > heading  # after its table of numbers
    assert "blue the recombination-to-element control" in page and "each group with its own" in page
    # no figures folder: the numbers alone, as before
    assert "<img" not in findings_section(found)


def test_the_forest_plots_every_split_beside_its_control(tmp_path, monkeypatch):
    drawn = {}
    monkeypatch.setattr(figures, "_save", lambda fig, path, dpi=100: drawn.setdefault("fig", fig) and path)
    table = F.m21_ground_truth_decoder(decoders({**RATIOS, "leave1out": 1.0})).table
    figures.ratio_forest(table, str(tmp_path / "f.png"))
    ratio_axis, judge_axis = drawn["fig"].axes
    assert [t.get_text() for t in ratio_axis.get_yticklabels()] == list(table["split"])
    # per split: the ratio's interval and mark, and the context's (test/train) interval and mark
    assert len(ratio_axis.lines) == 2 * 2 * len(table) + 2  # and the lines at 1 and at the bar
    assert ratio_axis.get_xscale() == "log"
    control = [line for line in ratio_axis.lines if line.get_color() == "#4c72b0"]
    assert len(control) == 2  # leave1out, the control: its interval and its mark, in blue
    assert len(judge_axis.lines) == 2 * len(table) + 1


def test_the_d21_scatter_fits_each_group_on_its_own(tmp_path, monkeypatch):
    drawn = {}
    monkeypatch.setattr(figures, "_save", lambda fig, path, dpi=100: drawn.setdefault("fig", fig) and path)
    found = F.d21_transfer(d21_table(0.0, n=24, between=0.4, within=0.0, noise=0.05))
    figures.grouped_scatter(found.points, str(tmp_path / "s.png"), x="dci_disentanglement",
                            ys=["transfer_gbt_ood1_a", "transfer_gbt_ood1_b"], group="supervision")
    panel = drawn["fig"].axes[0]
    assert len(panel.collections) == 2 and len(panel.lines) == 2  # two groups, a fit line each
    points = found.points
    for line, group in zip(panel.lines, ("none", "weak")):
        rows = points[points["supervision"] == group]
        slope = (line.get_ydata()[1] - line.get_ydata()[0]) / (line.get_xdata()[1] - line.get_xdata()[0])
        expected = pd.Series(rows["transfer_gbt_ood1_a"]).cov(rows["dci_disentanglement"]) \
            / rows["dci_disentanglement"].var()
        assert abs(slope - expected) < 1e-9
