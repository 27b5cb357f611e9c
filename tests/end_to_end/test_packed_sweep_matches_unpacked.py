"""A packed sweep: one Tune trial per pack, one row per model, the same numbers as unpacked, each
member trained and evaluated on its own split; a model that diverges fails alone, with a row that
says so, packed or not."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from tensorboard.backend.event_processing import event_accumulator

from sweeps.paper_grid import main

GRID = """\
description: three β-VAEs of two splits, one that diverges (learning rate 1e9), and a FactorVAE, small
  enough for a test
fixed: {dataset: dsprites, architecture: burgess, n_images: 600, data_seed: 0, batch_size: 8,
        report_every: 2, n_nll: 40, n_metric: 60, metrics: [d_score], lr: 0.001}
axes:
  model:
    - {objective: beta_vae, beta: 1.0, split: blank_side}
    - {objective: beta_vae, beta: 4.0, split: shape2tx}
    - {objective: beta_vae, beta: 2.0, lr: 1.0e+9, split: blank_side}
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
    common = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--max-failures", "0"]
    # the diverging model's trial failed
    assert main([*common, "--name", "alone", "--pack-size", "1", "--verbose"]) == 1
    verbose = capsys.readouterr().out
    assert main([*common, "--name", "packed", "--pack-size", "3"]) == 0  # in a pack, its member failed alone
    out = capsys.readouterr().out
    # --verbose: Ray Tune's own output, its trials named as disgen names them, instead of the live view
    alone_dir = tmp_path / "alone"
    alone_names = [d for d in os.listdir(alone_dir) if (alone_dir / d / "result.json").exists()
                   and '"done": true' in (alone_dir / d / "result.json").read_text()]
    assert len(alone_names) == 3
    assert "Trial status:" in verbose and "Trial name" in verbose and " done " not in verbose
    assert all(f"Trial {name} completed after" in verbose for name in alone_names), verbose[-3000:]
    assert " done " in out and "Trial status:" not in out
    # the β-VAEs share a pack; the FactorVAE (another objective) gets its own
    assert "Packing 4 trials into 2 packs of up to 3 models" in out
    assert "3 of 4 trials finished" in out and "3 of 4 trials finished" in verbose

    alone = pd.read_parquet(tmp_path / "alone" / "trials.parquet").set_index("trial_key").sort_index()
    packed = pd.read_parquet(tmp_path / "packed" / "trials.parquet").set_index("trial_key").sort_index()
    assert list(packed.index) == list(alone.index) and len(packed) == 4  # the same keys, once each
    assert (packed["objective"].sort_values().tolist() == ["beta_vae"] * 3 + ["factor_vae"])
    # the diverging model: a failed row, alone (its Tune trial errored) and in the pack (its member
    # stopped; the others went on), with its settings and the error, and no metrics
    for frame in (alone, packed):
        failed = frame[frame["lr"] == 1e9]
        assert failed["status"].tolist() == ["failed"] and failed["beta"].tolist() == [2.0]
        assert "not finite" in failed["error"].iloc[0] and failed["test_nll"].isna().all()
        assert failed["trial_id"].notna().all()
        assert (frame.loc[frame["lr"] != 1e9, "status"] == "finished").all()
    # the step it reached: the pack saw it fail at step 2; alone, it failed before its first report
    assert packed.loc[packed["lr"] == 1e9, "trained_steps"].tolist() == [2]
    assert alone.loc[alone["lr"] == 1e9, "trained_steps"].isna().all()
    alone, packed = (frame[frame["status"] == "finished"] for frame in (alone, packed))
    # the pack of β-VAEs mixes two splits: each member trains on its own split's rows and is
    # evaluated on its own split's held-out images, so on CPU, where a pack is a loop over its
    # members, it gets exactly the numbers it gets alone
    assert packed.groupby("split", observed=True)["n_test_images"].nunique().to_dict() == {
        "blank_side": 1, "shape2tx": 1}
    assert packed["n_test_images"].nunique() == 2
    for column in COMPARED:
        np.testing.assert_allclose(packed[column], alone[column], rtol=1e-6, err_msg=column)
    histories = [pd.read_parquet(tmp_path / name / "history.parquet").sort_values(["trial_key", "step"])
                 .reset_index(drop=True) for name in ("alone", "packed")]
    assert len(histories[1]) == 3 * 3  # the finished models' reports
    np.testing.assert_allclose(histories[1]["loss"], histories[0]["loss"], rtol=1e-6)

    # one TensorBoard folder per model, named as unpacked, with that model's own curves
    folders = tensorboard_folders(tmp_path / "packed")
    assert [os.path.basename(f) for f in folders] == [os.path.basename(f) for f in
                                                       tensorboard_folders(tmp_path / "alone")]
    for folder in [str(tmp_path / "packed" / d) for d in packed["tensorboard_dir"]]:  # the finished ones
        events = event_accumulator.EventAccumulator(folder)
        events.Reload()
        assert [e.step for e in events.Scalars("train/loss")] == [2, 4, 6]
        assert "eval/d_score" in events.Tags()["scalars"]
    # two Tune trials (the pack of two, and the FactorVAE alone under its own name), not three
    tune_trials = [d for d in os.listdir(tmp_path / "packed")
                   if os.path.exists(tmp_path / "packed" / d / "result.json")]
    assert sorted(d.split("-")[0] for d in tune_trials) == ["blank_side", "pack3"]

    # --resume runs the failed model again (alone now: it diverges again, exit 1) and nothing else
    capsys.readouterr()
    assert main([*common, "--name", "packed", "--pack-size", "3", "--resume"]) == 1
    assert "3 of 4 models stored; running the rest" in capsys.readouterr().out
    again = pd.read_parquet(tmp_path / "packed" / "trials.parquet").set_index("trial_key").sort_index()
    pd.testing.assert_frame_equal(again[again["status"] == "finished"], packed)
    assert len(again) == 4 and again.loc[again["lr"] == 1e9, "status"].tolist() == ["failed"]
