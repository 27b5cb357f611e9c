"""A driver killed inside an extension's Tune run resumes without training any model twice.

An extended experiment holds two Tune runs in one folder, and ``Tuner.restore`` reads only the
newest one's state: a trial of the first run that has no finished row (here, one whose worker died
with ``--max-failures 0``, in the first run and again in the resume that extends) is in no state the
resume restores, and runs again as a new Tune trial. It must go on from its newest checkpoint on
storage, not start from step 0; the finished trials keep their rows; the extension's interrupted
trial goes on from its checkpoint. Each model's TensorBoard folder counts its trainings: every
worker that trains a model writes one event file, whose first step is 5 only for a training that
started from scratch. Everything is compared with an uninterrupted run of the extended grid."""

import os
import signal
import subprocess

import pytest
from sweep_runs import TWO_SHORT_TRIALS, wait_for
from test_resume_after_a_head_crash import live_trial_actors
from test_resume_after_kills import (
    assert_same_results,
    first_loss_steps,
    ray_env,
    results,
    run_to_the_end,
    sweep_argv,
)

GRID = TWO_SHORT_TRIALS.replace("steps: 10", "steps: 40")  # checkpoints at steps 10, 20 and 30


class Driver:
    """A sweep's driver in a process (and process group) of its own, its output in a file."""

    def __init__(self, argv, env, log_path):
        self.log_path = log_path
        with open(log_path, "w") as log:
            self.process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def running(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        return self.log_path.read_text()[-3000:]

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_driver_killed_inside_an_extension_resumes_with_no_model_trained_twice(
        ray_session, tmp_path, checkpoint_signals):
    grid = tmp_path / "two.yaml"
    grid.write_text(GRID)
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
    failing = failing.rsplit("-", 1)[0]
    assert len(results(experiment)[0].query("status == 'finished'")) == 1, driver.output()

    # 2. The resume that extends (a second seed): the first run's failed trial goes on from step 20
    # and its worker dies again at step 30; then, in the extension's own Tune run, the driver dies
    # while the first new trial waits at its checkpoint of step 20.
    driver = Driver([*argv, "--resume", "--seeds", "2"], env, tmp_path / "extending.log")
    try:
        _, pid = checkpoint_signals.hold(lambda name: name == f"{failing}-30", 240, driver.running)
        os.kill(pid, signal.SIGKILL)
        checkpoint_signals.hold(lambda name: name.endswith("-20"), 240, driver.running)
    finally:
        driver.kill()
    assert "Extending" in driver.output(), driver.output()
    wait_for(lambda: not live_trial_actors(), 120, "Ray to end the dead driver's trial worker")
    checkpoint_signals.release_all()
    # the state a restore reads, the newest, is the extension's: the failed trial is not in it
    newest = max(experiment.glob("experiment_state-*.json"), key=lambda p: p.stat().st_mtime)
    assert failing not in newest.read_text()

    # 3. The resume of the interrupted extension.
    with checkpoint_signals.releasing():
        run_to_the_end([*argv, "--resume", "--seeds", "2"])
    trials, history = resumed = results(experiment)
    assert len(trials) == 4 and trials["trial_key"].is_unique and (trials["status"] == "finished").all()
    assert not history.duplicated(["trial_key", "step"]).any()
    assert history.groupby("trial_key")["step"].apply(list).to_dict() == dict.fromkeys(
        trials["trial_key"], [5, 10, 15, 20, 25, 30, 35, 40])
    # no model trained twice: one training from step 0 each, and the trial of the first run that
    # failed twice went on from its checkpoints of steps 20 and 30
    trainings = {p.name: first_loss_steps(p) for p in experiment.iterdir() if (p / "result.json").exists()}
    assert len(trainings) == 4 and all(steps.count(5) == 1 for steps in trainings.values()), trainings
    assert trainings[failing] == [5, 25, 35]
    assert_same_results(resumed, reference)
