"""Extensions (a grown grid: more seeds) on the tests' Ray: a driver killed inside an extension
resumes with no model trained twice; a second driver is refused, a resume with more seeds extends,
a changed setting is refused."""

from __future__ import annotations

import os
import signal
import sys

import pandas as pd
import pytest
from sweep_runs import (
    TWO_SHORT_TRIALS,
    Driver,
    assert_same_results,
    finished_rows,
    first_loss_steps,
    live_trial_actors,
    ray_env,
    results,
    run_to_the_end,
    sweep_argv,
    trial_dir_of,
    wait_for,
)

from analysis.schema import HISTORY_FILE
from analysis.storage import read_results
from sweeps import plan_record
from sweeps.lock import LOCK_FILE
from sweeps.paper_grid import main


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_driver_killed_inside_an_extension_resumes_with_no_model_trained_twice(
        ray_session, tmp_path, checkpoint_signals):
    grid = tmp_path / "two.yaml"
    grid.write_text(TWO_SHORT_TRIALS.replace("steps: 10", "steps: 40"))  # checkpoints at 10, 20 and 30
    options = ["--max-concurrent-trials", "1", "--checkpoint-every", "10", "--checkpoint-minutes", "0",
               "--max-failures", "0"]
    with checkpoint_signals.releasing():
        run_to_the_end(sweep_argv(grid, tmp_path, "reference", *options, "--seeds", "2"))
    reference = results(tmp_path / "reference")
    argv = sweep_argv(grid, tmp_path, "exp", *options)
    experiment, env = tmp_path / "exp", ray_env(ray_session)

    # 1. The first run: one trial finishes; the other's worker dies at its checkpoint of step 20.
    driver = Driver(argv, env, tmp_path / "first.log")
    try:
        first = checkpoint_signals.hold(lambda name: name.endswith("-20"), 240, driver.running)[0]
        checkpoint_signals.release_all()
        failing, pid = checkpoint_signals.hold(lambda name: name.endswith("-20") and name != first, 240,
                                               driver.running)
        os.kill(pid, signal.SIGKILL)
        with checkpoint_signals.releasing():
            driver.process.wait(timeout=600)
    finally:
        if driver.running():
            driver.kill()
    assert len(results(experiment)[0].query("status == 'finished'")) == 1, driver.output()

    # 2. The resume that extends (a second seed): the failed trial goes on from step 20 and its
    # worker dies again at step 30; then the driver dies while a new trial waits at step 20.
    driver = Driver([*argv, "--resume", "--seeds", "2"], env, tmp_path / "extending.log")
    try:
        _, pid = checkpoint_signals.hold(lambda name: name == f"{failing.rsplit('-', 1)[0]}-30", 240,
                                         driver.running)
        os.kill(pid, signal.SIGKILL)
        checkpoint_signals.hold(lambda name: name.endswith("-20"), 240, driver.running)
    finally:
        driver.kill()
    assert "Extending" in driver.log_path.read_text(), driver.output()
    wait_for(lambda: not live_trial_actors(), 120, "Ray to end the dead driver's trial worker")
    checkpoint_signals.release_all()

    # 3. The resume of the interrupted extension.
    with checkpoint_signals.releasing():
        run_to_the_end([*argv, "--resume", "--seeds", "2"])
    trials, history = resumed = results(experiment)
    assert len(trials) == 4 and trials["trial_key"].is_unique and (trials["status"] == "finished").all()
    assert not history.duplicated(["trial_key", "step"]).any()
    assert history.groupby("trial_key")["step"].apply(list).to_dict() == dict.fromkeys(
        trials["trial_key"], [5, 10, 15, 20, 25, 30, 35, 40])
    # no model trained twice: one training from step 0 each, and the trial that failed twice went
    # on from its checkpoints of steps 20 and 30
    trainings = {p.name: first_loss_steps(p) for p in experiment.iterdir() if (p / "result.json").exists()}
    assert len(trainings) == 4 and all(steps.count(5) == 1 for steps in trainings.values()), trainings
    assert trainings[trial_dir_of(failing)] == [5, 25, 35]
    assert_same_results(resumed, reference)


@pytest.mark.slow
def test_a_second_driver_is_refused_and_a_resume_with_more_seeds_extends(ray_session, tmp_path, capsys):
    grid = tmp_path / "two.yaml"
    grid.write_text(TWO_SHORT_TRIALS.replace("steps: 10", "steps: 40"))  # long enough to kill mid-sweep
    args = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp",
            "--max-concurrent-trials", "1"]
    experiment = tmp_path / "exp"
    first = Driver([sys.executable, "-m", "sweeps.paper_grid", *args], ray_env(ray_session),
                   tmp_path / "driver.log")
    try:
        wait_for(lambda: (experiment / LOCK_FILE).exists(), 120, first.output)
        # the second driver: this process (the first is the one to be killed, so it runs apart)
        capsys.readouterr()
        assert main([*args, "--resume"]) == 2
        refused = capsys.readouterr().err
        assert f"in use by another driver (host {os.uname().nodename}, pid {first.process.pid}" in refused
        wait_for(lambda: finished_rows(experiment) >= 1, 240, first.output)
    finally:
        first.kill()
    before = read_results(str(experiment))
    assert len(before) == 1 and (experiment / LOCK_FILE).exists()  # killed mid-sweep, its lock left behind

    # Resume with a second seed: the dead driver's lock is taken over, the unfinished trial
    # continues, the two new ones run, the finished one is kept as it was.
    assert main([*args, "--resume", "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert "taking over a stale lock" in out and "Extending" in out
    after = read_results(str(experiment))
    assert len(after) == 4 and after["trial_key"].is_unique and sorted(after["seed"]) == [0, 0, 1, 1]
    kept = after.set_index("trial_key").loc[before["trial_key"], "finished_at"]
    assert (kept.to_numpy() == before["finished_at"].to_numpy()).all()
    history = pd.read_parquet(experiment / HISTORY_FILE)
    assert history.groupby("trial_key").size().to_dict() == dict.fromkeys(after["trial_key"], 8)
    assert not (experiment / LOCK_FILE).exists()
    assert sorted(plan_record.read(str(experiment))["trials"]) == sorted(after["trial_key"])

    # A changed setting is no extension: refused, with the difference, before Ray starts.
    grid.write_text(TWO_SHORT_TRIALS.replace("steps: 10", "steps: 60"))
    assert main([*args, "--resume", "--seeds", "2"]) == 2
    err = capsys.readouterr().err
    assert "trials removed (4)" in err and "steps: 40 -> 60" in err
    assert read_results(str(experiment))["finished_at"].equals(after["finished_at"])
