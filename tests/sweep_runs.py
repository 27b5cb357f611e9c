"""Helpers for the tests that run real sweeps and act while they run: short grids, how to run a
sweep and read its results, compare two runs, read a model's TensorBoard files, and a wait."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

# Two trials (β 1 and 4) of a few steps on 1,000 images, batch 8, one cheap metric: short enough to
# run one at a time in a test. Its steps are 10; a test that needs longer replaces "steps: 10".
TWO_SHORT_TRIALS = """
description: two short trials, run one at a time
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 1000, data_seed: 0,
        batch_size: 8, report_every: 5, n_nll: 50, n_metric: 50, dci_estimator: none, split: blank_side,
        metrics: [d_score], lr: 0.001}
axes:
  beta: [1.0, 4.0]
scales:
  tiny: {steps: 10}
"""


# Two β-VAEs that share a pack (with --pack-size 2) and a FactorVAE alone: both paths of the tracking
# callbacks (sweeps/tracking.py) in one sweep.
PACK_AND_LONE_MODEL = """\
description: a pack of two β-VAEs and a FactorVAE alone, small enough for a test
fixed: {dataset: dsprites, architecture: burgess, n_images: 600, data_seed: 0, batch_size: 8,
        report_every: 2, n_nll: 40, n_metric: 60, metrics: [d_score], lr: 0.001, split: blank_side}
axes:
  model:
    - {objective: beta_vae, beta: 1.0}
    - {objective: beta_vae, beta: 4.0}
    - {objective: factor_vae, gamma: 10.0, discriminator_width: 16, discriminator_layers: 2}
scales:
  tiny: {steps: 6}
"""


# Four one-model trials of 200 steps on 2,000 images with one cheap metric, for the tests of deferred
# evaluation (tests/end_to_end/test_deferred_evaluation.py runs them; a test of one evaluation
# shortens them with "steps: 200" replaced).
FOUR_ONE_MODEL_TRIALS = """
description: four one-model trials, each long enough to train while the one before is evaluated
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 2000, data_seed: 0,
        batch_size: 16, report_every: 25, n_nll: 1000, n_metric: 300, metrics: [d_score], lr: 0.001,
        split: blank_side}
axes:
  beta: [1.0, 2.0, 4.0, 8.0]
scales:
  tiny: {steps: 200}
"""


def wait_for(predicate, timeout: float, what) -> None:
    """Poll ``predicate`` until it is true; after ``timeout`` seconds fail, saying ``what`` (a
    string, or a function giving one, called only then: a driver's log, say)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")


def trial_dir_of(signal_name: str) -> str:
    """The Tune folder of the trial whose checkpoint signal is ``signal_name`` (``<the trial's whole
    name>-<step>``, tests/checkpoint_signals.py): its name with 6 characters of the key, not 10."""
    return signal_name.rsplit("-", 1)[0][:-4]


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
    """(trials, history) of a finished experiment, sorted."""
    import pandas as pd

    trials = pd.read_parquet(experiment / "trials.parquet").sort_values("trial_key").reset_index(drop=True)
    history = pd.read_parquet(experiment / "history.parquet").sort_values(["trial_key", "step"])
    return trials, history.reset_index(drop=True)


# Columns of trials.parquet that differ between two runs of the same trials, and why. Every other
# column must be equal.
EXPECTED_TO_DIFFER = {
    "experiment": "the experiment's folder name (the runs are named apart)",
    "finished_at": "wall-clock time the row was written",
    "trial_id": "Ray Tune's id of the trial, new for every Tune run",
    "train_seconds": "wall-clock time (and a resumed trial counts only its time since the restart)",
    "eval_seconds": "wall-clock time",
    "train_started_at": "wall-clock time",
    "train_ended_at": "wall-clock time",
    "eval_started_at": "wall-clock time",
    "eval_ended_at": "wall-clock time",
    "node_id": "the Ray node of the run (one Ray here, but kept out: on a cluster it differs)",
}


def assert_same_results(resumed, reference):
    """trials.parquet equal column by column, but for EXPECTED_TO_DIFFER; the loss history equal."""
    import pandas as pd

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


def live_trial_actors() -> list:
    """The trial actors alive in the tests' Ray, from its actor table in the GCS (``ray.util.state``
    would ask the dashboard, which needs ``ray[default]``; the tests' Ray runs without it)."""
    from ray._private import state

    return [a for a in state.actors().values()
            if a["State"] == "ALIVE" and a["ActorClassName"] in ("ImplicitFunc", "_run_trial")]


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


# One trial of 60 steps on 1,000 images, batch 8, no DCI: long enough to be killed mid-way.
ONE_TRIAL_GRID = """
description: one trial, long enough to be killed mid-way
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 1000, data_seed: 0,
        batch_size: 8, report_every: 5, n_nll: 50, n_metric: 50, dci_estimator: none, beta: 1.0,
        split: blank_side}
scales:
  tiny: {steps: 60, lr: 0.001}
"""


def finished_rows(experiment) -> int:
    """The rows a running sweep has stored (parts until it ends)."""
    from analysis.storage import read_results

    return len(read_results(str(experiment)))


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
