"""A packed sweep: one Tune trial per pack, one row per model, the same numbers as unpacked, each
member trained and evaluated on its own split."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from tensorboard.backend.event_processing import event_accumulator

from sweeps.paper_grid import main

GRID = """\
description: two β-VAEs of different splits and a FactorVAE, small enough for a test
fixed: {dataset: dsprites, architecture: burgess, n_images: 600, data_seed: 0, batch_size: 8,
        report_every: 2, n_nll: 40, n_metric: 60, metrics: [d_score], lr: 0.001}
axes:
  model:
    - {objective: beta_vae, beta: 1.0, split: blank_side}
    - {objective: beta_vae, beta: 4.0, split: shape2tx}
    - {objective: factor_vae, gamma: 10.0, discriminator_width: 16, discriminator_layers: 2,
       split: blank_side}
scales:
  tiny: {steps: 6}
"""

COMPARED = ["train_nll", "test_nll", "d_score", "n_train_images", "n_test_images"]


def tensorboard_folders(experiment):
    return sorted({d for d, _, files in os.walk(experiment) for f in files if "tfevents" in f})


@pytest.mark.slow
def test_a_packed_sweep_stores_each_model_as_the_unpacked_sweep_does(ray_session, tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID)
    common = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path)]
    assert main([*common, "--name", "alone", "--pack-size", "1"]) == 0
    assert main([*common, "--name", "packed", "--pack-size", "2"]) == 0
    out = capsys.readouterr().out
    # the β-VAEs share a pack; the FactorVAE (another objective) gets its own
    assert "Packing 3 trials into 2 packs of up to 2 models" in out
    assert "3 of 3 trials finished" in out

    alone = pd.read_parquet(tmp_path / "alone" / "trials.parquet").set_index("trial_key").sort_index()
    packed = pd.read_parquet(tmp_path / "packed" / "trials.parquet").set_index("trial_key").sort_index()
    assert list(packed.index) == list(alone.index) and len(packed) == 3  # the same keys, once each
    assert (packed["objective"].sort_values().tolist() == ["beta_vae", "beta_vae", "factor_vae"])
    # the pack of β-VAEs mixes two splits: each member trains on its own split's rows and is
    # evaluated on its own split's held-out images, so on CPU, where a pack is a loop over its
    # members, it gets exactly the numbers it gets alone
    assert packed.groupby("split")["n_test_images"].nunique().to_dict() == {"blank_side": 1, "shape2tx": 1}
    assert packed["n_test_images"].nunique() == 2
    for column in COMPARED:
        np.testing.assert_allclose(packed[column], alone[column], rtol=1e-6, err_msg=column)
    histories = [pd.read_parquet(tmp_path / name / "history.parquet").sort_values(["trial_key", "step"])
                 .reset_index(drop=True) for name in ("alone", "packed")]
    assert len(histories[1]) == 3 * 3
    np.testing.assert_allclose(histories[1]["loss"], histories[0]["loss"], rtol=1e-6)

    # one TensorBoard folder per model, named as unpacked, with that model's own curves
    folders = tensorboard_folders(tmp_path / "packed")
    assert [os.path.basename(f) for f in folders] == [os.path.basename(f) for f in
                                                       tensorboard_folders(tmp_path / "alone")]
    for folder in folders:
        events = event_accumulator.EventAccumulator(folder)
        events.Reload()
        assert [e.step for e in events.Scalars("train/loss")] == [2, 4, 6]
        assert "eval/d_score" in events.Tags()["scalars"]
    # two Tune trials (the pack of two, and the FactorVAE alone under its own name), not three
    tune_trials = [d for d in os.listdir(tmp_path / "packed")
                   if os.path.exists(tmp_path / "packed" / d / "result.json")]
    assert sorted(d.split("-")[0] for d in tune_trials) == ["blank_side", "pack2"]

    # --resume finds both packs finished and re-runs nothing
    assert main([*common, "--name", "packed", "--pack-size", "2", "--resume"]) == 0
    again = pd.read_parquet(tmp_path / "packed" / "trials.parquet").set_index("trial_key").sort_index()
    pd.testing.assert_frame_equal(again, packed)


def test_pack_size_is_checked_before_ray_starts(tmp_path, capsys):
    common = ["--scale", "tiny", "--storage-path", str(tmp_path)]
    assert main([*common, "--pack-size", "zero"]) == 2
    assert "--pack-size: must be a whole number >= 1 or 'auto'; got 'zero'" in capsys.readouterr().err
    assert main([*common, "--pack-size", "4", "--scheduler", "asha"]) == 2
    assert "cannot be combined with --search optuna or --scheduler asha" in capsys.readouterr().err
