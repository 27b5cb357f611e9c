"""M21's Fig. 2 for the ground-truth decoder (issue 40, item 9): its renderings of held-out factor
values beside the ground truth, captioned with what the rendering judge reads, drawn from its final
checkpoint and shown under the decoder's finding; a report's few pictures cover every split."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_findings import RATIOS, decoders
from test_findings_figures import images

from analysis import figures
from analysis import findings as F
from analysis import trained_models as T
from analysis.html_report import findings_section
from data_pipeline import factor_space, get_split
from models import ModelConfig, build_task_model
from models.checkpoint import save_final

CONFIG = {"dataset": "circles", "split": "midpos", "n_images": None, "data_seed": 0,
          "task": "ground_truth_decoder", "architecture": "higgins", "objective": "vae", "seed": 3,
          "trial_key": "gtdec"}


def _saved_decoder(folder) -> object:
    space = factor_space("circles")
    classes = space.all_classes()
    train = get_split("circles", "midpos").train_test_indices(classes, space)[0]
    decoder = build_task_model(ModelConfig.from_dict({**CONFIG, "channels": 1}), classes, space, train)
    folder.mkdir()
    save_final(str(folder), [decoder.state_dict()], [5], {}, [[]], {"members": [CONFIG]})
    return decoder.eval()


@pytest.mark.slow  # Circles' 1,024 judge templates and one figure: about 3 s
def test_the_decoder_picture_shows_its_renderings_of_held_out_values(tmp_path, monkeypatch):
    from analysis.task_nll import ground_truth_renderings

    decoder = _saved_decoder(tmp_path / "checkpoint")
    drawn = {}
    monkeypatch.setattr(figures, "judged_strip", lambda truth, out, captions, ok, path, title="":
                        drawn.update(truth=truth, out=out, captions=captions, ok=ok) or path)
    pictures = T.task_figures(str(tmp_path / "checkpoint"), str(tmp_path / "figures"), "ground_truth_decoder",
                              n_images=5)
    assert pictures == {"judged": str(tmp_path / "figures" / "gtdec_judged.png")}
    space = factor_space("circles")
    captions = drawn["captions"]
    assert len(captions) == 5 and all(c.startswith("posX=") and " posY=" in c for c in captions)
    # every truth image is a held-out grid point (midpos: both positions in the middle), and the
    # bottom row is the saved decoder's own rendering of that point's factor values
    from data_pipeline.datasets import render_stored

    held = get_split("circles", "midpos").test_grid_indices(space)
    grid = render_stored("circles", space.classes_of(held))
    rows = [int(np.flatnonzero((grid == image).all(axis=(1, 2, 3)))[0]) for image in drawn["truth"]]
    values = space.raw_values(space.classes_of(held[rows]))
    np.testing.assert_allclose(drawn["out"], ground_truth_renderings(decoder, values), rtol=0, atol=1e-6)
    monkeypatch.undo()  # the real figure, once
    real = T.task_figures(str(tmp_path / "checkpoint"), str(tmp_path / "real"), "ground_truth_decoder",
                           n_images=3)
    assert open(real["judged"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_report_draws_one_model_a_split_before_a_second_of_any():
    df = pd.DataFrame({"dataset": ["dsprites"] * 6 + ["circles"],
                       "split": ["blank_side"] * 3 + ["shape2tx"] * 2 + ["leave1out", "midpos"],
                       "task": ["ground_truth_decoder"] * 6 + ["composition"], "seed": [0, 1, 2, 0, 1, 0, 0]})
    assert list(T.spread(df, 3)["split"]) == ["blank_side", "shape2tx", "leave1out"]
    assert list(T.spread(df, 5)["seed"]) == [0, 0, 0, 0, 1]
    assert T.spread(df, 0).empty and len(T.spread(df, 99)) == len(df)


def test_the_decoder_finding_shows_each_splits_picture_under_its_numbers(tmp_path):
    png = tmp_path / "k_judged.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 16)
    drawn = [T.DrawnModel("k", "vae β=1 seed 0", None, {"judged": str(png)}, {}, "dsprites", split,
                          "ground_truth_decoder") for split in ("blank_side", "shape2tx")]
    drawn.append(T.DrawnModel("v", "vae", None, {"judged": str(png)}, {}, "dsprites", "blank_side", "vae"))
    found = [f for f in F.findings(decoders({**RATIOS, "leave1out": 1.0}))
             if f.name == "m21_ground_truth_decoder"]
    page = findings_section(found, None, drawn)
    assert "<img" not in page  # no figures folder: the numbers alone
    page = findings_section(found, str(tmp_path), drawn)
    shown = page.count('alt="k_judged.png"')
    assert shown == 2 and 'alt="v_judged.png"' not in page  # its decoders only, one a split
    assert "renderings of the true factor values" in page and "blank_side · vae β=1 seed 0" in page
    assert set(images(page)) == {"finding_m21_ground_truth_decoder_forest.png", "k_judged.png"}


@pytest.mark.slow  # Circles' 1,024 images and judge templates: about 3 s
def test_a_composition_nets_picture_shows_its_predictions_of_held_out_targets(tmp_path, monkeypatch):
    from analysis.task_nll import composition_predictions
    from data_pipeline import load_procedural
    from models.composition import TripletSampler

    config = {**CONFIG, "task": "composition", "architecture": "kim", "decoder": "sbd3",
              "latent_op": "fixed_interpolation", "trial_key": "comp"}
    data = load_procedural("circles")
    train = get_split("circles", "midpos").train_test_indices(data.classes, data.factor_space)[0]
    net = build_task_model(ModelConfig.from_dict({**config, "channels": 1}), data.classes, data.factor_space,
                           train)
    (tmp_path / "checkpoint").mkdir()
    save_final(str(tmp_path / "checkpoint"), [net.state_dict()], [5], {}, [[]], {"members": [config]})
    drawn = {}
    monkeypatch.setattr(figures, "judged_strip", lambda truth, out, captions, ok, path, title="":
                        drawn.update(truth=truth, out=out, captions=captions) or path)
    pictures = T.task_figures(str(tmp_path / "checkpoint"), str(tmp_path / "figures"), "composition",
                              n_images=4)
    assert pictures == {"judged": str(tmp_path / "figures" / "comp_judged.png")}
    assert drawn["truth"].shape == drawn["out"].shape == (4, 1, 64, 64) and len(drawn["captions"]) == 4
    # the bottom row is the saved net's prediction of each held-out image, composed from two grid
    # images that differ in one factor, as its evaluation composes them
    space = data.factor_space
    held = get_split("circles", "midpos").test_grid_indices(space)
    rows = [int(np.flatnonzero((data.images == image).all(axis=(1, 2, 3)))[0]) for image in drawn["truth"]]
    assert set(rows) <= set(held.tolist())
    sampler = TripletSampler(data.classes, np.arange(len(data.classes)))
    reference, transform, served, action = sampler.sample_onto_classes(data.classes[rows],
                                                                       np.random.default_rng([0, 7]))
    assert len(served) == 4
    expected = composition_predictions(net.eval(), data.images, reference, transform, action)
    np.testing.assert_allclose(drawn["out"], expected, rtol=0, atol=1e-6)
