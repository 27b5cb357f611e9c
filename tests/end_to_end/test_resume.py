"""Stops and resumes of real sweeps on the tests' Ray, checked against an uninterrupted run with the
same seeds where numbers could move: a driver killed after one trial finished, a worker killed and
retried by Tune then the driver stopped by SIGTERM, a driver that dies between a trial's two writes.
A resume plans from disgen's own records (plan.json, the results) and starts a new Tune run: nothing
Tune saved is read back, so a pickle planted in the experiment is never opened. The kill points come
from the checkpoint signals (tests/checkpoint_signals.py, installed in the tests' Ray workers): a
worker waits at its checkpoint until the test has acted, so nothing races. Workers and a head lost:
test_lost_workers.py; extensions: test_extension.py."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
from sweep_runs import (
    TWO_SHORT_TRIALS,
    Driver,
    assert_same_results,
    finished_rows,
    ray_env,
    restarts,
    results,
    run_to_the_end,
    sweep_argv,
    trial_dir_of,
    wait_for,
)

from analysis.schema import HISTORY_FILE, TRIALS_FILE
from analysis.storage import PARTS_DIR, read_results
from sweeps.paper_grid import main, resume_command

THREE_TRIAL_GRID = """
description: three tiny trials with one cheap metric (one finishes, one is cut at its checkpoint, one
  has not started when the driver is killed)
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 3000, data_seed: 0,
        batch_size: 32, report_every: 5, n_nll: 200, n_metric: 300, metrics: [d_score], lr: 0.001}
axes:
  beta: [1.0, 2.0, 4.0]
  split: [blank_side]
scales:
  tiny: {steps: 20}
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_driver_killed_after_one_finished_trial_resumes_to_the_uninterrupted_result(
        ray_session, tmp_path, checkpoint_signals):
    grid = tmp_path / "three.yaml"
    grid.write_text(THREE_TRIAL_GRID)
    options = ["--max-concurrent-trials", "1", "--checkpoint-every", "10"]
    # the reference two trials at a time: each trains on one thread, so its numbers are the same
    with checkpoint_signals.releasing():
        run_to_the_end(sweep_argv(grid, tmp_path, "reference", "--checkpoint-every", "10"))
    reference = results(tmp_path / "reference")

    argv = sweep_argv(grid, tmp_path, "exp", *options)
    experiment = tmp_path / "exp"
    driver = Driver(argv, ray_env(ray_session), tmp_path / "driver.log")
    try:
        # The known point: one trial finished (rows written), the second waits at its first checkpoint.
        first = checkpoint_signals.hold(lambda name: name.endswith("-10"), 240, driver.running)[0]
        checkpoint_signals.release_all()
        second = checkpoint_signals.hold(lambda name: name.endswith("-10") and name != first, 240,
                                         driver.running)[0]
        wait_for(lambda: finished_rows(experiment) == 1, 60, "the first trial's row")
    finally:
        driver.kill()
    before = read_results(str(experiment))
    assert len(before) == 1, "the driver was killed after exactly one finished trial"

    with checkpoint_signals.releasing():
        run_to_the_end([*argv, "--resume"])
    trials, history = resumed = results(experiment)
    # 0 lost, 0 duplicated
    assert len(trials) == 3 and trials["trial_key"].is_unique
    assert not history.duplicated(["trial_key", "step"]).any()
    assert history.groupby("trial_key")["step"].apply(list).to_dict() == dict.fromkeys(
        trials["trial_key"], [5, 10, 15, 20])
    # 0 finished re-run: the finished trial's row is untouched (same time written)
    kept = trials.set_index("trial_key").loc[before["trial_key"], "finished_at"]
    assert (kept.to_numpy() == before["finished_at"].to_numpy()).all()
    # the trial that waited at its checkpoint went on from it after the resume, and only it
    assert restarts(experiment / trial_dir_of(second)) == [15]
    assert not restarts(experiment / trial_dir_of(first))
    assert_same_results(resumed, reference)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_retried_trial_then_a_sigterm_and_the_resume_finishes_every_model_once(
        ray_session, tmp_path, checkpoint_signals):
    # SIGTERM, what `ray job stop` sends; Ctrl-C takes the same path (sweeps.ray_edge.bridge_signals,
    # tests/sweeps/test_ray_edge.py), so one signal is enough here
    stop, code, said = signal.SIGTERM, 143, "Stopped (SIGTERM, e.g. `ray job stop`)"
    grid = tmp_path / "two.yaml"
    grid.write_text(TWO_SHORT_TRIALS)
    # one trial at a time; checkpoints by time only, at a tiny interval: at every report
    argv = sweep_argv(grid, tmp_path, "exp", "--max-concurrent-trials", "1", "--checkpoint-every", "0",
                      "--checkpoint-minutes", "0.0001")
    experiment = tmp_path / "exp"
    driver = Driver(argv, ray_env(ray_session), tmp_path / "driver.log")
    try:
        # the first trial's worker dies at its first checkpoint (a spot reclaim): Tune retries the
        # trial, which goes on from that checkpoint and finishes; the second waits at its first
        # checkpoint, and then comes the signal
        first, pid = checkpoint_signals.hold(lambda name: name.endswith("-5"), 240, driver.running)
        os.kill(pid, signal.SIGKILL)
        checkpoint_signals.release_all()
        checkpoint_signals.hold(lambda name: name.endswith("-5") and name != first, 240, driver.running)
        wait_for(lambda: finished_rows(experiment) == 1, 120, driver.output)
        driver.process.send_signal(stop)
        with checkpoint_signals.releasing():
            driver.process.wait(timeout=120)
    finally:
        if driver.running():
            driver.kill()
    output = driver.log_path.read_text()
    assert driver.process.returncode == code, output
    assert f"{said}: 1 of 2 models finished and stored" in output, output
    assert "Traceback" not in output, output
    assert f"Resume with:  {resume_command(argv[3:])}\n" in output
    assert "Tuner.restore" not in output
    # the retried trial's row is in trials.parquet, where plain pandas finds it; Tune wrote its
    # error (which the resume never reads)
    assert len(pd.read_parquet(experiment / "trials.parquet")) == 1
    assert list((experiment / trial_dir_of(first)).glob("error.*"))
    assert restarts(experiment / trial_dir_of(first)) == [10]  # the retry went on from step 5

    with checkpoint_signals.releasing():
        run_to_the_end([*argv, "--resume"])
    trials, history = results(experiment)
    planned = set(json.loads((experiment / "plan.json").read_text())["trials"])
    assert len(planned) == 2
    assert sorted(trials["trial_key"]) == sorted(planned)  # every planned model, exactly once
    assert history.groupby("trial_key")["step"].apply(list).to_dict() == dict.fromkeys(planned, [5, 10])


CRASH_BETWEEN_THE_WRITES = textwrap.dedent("""
    # The driver dies as it commits a finished trial's rows: the trial has written its history part.
    import os, sys
    from analysis.storage import ResultsStore
    def die(self, part, rows):
        print("dying between the writes", flush=True)
        os._exit(3)
    ResultsStore.commit = die
    from sweeps.paper_grid import main
    sys.exit(main(sys.argv[1:]))
""")


class Payload:
    """A pickle that runs code when it is loaded: it leaves a file behind."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.slow
def test_a_crash_between_the_two_writes_shows_no_half_trial_and_the_resume_opens_no_pickle(
        ray_session, tmp_path):
    grid = tmp_path / "two.yaml"
    grid.write_text(TWO_SHORT_TRIALS)
    args = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp",
            "--max-concurrent-trials", "1", "--max-failures", "0"]
    crashed = subprocess.run([sys.executable, "-c", CRASH_BETWEEN_THE_WRITES, *args],
                             env=ray_env(ray_session), capture_output=True, text=True, timeout=600)
    assert crashed.returncode == 3, crashed.stdout[-3000:] + crashed.stderr[-3000:]
    experiment = tmp_path / "exp"
    # the history landed, the trials row did not
    (part,) = (experiment / PARTS_DIR).glob("*." + HISTORY_FILE)
    assert len(pd.read_parquet(part)) == 2 and not list((experiment / PARTS_DIR).glob("*." + TRIALS_FILE))
    assert not (experiment / TRIALS_FILE).exists()
    # what readers see: no trial, and no history without its trial
    assert read_results(str(experiment), TRIALS_FILE).empty
    assert read_results(str(experiment), HISTORY_FILE).empty

    # Pickles planted where Tune keeps its state (its tuner, a searcher's state, and in each trial
    # folder Tune has synced by now, a trial's error and parameters): a resume that read Tune's state
    # would run them. Whether a trial folder is synced before the crash depends on the load (seen
    # missing in a reversed-order run), so only the experiment's two are counted on.
    marker = tmp_path / "a pickle ran"
    planted = [experiment / "tuner.pkl", experiment / "searcher-state-2026-11-29_00-00-00.pkl",
               *(folder / name for folder in experiment.iterdir() if (folder / "params.json").exists()
                 for name in ("error.pkl", "params.pkl"))]
    for path in planted:
        path.write_bytes(pickle.dumps(Payload(str(marker))))
    assert len(planted) >= 2

    # The resume, in this process and joined to the same Ray (only the crash needed a process of its
    # own): the trial without a row runs again, from its final checkpoint, and is stored once.
    assert main([*args, "--resume"]) == 0
    assert not marker.exists()
    trials = read_results(str(experiment), TRIALS_FILE)
    assert len(trials) == 2 and trials["trial_key"].is_unique
    history = pd.read_parquet(experiment / HISTORY_FILE)
    assert not history.duplicated(["trial_key", "step"]).any()
    assert history.groupby("trial_key").size().to_dict() == dict.fromkeys(trials["trial_key"], 2)
