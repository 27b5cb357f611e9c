"""Stops and resumes of real sweeps on the tests' Ray, each checked against an uninterrupted run
with the same seeds where numbers could move: a driver killed after K trials finished, a trial's
(or a pack's) worker killed after checkpoint N, a worker killed and retried by Tune then the driver
stopped by Ctrl-C or SIGTERM, a head that dies right after a checkpoint, a driver killed inside an
extension, a second driver, a changed grid, a driver that dies between a trial's two writes. A
resume plans from disgen's own records (plan.json, the results) and starts a new Tune run: nothing
Tune saved is read back, so a pickle planted in the experiment is never opened. The kill points
come from the checkpoint signals (tests/checkpoint_signals.py, installed in the tests' Ray
workers): a worker waits at its checkpoint until the test has acted, so nothing races."""

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
    ONE_TRIAL_GRID,
    TWO_SHORT_TRIALS,
    Driver,
    assert_same_results,
    first_loss_steps,
    live_trial_actors,
    ray_env,
    results,
    run_to_the_end,
    sweep_argv,
    tensorboard_view,
    trial_dir_of,
    wait_for,
)

from analysis.schema import HISTORY_FILE, TRIALS_FILE
from analysis.storage import PARTS_DIR, read_results
from sweeps import plan_record
from sweeps.checkpoints import CHECKPOINTS, SEAL, TRAINING_PREFIX
from sweeps.lock import LOCK_FILE
from sweeps.paper_grid import main, resume_command


def finished_rows(experiment):
    return len(read_results(str(experiment)))  # a running sweep's rows are parts until it ends


def trial_actor_pid() -> int:
    """The pid of the one live trial actor."""
    actors = live_trial_actors()
    assert len(actors) == 1, actors
    return actors[0]["Pid"]


def restarts(trial_dir):
    """The first training step of each worker that trained the trial after its first one (from its
    TensorBoard event files): a worker that goes on from a checkpoint writes a new file, which starts
    right after it."""
    return first_loss_steps(trial_dir)[1:]


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


def kill_at_checkpoint(ray_session, tmp_path, checkpoint_signals, grid_text, *options, step=40):
    """Run the grid once uninterrupted and once with its trial's worker killed (SIGKILL, by the pid
    Ray's actor table gives) while it waits at checkpoint ``step``; both runs' results and the name
    of the killed trial's Tune folder."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(grid_text)
    options = ["--checkpoint-every", "20", *options]
    with checkpoint_signals.releasing():
        run_to_the_end(sweep_argv(grid, tmp_path, "reference", *options))
    driver = subprocess.Popen(sweep_argv(grid, tmp_path, "exp", *options), env=ray_env(ray_session),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        name, pid = checkpoint_signals.hold(lambda name: name.endswith(f"-{step}"), 240,
                                            lambda: driver.poll() is None)
    except AssertionError:
        driver.kill()
        output = driver.communicate()[0][-3000:]
        raise AssertionError("no checkpoint signal; driver output:\n" + output) from None
    assert trial_actor_pid() == pid  # the actor Ray knows is the one waiting at the checkpoint
    os.kill(pid, signal.SIGKILL)
    with checkpoint_signals.releasing():
        out, _ = driver.communicate(timeout=300)
    assert driver.returncode == 0, out[-3000:]
    return results(tmp_path / "exp"), results(tmp_path / "reference"), trial_dir_of(name), out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_killed_trial_worker_resumes_from_its_checkpoint_to_the_uninterrupted_loss(
        ray_session, tmp_path, checkpoint_signals):
    resumed, reference, trial_dir, _ = kill_at_checkpoint(ray_session, tmp_path, checkpoint_signals,
                                                          ONE_TRIAL_GRID)
    trials, history = resumed
    assert len(trials) == 1
    assert history["step"].tolist() == list(range(5, 61, 5))  # each report once, none lost
    experiment = tmp_path / "exp"
    # the restarted worker's TensorBoard file starts right after that checkpoint, and the first
    # holds every step up to it (flushed at the checkpoint); the second purges from step 41
    assert first_loss_steps(experiment / trial_dir) == [5, 45]
    assert tensorboard_view(experiment / trial_dir) == (list(range(5, 61, 5)), [1, 41])
    # and it trained on exactly as the uninterrupted run did: final loss equal to 1e-6
    assert abs(history["loss"].iloc[-1] - reference[1]["loss"].iloc[-1]) <= 1e-6
    assert_same_results(resumed, reference)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_killed_pack_worker_resumes_every_member_from_the_packs_checkpoint(
        ray_session, tmp_path, checkpoint_signals):
    two_trials = ONE_TRIAL_GRID.replace("beta: 1.0,", "").replace(
        "scales:", "axes:\n  beta: [1.0, 4.0]\nscales:")
    resumed, reference, pack_dir, out = kill_at_checkpoint(ray_session, tmp_path, checkpoint_signals,
                                                           two_trials, "--pack-size", "2")
    assert "Packing 2 trials into 1 packs" in out
    trials, history = resumed
    assert len(trials) == 2 and sorted(trials["beta"]) == [1.0, 4.0]
    for _, steps in history.groupby("trial_key")["step"]:
        assert steps.tolist() == list(range(5, 61, 5))  # each member's reports once, none lost
    experiment = tmp_path / "exp"
    assert pack_dir.startswith("pack2-")
    # each member's TensorBoard folder: the restarted worker's file starts right after the checkpoint
    member_dirs = [p for p in experiment.iterdir()
                   if p.is_dir() and not p.name.startswith("pack") and p.name != CHECKPOINTS]
    assert len(member_dirs) == 2
    for member_dir in member_dirs:
        assert first_loss_steps(member_dir) == [5, 45]
        assert tensorboard_view(member_dir) == (list(range(5, 61, 5)), [1, 41])
    assert_same_results(resumed, reference)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("stop, code, said", [
    (signal.SIGINT, 130, "Interrupted (Ctrl-C)"),
    (signal.SIGTERM, 143, "Stopped (SIGTERM, e.g. `ray job stop`)"),  # what `ray job stop` sends
], ids=["ctrl-c", "sigterm"])
def test_a_retried_trial_then_a_ctrl_c_or_sigterm_and_the_resume_finishes_every_model_once(
        ray_session, tmp_path, checkpoint_signals, stop, code, said):
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


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_head_crash_right_after_a_checkpoint_loses_no_training(ray_session, tmp_path, checkpoint_signals,
                                                                   capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(ONE_TRIAL_GRID.replace("steps: 60", "steps: 40"))  # checkpoints at 10, 20 and 30
    options = ["--checkpoint-every", "10", "--checkpoint-minutes", "0"]
    with checkpoint_signals.releasing():
        run_to_the_end(sweep_argv(grid, tmp_path, "reference", *options))
    reference = results(tmp_path / "reference")

    argv = sweep_argv(grid, tmp_path, "exp", *options)
    # the driver (the head) killed once the trial's second checkpoint is on storage, the worker held
    # there (SIGKILL, no clean-up, as a lost head); Ray ends the worker with the driver's job
    driver = Driver(argv, ray_env(ray_session), tmp_path / "driver.log")
    try:
        checkpoint_signals.hold(lambda name: name.endswith("-20"), 300, driver.running)
    finally:
        driver.kill()
    wait_for(lambda: not live_trial_actors(), 120, "Ray to end the dead driver's trial worker")
    checkpoint_signals.release_all()
    experiment = tmp_path / "exp"
    # the in-training checkpoints: in the trial's folder named by its whole key, under checkpoints/
    (checkpoints,) = [p for p in (experiment / CHECKPOINTS).iterdir() if list(p.glob(TRAINING_PREFIX + "*"))]
    trial_dir = experiment / checkpoints.name[:-4]  # Tune's and TensorBoard's: 6 characters of the key
    assert sorted(p.name for p in checkpoints.glob(TRAINING_PREFIX + "*")) == [
        f"{TRAINING_PREFIX}{step:010d}" for step in (10, 20)]
    assert not list(trial_dir.glob("checkpoint_*"))  # no final one yet

    capsys.readouterr()
    with checkpoint_signals.releasing():
        run_to_the_end([*argv, "--resume"])
    out = capsys.readouterr().out
    assert not (experiment / "errors-parts").exists(), out[-3000:]  # the trial never failed
    trials, history = resumed = results(experiment)
    assert len(trials) == 1 and (trials["status"] == "finished").all()
    assert history["step"].tolist() == list(range(5, 41, 5))  # each report once, none lost
    # the second worker's TensorBoard file starts right after the checkpoint of step 20
    assert first_loss_steps(trial_dir) == [5, 25]
    assert abs(history["loss"].iloc[-1] - reference[1]["loss"].iloc[-1]) <= 1e-6
    assert_same_results(resumed, reference)
    # the final checkpoint's seal: the trial's key, the step it reached, final
    seals = [json.loads((p / SEAL).read_text()) for p in trial_dir.glob("checkpoint_*")]
    keys = trials["trial_key"].tolist()
    assert [(s["trial_keys"], s["step"], s["final"]) for s in seals] == [(keys, 40, True)]
    # and the in-training checkpoints are gone once the final one is on storage
    assert not list(checkpoints.glob(TRAINING_PREFIX + "*"))


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
            driver.process.wait(timeout=300)
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
                             env=ray_env(ray_session), capture_output=True, text=True, timeout=300)
    assert crashed.returncode == 3, crashed.stdout[-3000:] + crashed.stderr[-3000:]
    experiment = tmp_path / "exp"
    # the history landed, the trials row did not
    (part,) = (experiment / PARTS_DIR).glob("*." + HISTORY_FILE)
    assert len(pd.read_parquet(part)) == 2 and not list((experiment / PARTS_DIR).glob("*." + TRIALS_FILE))
    assert not (experiment / TRIALS_FILE).exists()
    # what readers see: no trial, and no history without its trial
    assert read_results(str(experiment), TRIALS_FILE).empty
    assert read_results(str(experiment), HISTORY_FILE).empty

    # Pickles planted where Tune keeps its state (its tuner, a searcher's state, a trial's error and
    # parameters): a resume that read Tune's state would run them.
    marker = tmp_path / "a pickle ran"
    planted = [experiment / "tuner.pkl", experiment / "searcher-state-2026-11-29_00-00-00.pkl",
               *(folder / name for folder in experiment.iterdir() if (folder / "params.json").exists()
                 for name in ("error.pkl", "params.pkl"))]
    for path in planted:
        path.write_bytes(pickle.dumps(Payload(str(marker))))
    assert len(planted) >= 4

    # The resume, in this process and joined to the same Ray (only the crash needed a process of its
    # own): the trial without a row runs again, from its final checkpoint, and is stored once.
    assert main([*args, "--resume"]) == 0
    assert not marker.exists()
    trials = read_results(str(experiment), TRIALS_FILE)
    assert len(trials) == 2 and trials["trial_key"].is_unique
    history = pd.read_parquet(experiment / HISTORY_FILE)
    assert not history.duplicated(["trial_key", "step"]).any()
    assert history.groupby("trial_key").size().to_dict() == dict.fromkeys(trials["trial_key"], 2)
