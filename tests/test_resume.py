"""Fault tolerance: a sweep whose driver is killed mid-way resumes, and no trial lands twice."""

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")


def finished_rows(experiment):
    path = experiment / "trials.parquet"
    return len(pd.read_parquet(path)) if path.exists() else 0


FOUR_TRIAL_GRID = """
description: the default study's four tiny trials with one cheap metric
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 3000, data_seed: 0,
        batch_size: 32, report_every: 5, n_nll: 200, n_metric: 300, metrics: [d_score], lr: 0.001}
axes:
  beta: [1.0, 4.0]
  split: [leave1out, blank_side]
scales:
  tiny: {steps: 20}
"""


@pytest.mark.slow
def test_killed_driver_resumes_and_every_trial_lands_exactly_once(ray_session, tmp_path):
    grid = tmp_path / "four.yaml"
    grid.write_text(FOUR_TRIAL_GRID)
    argv = [sys.executable, "-m", "sweeps.paper_grid", "--grid", str(grid), "--scale", "tiny",
            "--storage-path", str(tmp_path), "--name", "exp", "--max-concurrent-trials", "1"]
    env = {**os.environ, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address}
    experiment = tmp_path / "exp"
    log = open(tmp_path / "driver.log", "w")
    driver = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def what():
            return "the first finished trial; driver log:\n" + (tmp_path / "driver.log").read_text()[-3000:]

        wait_for(lambda: finished_rows(experiment) >= 1, 240, what)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    before = pd.read_parquet(experiment / "trials.parquet")
    assert 1 <= len(before) < 4, "the driver should die mid-sweep"

    done = subprocess.run([*argv, "--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    after = pd.read_parquet(experiment / "trials.parquet")
    assert len(after) == 4 and after["trial_key"].is_unique
    # trials that had finished were not run again: their rows are untouched
    kept = after.set_index("trial_key").loc[before["trial_key"], "finished_at"]
    assert (kept.to_numpy() == before["finished_at"].to_numpy()).all()
    history = pd.read_parquet(experiment / "history.parquet")
    assert not history.duplicated(["trial_key", "step"]).any()
    assert history.groupby("trial_key").size().to_dict() == dict.fromkeys(after["trial_key"], 4)


ONE_TRIAL_GRID = """
description: one trial, long enough to be killed mid-way
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 1000, data_seed: 0,
        batch_size: 8, report_every: 5, n_nll: 50, n_metric: 50, dci_estimator: none, beta: 1.0,
        split: blank_side}
scales:
  tiny: {steps: 120, lr: 0.001}
"""


def first_loss_steps(folder):
    """The first ``train/loss`` step of each TensorBoard event file in ``folder``, in file order:
    a worker that restarts from a checkpoint writes a new file that starts past it."""
    from tensorboard.backend.event_processing import event_accumulator

    steps = []
    for events_file in sorted(folder.glob("events.out.tfevents.*")):
        events = event_accumulator.EventAccumulator(str(events_file))
        events.Reload()
        if "train/loss" in events.Tags()["scalars"]:
            steps.append(events.Scalars("train/loss")[0].step)
    return steps


def trial_workers():
    import psutil

    found = []
    for process in psutil.process_iter(["cmdline"]):
        command = " ".join(process.info["cmdline"] or [])
        if command.startswith("ray::ImplicitFunc") or command.startswith("ray::train_trial"):
            found.append(process)
    return found


@pytest.mark.slow
def test_a_killed_trial_worker_resumes_from_its_checkpoint(ray_session, tmp_path):
    grid = tmp_path / "one.yaml"
    grid.write_text(ONE_TRIAL_GRID)
    argv = [sys.executable, "-m", "sweeps.paper_grid", "--grid", str(grid), "--scale", "tiny",
            "--storage-path", str(tmp_path), "--name", "exp", "--checkpoint-every", "20"]
    env = {**os.environ, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address}
    driver = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    experiment = tmp_path / "exp"
    wait_for(lambda: list(experiment.glob("*/checkpoint_*")), 240, "the trial's first checkpoint")
    workers = trial_workers()
    assert len(workers) == 1
    workers[0].kill()
    out, _ = driver.communicate(timeout=300)
    assert driver.returncode == 0, out[-3000:]

    trials = pd.read_parquet(experiment / "trials.parquet")
    assert len(trials) == 1
    history = pd.read_parquet(experiment / "history.parquet")
    assert history["step"].tolist() == list(range(5, 121, 5))  # each report once, none lost
    # The restarted worker wrote a second event file whose first step is past the checkpoint:
    # it resumed from the checkpoint rather than from step 0.
    (trial_dir,) = [p for p in experiment.iterdir() if p.is_dir()]
    first_steps = first_loss_steps(trial_dir)
    assert len(first_steps) == 2 and first_steps[0] == 5 and first_steps[1] > 20


@pytest.mark.slow
def test_a_killed_pack_worker_resumes_every_member_from_the_packs_checkpoint(ray_session, tmp_path):
    grid = tmp_path / "two.yaml"
    two_trials = ONE_TRIAL_GRID.replace("beta: 1.0,", "").replace(
        "scales:", "axes:\n  beta: [1.0, 4.0]\nscales:")
    grid.write_text(two_trials)
    argv = [sys.executable, "-m", "sweeps.paper_grid", "--grid", str(grid), "--scale", "tiny",
            "--storage-path", str(tmp_path), "--name", "exp", "--checkpoint-every", "20", "--pack-size", "2"]
    env = {**os.environ, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address}
    driver = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    experiment = tmp_path / "exp"
    wait_for(lambda: list(experiment.glob("pack2-*/checkpoint_*")), 240, "the pack's first checkpoint")
    workers = trial_workers()
    assert len(workers) == 1  # one Tune trial trains both models
    workers[0].kill()
    out, _ = driver.communicate(timeout=300)
    assert driver.returncode == 0, out[-3000:]
    assert "Packing 2 trials into 1 packs" in out

    trials = pd.read_parquet(experiment / "trials.parquet")
    assert len(trials) == 2 and sorted(trials["beta"]) == [1.0, 4.0]
    history = pd.read_parquet(experiment / "history.parquet")
    for _, steps in history.groupby("trial_key")["step"]:
        assert steps.tolist() == list(range(5, 121, 5))  # each member's reports once, none lost
    # Each member's TensorBoard folder got a second event file, from the restarted worker, whose
    # first step is past the checkpoint: the pack resumed, both members together, not from step 0.
    member_dirs = [p for p in experiment.iterdir() if p.is_dir() and not p.name.startswith("pack")]
    assert len(member_dirs) == 2
    for member_dir in member_dirs:
        first_steps = first_loss_steps(member_dir)
        assert len(first_steps) == 2 and first_steps[0] == 5 and first_steps[1] > 20
