"""A driver (the head) that dies right after a trial's second checkpoint redoes no training: the
trial goes on from that checkpoint on storage, not from an older one and not from step 0.

In-training checkpoints are disgen's own (``sweeps/checkpoints.py``): written straight to the
trial's checkpoint folder on storage (named by its whole key) and never registered with Tune, so
Tune's saved state, whatever it names or whenever it was last saved, cannot point at a checkpoint
already deleted. The driver is killed (SIGKILL, no clean-up, as a lost head) while the trial's
worker waits at its second checkpoint's signal (tests/checkpoint_signals.py), so it trains no
further before Ray ends it with the driver's job."""

import json
import subprocess

import pytest
from sweep_runs import wait_for
from test_resume_after_kills import (
    ONE_TRIAL_GRID,
    assert_same_results,
    first_loss_steps,
    ray_env,
    results,
    run_to_the_end,
    sweep_argv,
)

from sweeps.checkpoints import SEAL, TRAINING_PREFIX

GRID = ONE_TRIAL_GRID.replace("steps: 60", "steps: 40")  # checkpoints at steps 10, 20 and 30


def live_trial_actors() -> list:
    from ray._private import state

    return [a for a in state.actors().values()
            if a["State"] == "ALIVE" and a["ActorClassName"] in ("ImplicitFunc", "train_trial")]


def crash_at_second_checkpoint(ray_session, tmp_path, checkpoint_signals, argv) -> None:
    """Run ``argv`` as a driver of its own, kill it once its trial's second checkpoint (step 20)
    is on storage, the trial's worker held there; wait until Ray has ended the worker."""
    with open(tmp_path / "driver.log", "w") as log:
        driver = subprocess.Popen(argv, env=ray_env(ray_session), stdout=log, stderr=subprocess.STDOUT)
    try:
        checkpoint_signals.hold(lambda name: name.endswith("-20"), 300, alive=lambda: driver.poll() is None)
    finally:
        driver.kill()
        driver.wait()
    wait_for(lambda: not live_trial_actors(), 120, "Ray to end the dead driver's trial worker")
    checkpoint_signals.release_all()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_head_crash_after_a_checkpoint_registers_loses_no_training(ray_session, tmp_path,
                                                                     checkpoint_signals, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID)
    options = ["--checkpoint-every", "10", "--checkpoint-minutes", "0"]
    with checkpoint_signals.releasing():
        run_to_the_end(sweep_argv(grid, tmp_path, "reference", *options))
    reference = results(tmp_path / "reference")

    argv = sweep_argv(grid, tmp_path, "exp", *options)
    crash_at_second_checkpoint(ray_session, tmp_path, checkpoint_signals, argv)
    experiment = tmp_path / "exp"
    # the in-training checkpoints: in the trial's folder named by its whole key, under checkpoints/
    (checkpoints,) = [p for p in (experiment / "checkpoints").iterdir()
                      if list(p.glob(TRAINING_PREFIX + "*"))]
    trial_dir = experiment / checkpoints.name[:-4]  # Tune's and TensorBoard's: 6 characters of the key
    # both in-training checkpoints on storage (the newest two are kept), none of them Tune's
    assert sorted(p.name for p in checkpoints.glob(TRAINING_PREFIX + "*")) == [
        f"{TRAINING_PREFIX}{step:010d}" for step in (10, 20)]
    assert not list(trial_dir.glob("checkpoint_*"))
    assert all(TRAINING_PREFIX not in p.read_text() for p in experiment.glob("experiment_state-*.json"))

    capsys.readouterr()
    with checkpoint_signals.releasing():
        run_to_the_end([*argv, "--resume"])
    out = capsys.readouterr().out
    # the trial never failed
    assert "could not be restored" not in out and not (experiment / "errors-parts").exists(), out[-3000:]
    trials, history = resumed = results(experiment)
    assert len(trials) == 1 and (trials["status"] == "finished").all()
    assert history["step"].tolist() == list(range(5, 41, 5))  # each report once, none lost
    # the second worker's TensorBoard file starts right after the checkpoint of step 20: it trained
    # on from there, not from step 0
    assert first_loss_steps(trial_dir) == [5, 25]
    # and exactly as the uninterrupted run did: its final loss to 1e-6, every column
    assert abs(history["loss"].iloc[-1] - reference[1]["loss"].iloc[-1]) <= 1e-6
    assert_same_results(resumed, reference)
    # the final checkpoint's seal: the trial's key, the step it reached, and its files' sizes
    seals = [json.loads((p / SEAL).read_text()) for p in trial_dir.glob("checkpoint_*")]
    keys = trials["trial_key"].tolist()
    assert [(s["trial_keys"], s["step"], s["final"]) for s in seals] == [(keys, 40, True)]
    # and the in-training checkpoints are gone once the final one is on storage
    assert not list(checkpoints.glob(TRAINING_PREFIX + "*"))
