"""A trial's (or a pack's) worker killed after checkpoint N, and a head that dies right after a
checkpoint: each resumes from its own checkpoint to the uninterrupted run's numbers. The kill points
come from the checkpoint signals (tests/checkpoint_signals.py): a worker waits at its checkpoint
until the test has acted, so nothing races."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest
from sweep_runs import (
    ONE_TRIAL_GRID,
    Driver,
    assert_same_results,
    first_loss_steps,
    live_trial_actors,
    ray_env,
    results,
    run_to_the_end,
    sweep_argv,
    tensorboard_view,
    trial_actor_pid,
    trial_dir_of,
    wait_for,
)

from sweeps.checkpoints import CHECKPOINTS, SEAL, TRAINING_PREFIX


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
        out, _ = driver.communicate(timeout=600)
    assert driver.returncode == 0, out[-3000:]
    return results(tmp_path / "exp"), results(tmp_path / "reference"), trial_dir_of(name), out


@pytest.mark.slow
@pytest.mark.timeout(900)
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
@pytest.mark.timeout(900)
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
