"""The ground-truth decoder and the composition task run through a sweep like any model."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from sweeps.paper_grid import main

GRID = """\
description: M21's ground-truth decoder and composition task on the small Simple grid
fixed: {dataset: simple, n_images: null, split: midpos, data_seed: 0, batch_size: 8, report_every: 2,
        n_nll: 30, n_metric: 40, metrics: [d_score], lr: 0.001, objective: vae, beta: 1.0}
axes:
  model:
    - {task: ground_truth_decoder, architecture: burgess}
    - {task: composition, architecture: burgess, latent_op: linear}
scales:
  tiny: {steps: 4}
"""


@pytest.mark.slow
def test_ground_truth_decoder_and_composition_trials_get_rows(ray_session, tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID)
    assert main(["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "t"]) == 0
    assert "2 of 2 trials finished" in capsys.readouterr().out
    trials = pd.read_parquet(tmp_path / "t" / "trials.parquet")
    assert len(trials) == 2
    assert sorted(trials["task"]) == ["composition", "ground_truth_decoder"]
    assert trials["config"].map(lambda c: json.loads(c)["task"]).tolist() == trials["task"].tolist()
    # each is judged by its reconstructions of training and held-out images ...
    assert np.isfinite(trials[["train_nll", "test_nll"]]).all().all()
    assert (trials["n_test_images"] > 0).all()
    # ... the ground-truth decoder has no code of its own to score for disentanglement; the
    # composition network's encoder is scored as an autoencoder's, as M22's analysis reads it
    d_score = trials.set_index("task")["d_score"]
    assert np.isnan(d_score["ground_truth_decoder"]) and np.isfinite(d_score["composition"])
    history = pd.read_parquet(tmp_path / "t" / "history.parquet")
    assert sorted(history.groupby("trial_key")["step"].max()) == [4, 4]
