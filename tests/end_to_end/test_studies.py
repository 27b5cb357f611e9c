"""The studies and data sources end to end, each a whole tiny sweep on the tests' Ray: the dittadi2021
preset (Ada-GVAE on pairs beside the β-VAE, the readout per factor in trials.parquet), and on D21's
own robot-finger data (the authors' layout → ``data_pipeline.prepare`` with Ray Data → ``--dataset
finger``: rows with OOD1, OOD2-A and OOD2-B transfer errors); the ground-truth decoder and the
composition task run like any model; a real data file, its prepared copy and the generator give
the same numbers, each dataset materialised once on the node (their loading without Ray:
tests/sweeps/test_real_files_planned_by_reference.py)."""

from __future__ import annotations

import json
import textwrap
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from dataset_files import CIRCLES_GRID as GRID
from dataset_files import write_circles
from robot_finger_files import write_finger_datasets

from data_pipeline import get_split
from data_pipeline.datasets import factor_space
from data_pipeline.in_distribution import training_rows
from data_pipeline.node_cache import materialisations
from data_pipeline.prepare import prepare
from data_pipeline.robot_finger import SETS
from sweeps.paper_grid import main


@pytest.mark.slow
def test_dittadi2021_tiny_runs_ada_gvae_on_pairs(ray_session, tmp_path, capsys):
    assert main(["--preset", "dittadi2021", "--scale", "tiny", "--storage-path", str(tmp_path)]) == 0
    trials = pd.read_parquet(tmp_path / "dittadi2021-tiny" / "trials.parquet")
    assert len(trials) == 4 and set(trials["objective"]) == {"beta_vae", "ada_gvae"}
    assert trials["dataset"].eq("shapes3d").all() and trials["test_nll"].gt(0).all()
    # the readout accuracy per factor comes through Ray into trials.parquet (tiny skips DCI: the forest)
    assert trials["readout_estimator"].eq("random_forest").all() and trials["readout_n_test"].gt(0).all()
    assert trials["accuracy_object_hue"].between(0, 1).all() and trials["chance_object_hue"].eq(1 / 8).all()
    assert trials["r2_posX"].isna().all() and trials["r2_scale"].notna().all()  # posX: not a 3DShapes factor



SCENARIOS = ("ood1_a", "ood1_b", "ood1_c", "ood2", "ood2_a", "ood2_b")


@pytest.mark.slow
def test_tiny_dittadi2021_on_prepared_finger_sets_scores_ood1_and_both_ood2(ray_session, tmp_path, capsys):
    root = write_finger_datasets(tmp_path / "files", n=400, n_heldout=60, n_real=40)
    for name in SETS:  # the Ray Data build, on the tests' Ray
        manifest = prepare(name, tmp_path / "prepared" / name, rows_per_block=100, from_file=root)
        assert manifest["built_by"] == "ray.data"

    assert main(["--list", "--dataset", "finger", "--data-dir", str(tmp_path / "prepared")]) == 0
    listed = capsys.readouterr().out
    assert f"finger (prepared at {tmp_path / 'prepared' / 'finger'})" in listed
    assert "OOD2-B finger_real (prepared at" in listed

    argv = ["--preset", "dittadi2021", "--scale", "tiny", "--dataset", "finger",
            "--data-dir", str(tmp_path / "prepared"), "--storage-path", str(tmp_path / "runs")]
    assert main(argv) == 0
    trials = pd.read_parquet(tmp_path / "runs" / "dittadi2021-tiny" / "trials.parquet")
    assert len(trials) == 4 and trials["status"].eq("finished").all()
    assert trials["dataset"].eq("finger").all() and trials["image_size"].eq(128).all()
    assert trials["data_source"].eq("prepared").all() and trials["transfer_factor"].eq("colour").all()
    assert trials["ood2_a_dataset"].eq("finger_heldout_colors").all()
    assert trials["ood2_b_dataset"].eq("finger_real").all()
    for scenario in SCENARIOS:  # GBT readout at tiny scale; each a finite mean error in [0, 1]
        errors = trials[f"transfer_gbt_{scenario}"].to_numpy(dtype=float)
        assert np.isfinite(errors).all() and ((errors >= 0) & (errors <= 1)).all(), scenario
    # the real images are another distribution than the simulated ones the regressors fitted on
    assert not np.allclose(trials["transfer_gbt_ood2_b"], trials["transfer_gbt_ood2_a"])



TASKS_GRID = """\
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
    grid.write_text(TASKS_GRID)
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



@pytest.mark.slow
def test_a_sweep_trains_on_the_real_file_its_prepared_copy_and_the_generator(ray_session, tmp_path,
                                                                            monkeypatch, capsys):
    from data_pipeline.prepare import main as prepare

    space, _ = write_circles(tmp_path)
    prepare(["circles", "--from-file", str(tmp_path / "circles.npz"), "--out", str(tmp_path / "circles")])
    monkeypatch.setenv("DISGEN_DATA", str(tmp_path))  # the real file and DIR/circles/, prepared from it
    grid = tmp_path / "grid.yaml"
    axis = "axes:\n  data_source: [procedural, real, prepared]\n"
    grid.write_text(textwrap.dedent(GRID).replace("axes:\n", axis))
    argv = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp"]
    assert main(argv) == 0
    assert "3 of 3 trials finished" in capsys.readouterr().out
    trials = pd.read_parquet(tmp_path / "exp" / "trials.parquet").set_index("data_source")
    assert sorted(trials.index) == ["prepared", "procedural", "real"]
    # each trains on the whole training part of its grid, less the rows held back as the
    # in-distribution control (data_pipeline.in_distribution)
    midpos = get_split("circles", "midpos")
    train, _, test = training_rows(SimpleNamespace(classes=space.all_classes(), factor_space=space,
                                                   observe=None), midpos, 0)
    assert (trials.loc["real", "n_train_images"], trials.loc["real", "n_test_images"]) == (len(train), 4)
    generator = factor_space("circles")  # the generator's 32 × 32 grid: 924 training combinations
    trained, back, _ = training_rows(SimpleNamespace(classes=generator.all_classes(), factor_space=generator,
                                                     observe=None), midpos, 0)
    assert len(trained) + len(back) == 924 and trials.loc["procedural", "n_train_images"] == len(trained)
    assert (trials["in_distribution_source"] == "held back from training").all()
    assert np.isfinite(trials["in_distribution_nll"]).all()
    assert json.loads(trials.loc["real", "config"])["data_source"] == "real"
    assert np.isfinite(trials["test_nll"]).all() and trials["trial_key"].is_unique
    # the prepared copy holds the real file's bytes: the same numbers, to the last bit
    metrics = ["train_nll", "test_nll", "n_train_images", "n_test_images"]
    assert trials.loc["prepared", metrics].tolist() == trials.loc["real", metrics].tolist()
    # each row names the data it read: the file, the prepared folder or the generator, and a content id
    assert trials.loc["real", "data_uri"] == str(tmp_path / "circles.npz")
    assert trials.loc["prepared", "data_uri"] == str(tmp_path / "circles")
    assert trials.loc["prepared", "data_content_id"] == json.loads(
        (tmp_path / "circles" / "manifest.json").read_text())["content_id"]
    assert trials.loc["procedural", "data_uri"] == "generator:circles"
    assert trials["data_content_id"].str.len().eq(64).all() and trials["data_content_id"].is_unique
    built = lambda: sorted(r["kind"] for r in materialisations()  # noqa: E731
                           if r["content_id"] in set(trials["data_content_id"]))
    assert built() == ["file", "prepared", "procedural"]  # each materialised once on this node
    # extending the experiment (a second seed: three more trials) reads nothing the node already holds
    assert main([*argv, "--resume", "--seeds", "2"]) == 0
    assert "6 of 6 trials finished" in capsys.readouterr().out
    assert built() == ["file", "prepared", "procedural"]
