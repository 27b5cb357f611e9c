"""The command line end to end: one real tiny sweep and its resume, a failed and a stopped model, and
a pack too big for the tests' Ray refused. Its bad input before Ray starts, --help and stops
outside Tune's run are tested in tests/sweeps/."""

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from tensorboard.backend.event_processing import event_accumulator

from analysis.schema import SETTING_FIELDS
from analysis.storage import PARTS_DIR
from sweeps.grid import get_spec, trial_configs
from sweeps.paper_grid import main


def assert_rows_hold_every_setting(trials, experiment):
    """Issue 25's promises for finished models' rows, read with plain pd.read_parquet: no setting is
    null (but where the schema says what a null means), the group columns are categoricals, ints
    are Int64, flags booleans, provenance filled; load_trials gives the same dtypes."""
    from analysis import load_trials
    from analysis.schema import PROVENANCE_FIELDS, SETTING_FIELDS

    assert (trials["status"] == "finished").all() and trials["error"].isna().all()
    settings = [f.name for f in SETTING_FIELDS if b"null" not in (f.metadata or {})]
    empty = trials[settings].isna().sum()
    assert not empty.any(), empty[empty > 0]
    # the defaults the grid never names, which issue 25 found null, and the config JSON with them
    assert set(trials["task"]) == {"vae"} and set(trials["image_size"]) == {64}
    assert set(trials["lr_decay"]) == {0.5} and len(trials[trials["image_size"] == 64]) == len(trials)
    assert all(json.loads(c)["lr_decay"] == 0.5 and json.loads(c)["task"] == "vae" for c in trials["config"])
    for column in ["dataset", "split", "condition", "objective", "architecture", "task", "preset", "scale",
                   "data_source", "device", "status", "experiment"]:
        assert isinstance(trials[column].dtype, pd.CategoricalDtype), column
    for column in ["seed", "steps", "n_images", "batch_size", "n_test_images", "trained_steps"]:
        assert str(trials[column].dtype) == "Int64", column
    assert str(trials["encoder_fails"].dtype) == "boolean" and trials["encoder_fails"].notna().all()
    provenance = [f.name for f in PROVENANCE_FIELDS if b"null" not in (f.metadata or {})]
    assert trials[provenance].notna().all().all(), trials[provenance]
    assert set(trials["device"]) == {"cpu"} and trials["device_name"].isna().all()  # no CUDA here
    assert trials["git_commit"].notna().all()  # the tests run from a checkout
    import ray
    import torch

    assert set(trials["torch_version"]) == {torch.__version__}
    assert set(trials["ray_version"]) == {ray.__version__}
    loaded = load_trials(experiment)
    assert [str(d) for d in loaded.dtypes] == [str(d) for d in trials.dtypes]


def event_files(folder):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs if "tfevents" in f)


@pytest.mark.slow
def test_tiny_sweep_writes_parquet_and_tensorboard_and_resume_reruns_nothing(ray_session, tmp_path, capsys):
    argv = ["--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp"]
    # As a user runs it, joining a running cluster (the tests' own) through $RAY_ADDRESS.
    address = ray_session.get_runtime_context().gcs_address
    done = subprocess.run([sys.executable, "-m", "sweeps.paper_grid", *argv], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "RAY_ADDRESS": address})
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"Connecting to existing Ray cluster at address: {address}" in done.stderr
    assert "4 of 4 trials finished" in done.stdout
    for expected in ["Spearman", "tensorboard --logdir", "--resume", "pd.read_parquet"]:
        assert expected in done.stdout
    experiment = tmp_path / "exp"
    # The live view (sweeps/console.py): short, each model named as disgen names it, one line per
    # finished model, a progress table with the sweep's ETA; none of Tune's own tables and boxes
    console = done.stdout + done.stderr
    lines = console.splitlines()
    assert len(lines) <= 80, console
    names = [c.dirname for c in trial_configs(get_spec("default"), "default", "tiny", [0])]
    for name in names:
        assert sum(f" done {name}: train_nll " in line for line in lines) == 1, console
    header = [i for i, line in enumerate(lines) if line.split() == [
        "model", "dataset", "split", "objective", "β", "seed", "step", "loss", "img/s"]]
    assert header and " models done, " in lines[header[0] - 1] and "; ETA " in lines[header[0] - 1]
    assert lines[header[0] + 1].split()[0] in names and lines[header[0] + 1].split()[1] == "dsprites"
    for tune_output in ["members", "train_trial", "Trial status", "completed after", "Tuner.restore", "╭"]:
        assert tune_output not in console, tune_output
    # Tune names its trials as disgen does too (its messages, --verbose): its saved state says so
    state = json.loads(next(experiment.glob("experiment_state-*.json")).read_text())
    assert sorted(json.loads(t[0])["custom_trial_name"] for t in state["trial_data"]) == sorted(names)

    trials = pd.read_parquet(experiment / "trials.parquet")
    assert len(trials) == 4 and trials["trial_key"].is_unique
    assert set(zip(trials["split"], trials["beta"])) == {
        (s, b) for s in ("leave1out", "blank_side") for b in (1.0, 4.0)}
    assert dict(zip(trials["split"], trials["condition"])) == {
        "leave1out": "recombination_to_element", "blank_side": "extrapolation"}
    for column in ["train_nll", "test_nll"]:
        assert (trials[column] > 0).all() and np.isfinite(trials[column]).all()
    for column in ["dci_disentanglement", "dci_completeness", "dci_informativeness", "d_score"]:
        assert trials[column].between(0, 1).all(), column
    assert (trials["n_test_images"] > 0).all() and (trials["steps"] == 20).all()
    assert_rows_hold_every_setting(trials, experiment)

    history = pd.read_parquet(experiment / "history.parquet")
    assert len(history) == 4 * 4  # 20 steps, a report every 5
    assert sorted(history["step"].unique()) == [5, 10, 15, 20]
    assert set(history["trial_key"]) == set(trials["trial_key"])
    assert np.isfinite(history[["loss", "reconstruction", "kl"]]).all().all()
    assert not (experiment / PARTS_DIR).exists()  # the run's parts, compacted into the two files
    # Tune saw scalars: its record of each trial's final report names the history part, and holds
    # no loss history
    finals = [json.loads((experiment / d / "result.json").read_text().splitlines()[-1])
              for d in trials["tensorboard_dir"]]
    assert all(f["done"] and f["results_part"] and "history" not in f["members"][0] for f in finals)

    files = event_files(experiment)
    trial_dirs = {os.path.dirname(f) for f in files}
    assert len(trial_dirs) == 4
    # rows that link: each row names its Ray trial and its TensorBoard folder, relative to the experiment
    assert trials["trial_id"].notna().all() and trials["trial_id"].is_unique
    assert {str(experiment / d) for d in trials["tensorboard_dir"]} == trial_dirs
    for folder in trial_dirs:
        events = event_accumulator.EventAccumulator(folder, size_guidance={"images": 0})
        events.Reload()
        tags = events.Tags()
        assert {"train/loss", "train/kl", "eval/test_nll", "eval/d_score"} <= set(tags["scalars"])
        assert [e.step for e in events.Scalars("train/loss")] == [5, 10, 15, 20]
        assert {"reconstructions/train", "reconstructions/test"} <= set(tags["images"])
        # reconstructions during training too, not only at the end
        assert [e.step for e in events.Images("reconstructions/train")] == [5, 10, 15, 20]

    # A second run with --resume finds everything finished and re-runs nothing.
    assert main([*argv, "--resume"]) == 0
    assert "4 of 4 trials finished" in capsys.readouterr().out
    again = pd.read_parquet(experiment / "trials.parquet")
    pd.testing.assert_frame_equal(again.sort_values("trial_key").reset_index(drop=True),
                                  trials.sort_values("trial_key").reset_index(drop=True))
    assert event_files(experiment) == files
    assert len(pd.read_parquet(experiment / "history.parquet")) == 16

    # Without --resume the same name is refused rather than overwritten.
    assert main(argv) == 2


ASHA_GRID = """
description: one model that trains, one whose learning rate is too small to learn (ASHA stops it at
  its first rung), one whose learning rate makes it diverge (it fails)
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 600, data_seed: 0,
        batch_size: 8, report_every: 5, n_nll: 40, n_metric: 60, metrics: [d_score], split: blank_side}
axes:
  lr: [0.001, 1.0e-9, 1.0e+9]
scales:
  tiny: {steps: 20}
"""


@pytest.mark.slow
def test_a_failed_and_a_stopped_model_get_rows_with_their_status(ray_session, tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(ASHA_GRID)
    argv = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp",
            "--scheduler", "asha", "--max-failures", "0", "--max-concurrent-trials", "1"]
    assert main(argv) == 1  # one trial failed
    out = capsys.readouterr().out
    assert "1 of 3 trials finished" in out
    trials = pd.read_parquet(tmp_path / "exp" / "trials.parquet").set_index("lr").sort_index()
    assert trials["trial_key"].is_unique and len(trials) == 3
    trained, stopped, failed = trials.loc[1e-3], trials.loc[1e-9], trials.loc[1e9]
    # the model that trained to its end: finished, with its metrics (ASHA let it reach its final report)
    assert trained["status"] == "finished" and np.isfinite(trained["test_nll"])
    assert trained["trained_steps"] == 20
    # stopped by ASHA at its first rung (step 5): its settings and where it was, no metrics
    assert stopped["status"] == "stopped" and stopped["trained_steps"] == 5 and pd.isna(stopped["test_nll"])
    assert stopped["device"] == "cpu" and pd.notna(stopped["node_id"]) and pd.isna(stopped["error"])
    # diverged: failed, with the error's last line
    assert failed["status"] == "failed" and pd.isna(failed["test_nll"])
    assert failed["error"].startswith("models.engine.NonFiniteLossError: step ")
    assert "not finite" in failed["error"]
    settings = [f.name for f in SETTING_FIELDS if b"null" not in (f.metadata or {})]
    assert trials.reset_index()[settings].notna().all().all()  # every setting, whatever became of the model
    assert trials[["torch_version", "ray_version", "disgen_version"]].notna().all().all()
    # analysis sees the finished model only; load_trials shows all three
    from analysis import finished_models, load_trials

    everything = load_trials(tmp_path / "exp")
    assert len(everything) == 3 and len(finished_models(everything)) == 1


@pytest.mark.slow
def test_a_run_refuses_a_pack_size_that_does_not_fit_in_one_line_before_anything_is_written(
        ray_session, tmp_path, capsys):
    argv = ["--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp", "--pack-size", "100000000"]
    assert main(argv) == 2  # on the tests' Ray (no GPU): far more than the host's memory holds
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: --pack-size 100000000 does not fit: ")
    assert err.endswith(" or --pack-size auto\n")  # after the size that fits
    # nothing of an experiment was written: the same command with a size that fits may start it
    from sweeps.paper_grid import parse_options, plan

    assert plan(parse_options(argv[:-2])).added == ()  # no "already exists; pass --resume"
