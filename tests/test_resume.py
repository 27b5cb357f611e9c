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


@pytest.mark.slow
def test_killed_driver_resumes_and_every_trial_lands_exactly_once(ray_session, tmp_path):
    argv = [sys.executable, "-m", "sweeps.paper_grid", "--scale", "tiny", "--storage-path", str(tmp_path),
            "--name", "exp", "--max-concurrent-trials", "1"]
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
