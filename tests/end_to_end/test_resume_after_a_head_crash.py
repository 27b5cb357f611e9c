"""A driver (the head) that dies between Tune's registering a checkpoint and its saving of the
experiment state redoes no training: the trial goes on from its newest checkpoint on storage, not
from the one Tune's saved state names (already deleted), and not from step 0.

The driver dies at a known point (tests/checkpoint_signals.py, ``DRIVER_DIES_AT``): right after
Tune registers the trial's second checkpoint, which deletes the first (``num_to_keep=1``), while
the experiment state on storage still names the first. The trial's worker waits at that
checkpoint's signal, so it trains no further before Ray ends it with the driver's job."""

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

from sweeps.trainable import SEAL
from tests.checkpoint_signals import DRIVER_DIES_AT, DRIVER_EXIT_CODE

GRID = ONE_TRIAL_GRID.replace("steps: 60", "steps: 40")  # checkpoints at steps 10, 20 and 30


def live_trial_actors() -> list:
    from ray._private import state

    return [a for a in state.actors().values()
            if a["State"] == "ALIVE" and a["ActorClassName"] in ("ImplicitFunc", "train_trial")]


def crash_at_second_checkpoint(ray_session, tmp_path, checkpoint_signals, argv):
    """Run ``argv`` as a driver of its own that dies right after its trial's second checkpoint
    (step 20) registers, the trial's worker held at that checkpoint; wait until Ray has ended the
    worker. The driver's output."""
    env = ray_env(ray_session, **{DRIVER_DIES_AT: "2"})
    log_path = tmp_path / "driver.log"
    with open(log_path, "w") as log:
        driver = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        while driver.poll() is None:  # every checkpoint signal goes on, but the second checkpoint's
            for name in checkpoint_signals.current():
                if not name.endswith("-20"):
                    (checkpoint_signals.folder / name).unlink(missing_ok=True)
            try:
                driver.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if driver.poll() is None:
            driver.kill()
    output = log_path.read_text()
    assert driver.returncode == DRIVER_EXIT_CODE, output[-3000:]
    wait_for(lambda: not live_trial_actors(), 120, "Ray to end the dead driver's trial worker")
    checkpoint_signals.release_all()
    return output


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
    (trial_dir,) = [p for p in experiment.iterdir() if (p / "result.json").exists()]
    # the gap of the issue: the first checkpoint is deleted, the state on storage names it
    assert sorted(p.name for p in trial_dir.glob("checkpoint_*")) == ["checkpoint_000001"]
    states = list(experiment.glob("experiment_state-*.json"))
    assert len(states) == 1 and "checkpoint_000000" in states[0].read_text()

    capsys.readouterr()
    with checkpoint_signals.releasing():
        run_to_the_end([*argv, "--resume"])
    out = capsys.readouterr().out
    # Tune was not left to fail restoring the deleted checkpoint: the trial never failed
    assert "1 trials went on from their newest checkpoint on storage" in out, out[-3000:]
    assert "could not be restored" not in out and not (experiment / "errors.jsonl").exists()
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
