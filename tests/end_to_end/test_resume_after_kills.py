"""Fault tolerance at known points, each checked against an uninterrupted run with the same seeds:
a driver killed after K trials finished resumes with ``--resume``; a trial's worker (or a pack's)
killed after checkpoint N resumes from that checkpoint. The kill points come from the checkpoint
signals (tests/checkpoint_signals.py, installed in the tests' Ray workers): the worker waits at its
checkpoint until the test has acted, so nothing races."""

import json
import os
import signal
import subprocess
import sys

import pandas as pd
import pytest
from sweep_runs import wait_for

from analysis.storage import read_results
from sweeps.checkpoints import CHECKPOINTS

# Columns of trials.parquet that differ between two runs of the same trials, and why. Every other
# column must be equal.
EXPECTED_TO_DIFFER = {
    "experiment": "the experiment's folder name (the runs are named apart)",
    "finished_at": "wall-clock time the row was written",
    "trial_id": "Ray Tune's id of the trial, new for every Tune run",
    "train_seconds": "wall-clock time (and a resumed trial counts only its time since the restore)",
    "eval_seconds": "wall-clock time",
    "train_started_at": "wall-clock time",
    "train_ended_at": "wall-clock time",
    "eval_started_at": "wall-clock time",
    "eval_ended_at": "wall-clock time",
    "node_id": "the Ray node of the run (one Ray here, but kept out: on a cluster it differs)",
}


def finished_rows(experiment):
    return len(read_results(str(experiment)))  # a running sweep's rows are parts until it ends


def sweep_argv(grid, tmp_path, name, *extra):
    return [sys.executable, "-m", "sweeps.paper_grid", "--grid", str(grid), "--scale", "tiny",
            "--storage-path", str(tmp_path), "--name", name, *extra]


def ray_env(ray_session, **extra):
    return {**os.environ, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address, **extra}


def run_to_the_end(argv):
    """Run a sweep to its end in this process, joined to the tests' Ray: the runs that nothing kills
    need no process of their own (and reuse this process's imports and Ray workers)."""
    from sweeps.paper_grid import main

    assert main(argv[3:]) == 0, argv


def results(experiment):
    trials = pd.read_parquet(experiment / "trials.parquet").sort_values("trial_key").reset_index(drop=True)
    history = pd.read_parquet(experiment / "history.parquet").sort_values(["trial_key", "step"])
    return trials, history.reset_index(drop=True)


def assert_same_results(resumed, reference):
    """trials.parquet equal column by column, but for EXPECTED_TO_DIFFER; the loss history equal."""
    (trials, history), (ref_trials, ref_history) = resumed, reference
    assert trials["trial_key"].tolist() == ref_trials["trial_key"].tolist()
    differing = [c for c in trials.columns
                 if not trials[c].astype(object).equals(ref_trials[c].astype(object))]
    print("trials.parquet columns that differ from the uninterrupted run:",
          {c: EXPECTED_TO_DIFFER.get(c) for c in differing})
    unexplained = set(differing) - set(EXPECTED_TO_DIFFER)
    assert not unexplained, {c: (trials[c].tolist(), ref_trials[c].tolist()) for c in unexplained}
    terms = [c for c in history.columns if c not in ("experiment", "images_per_second")]
    pd.testing.assert_frame_equal(history[terms], ref_history[terms], check_exact=False, rtol=0, atol=1e-6)


def trial_actor_pid(ray_session) -> int:
    """The pid of the one live trial actor, from Ray's actor table in the GCS (``ray.util.state``
    would ask the dashboard, which needs ``ray[default]``; the tests' Ray runs without it)."""
    from ray._private import state

    actors = [a for a in state.actors().values()
              if a["State"] == "ALIVE" and a["ActorClassName"] in ("ImplicitFunc", "train_trial")]
    assert len(actors) == 1, actors
    return actors[0]["Pid"]


def restarts(trial_dir):
    """The first training step of each worker that trained the trial after its first one (from its
    TensorBoard event files): a worker that goes on from a checkpoint writes a new file, which starts
    right after it. Tune's own record cannot say: the in-training checkpoints are never Tune's."""
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
        reference_argv = sweep_argv(grid, tmp_path, "reference", "--checkpoint-every", "10")
        run_to_the_end(reference_argv)
    reference = results(tmp_path / "reference")

    argv = sweep_argv(grid, tmp_path, "exp", *options)
    env = ray_env(ray_session)
    experiment = tmp_path / "exp"
    log = open(tmp_path / "driver.log", "w")
    driver = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # The known point: one trial finished (rows written), the second waits at its first checkpoint.
        running = lambda: driver.poll() is None
        first = checkpoint_signals.hold(lambda name: name.endswith("-10"), 240, running)[0]
        checkpoint_signals.release_all()
        checkpoint_signals.hold(lambda name: name.endswith("-10") and name != first, 240,
                                lambda: driver.poll() is None)
        wait_for(lambda: finished_rows(experiment) == 1, 60, "the first trial's row")
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
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
    # the trial that waited at its checkpoint went on from it after the resume
    waited = experiment / restored_trial_dir(first, experiment)
    assert restarts(waited) == [15]
    assert_same_results(resumed, reference)


def restored_trial_dir(first, experiment):
    """The trial folder, other than the first trial's, that holds a restore record."""
    trial_dirs = [p.name for p in experiment.iterdir() if (p / "result.json").exists()]
    restored = [d for d in trial_dirs if restarts(experiment / d)]
    assert len(restored) == 1 and not first.startswith(restored[0]), restored
    return restored[0]


ONE_TRIAL_GRID = """
description: one trial, long enough to be killed mid-way
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 1000, data_seed: 0,
        batch_size: 8, report_every: 5, n_nll: 50, n_metric: 50, dci_estimator: none, beta: 1.0,
        split: blank_side}
scales:
  tiny: {steps: 60, lr: 0.001}
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


def tensorboard_view(folder):
    """(the ``train/loss`` steps TensorBoard shows for a folder, each worker's purge step): a worker's
    file starts with a SessionLog START at the first step it writes, and TensorBoard drops what the
    files before it hold from that step on, so a restarted model's curve does not double back (the
    file of the final hparams summary has none)."""
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    events = event_accumulator.EventAccumulator(str(folder))
    events.Reload()
    purges = [e.step for path in sorted(folder.glob("events.out.tfevents.*"))
              for e in EventFileLoader(str(path)).Load()
              if e.HasField("session_log") and e.session_log.status == e.session_log.START]
    return [e.step for e in events.Scalars("train/loss")], purges


def kill_at_checkpoint(ray_session, tmp_path, checkpoint_signals, grid_text, *options, step=40):
    """Run the grid once uninterrupted and once with its trial's worker killed (SIGKILL, by the pid
    Ray's state API gives) while it waits at checkpoint ``step``; both runs' results and the name of
    the killed trial's folder."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(grid_text)
    options = ["--checkpoint-every", "20", *options]
    with checkpoint_signals.releasing():
        run_to_the_end(sweep_argv(grid, tmp_path, "reference", *options))

    env = ray_env(ray_session)
    driver = subprocess.Popen(sweep_argv(grid, tmp_path, "exp", *options), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        name, pid = checkpoint_signals.hold(lambda name: name.endswith(f"-{step}"), 240,
                                            lambda: driver.poll() is None)
    except AssertionError:
        driver.kill()
        output = driver.communicate()[0][-3000:]
        raise AssertionError("no checkpoint signal; driver output:\n" + output) from None
    assert trial_actor_pid(ray_session) == pid  # the actor Ray knows is the one waiting at the checkpoint
    os.kill(pid, signal.SIGKILL)
    with checkpoint_signals.releasing():
        out, _ = driver.communicate(timeout=300)
    assert driver.returncode == 0, out[-3000:]
    return results(tmp_path / "exp"), results(tmp_path / "reference"), name.rsplit("-", 1)[0], out


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
def test_ctrl_c_or_sigterm_stops_the_sweep_with_exit_130_or_143_and_a_resume_finishes_every_model_once(
        ray_session, tmp_path, checkpoint_signals, stop, code, said):
    from sweep_runs import TWO_SHORT_TRIALS

    from sweeps.paper_grid import resume_command

    grid = tmp_path / "two.yaml"
    grid.write_text(TWO_SHORT_TRIALS)
    # one trial at a time; checkpoints by time only, at a tiny interval: at every report
    argv = sweep_argv(grid, tmp_path, "exp", "--max-concurrent-trials", "1", "--checkpoint-every", "0",
                      "--checkpoint-minutes", "0.0001")
    experiment = tmp_path / "exp"
    log_path = tmp_path / "driver.log"
    with open(log_path, "w") as log:
        driver = subprocess.Popen(argv, env=ray_env(ray_session), stdout=log, stderr=subprocess.STDOUT)
    try:
        # the first trial finishes; the second waits at its first checkpoint, and then comes Ctrl-C
        running = lambda: driver.poll() is None
        first = checkpoint_signals.hold(lambda name: name.endswith("-5"), 240, running)[0]
        checkpoint_signals.release_all()
        checkpoint_signals.hold(lambda name: name.endswith("-5") and name != first, 240, running)
        wait_for(lambda: finished_rows(experiment) == 1, 60, lambda: log_path.read_text())
        driver.send_signal(stop)
        with checkpoint_signals.releasing():
            driver.wait(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    output = log_path.read_text()
    assert driver.returncode == code, output
    assert f"{said}: 1 of 2 models finished and stored" in output, output
    assert "Traceback" not in output, output
    assert f"Resume with:  {resume_command(argv[3:])}\n" in output
    assert "Tuner.restore" not in output
    # the finished model's row is in trials.parquet, where plain pandas finds it
    assert len(pd.read_parquet(experiment / "trials.parquet")) == 1
    # its in-training checkpoint came by time alone (--checkpoint-every 0): the signal of step 5 held
    # above; Tune's record holds its final checkpoint only (the in-training ones are disgen's own)
    record = (experiment / first.rsplit("-", 1)[0] / "result.json").read_text()
    reports = [json.loads(line) for line in record.splitlines()]
    assert [r["step"] for r in reports if r.get("checkpoint_dir_name")] == [10]

    with checkpoint_signals.releasing():
        run_to_the_end([*argv, "--resume"])
    trials, history = results(experiment)
    planned = set(json.loads((experiment / "plan.json").read_text())["trials"])
    assert len(planned) == 2
    assert sorted(trials["trial_key"]) == sorted(planned)  # every planned model, exactly once
    assert history.groupby("trial_key")["step"].apply(list).to_dict() == dict.fromkeys(planned, [5, 10])
