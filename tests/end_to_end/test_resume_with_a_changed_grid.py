"""--resume with a changed grid extends the experiment or is refused with the difference, and a
second driver on a running experiment is refused (real drivers, one real Ray)."""

import os
import signal
import subprocess
import sys

import pandas as pd
import pytest
from sweep_runs import TWO_SHORT_TRIALS, wait_for

from analysis.storage import read_results
from sweeps import plan_record
from sweeps.lock import LOCK_FILE
from sweeps.paper_grid import main

GRID = TWO_SHORT_TRIALS.replace("steps: 10", "steps: 40")  # long enough to kill mid-sweep


def rows(experiment):
    return read_results(str(experiment))  # a running sweep's rows are parts until it ends


@pytest.mark.slow
def test_a_second_driver_is_refused_and_a_resume_with_more_seeds_extends(ray_session, tmp_path, capsys):
    grid = tmp_path / "two.yaml"
    grid.write_text(GRID)
    args = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp",
            "--max-concurrent-trials", "1"]
    argv = [sys.executable, "-m", "sweeps.paper_grid", *args]
    env = {**os.environ, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address}
    experiment = tmp_path / "exp"
    log = open(tmp_path / "driver.log", "w")
    first = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def what():
            return "driver 1; its log:\n" + (tmp_path / "driver.log").read_text()[-3000:]

        wait_for(lambda: (experiment / LOCK_FILE).exists(), 120, what)
        # the second driver: this process (the first is the one to be killed, so it runs apart)
        capsys.readouterr()
        assert main([*args, "--resume"]) == 2
        refused = capsys.readouterr().err
        assert f"in use by another driver (host {os.uname().nodename}, pid {first.pid}" in refused
        wait_for(lambda: len(rows(experiment)) >= 1, 240, what)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    before = rows(experiment)
    assert len(before) == 1 and (experiment / LOCK_FILE).exists()  # killed mid-sweep, its lock left behind

    # Resume with a second seed: the dead driver's lock is taken over, the unfinished trial
    # continues, the two new ones run, the finished one is kept as it was.
    assert main([*args, "--resume", "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert "taking over a stale lock" in out and "Extending" in out
    after = rows(experiment)
    assert len(after) == 4 and after["trial_key"].is_unique and sorted(after["seed"]) == [0, 0, 1, 1]
    kept = after.set_index("trial_key").loc[before["trial_key"], "finished_at"]
    assert (kept.to_numpy() == before["finished_at"].to_numpy()).all()
    history = pd.read_parquet(experiment / "history.parquet")
    assert history.groupby("trial_key").size().to_dict() == dict.fromkeys(after["trial_key"], 8)
    assert not (experiment / LOCK_FILE).exists()
    stored = plan_record.read(str(experiment))
    assert sorted(stored["trials"]) == sorted(after["trial_key"])

    # A changed setting is no extension: refused, with the difference, before Ray starts.
    grid.write_text(GRID.replace("steps: 40", "steps: 60"))
    assert main([*args, "--resume", "--seeds", "2"]) == 2
    err = capsys.readouterr().err
    assert "trials removed (4)" in err and "steps: 40 -> 60" in err
    assert rows(experiment)["finished_at"].equals(after["finished_at"])
