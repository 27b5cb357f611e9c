"""Evaluation does not hold a GPU: on a Ray whose one GPU is logical (a CPU machine started with
``num_gpus=1``), four one-model trials that each reserve the GPU train one after another while the
driver evaluates each trained model in a CPU-only task; the rows' timestamps show each trial's
training overlapping the evaluation of the one before. A driver killed while an evaluation runs
loses nothing: ``--resume`` evaluates the trained model from its final checkpoint, without
training it again, and every model gets its row once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from sweep_runs import FOUR_ONE_MODEL_TRIALS, wait_for

from analysis.storage import read_results

GRID = FOUR_ONE_MODEL_TRIALS
# A training takes about twice an evaluation (mostly the NLL of 1,000 images a side), so that each
# evaluation outlasts the switch to the next trial, and ends before the next but one needs its CPU.
STEPS, REPORT_EVERY = 200, 25


def result_lines(trial_dir) -> list[dict]:
    """Tune's record of a trial: result.json, one report a line."""
    return [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines()]


def overlaps(first: tuple, second: tuple) -> bool:
    return first[0] < second[1] and second[0] < first[1]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_gpu_trials_train_while_cpu_tasks_evaluate_and_a_killed_driver_loses_no_evaluation(
        tmp_path, checkpoint_signals):
    from ray.cluster_utils import Cluster

    grid = tmp_path / "four.yaml"
    grid.write_text(GRID)
    # one node: 2 CPUs and one logical GPU (no CUDA here: the trials train on the CPU)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 1,
                                                            "include_dashboard": False})
    argv = [sys.executable, "-m", "sweeps.paper_grid", "--grid", str(grid), "--scale", "tiny",
            "--storage-path", str(tmp_path), "--name", "exp", "--gpus-per-trial", "1"]
    env = {**os.environ, "RAY_ADDRESS": cluster.address}
    experiment = tmp_path / "exp"
    try:
        log = open(tmp_path / "driver.log", "w")
        log_text = (tmp_path / "driver.log").read_text
        driver = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            # The known point: three models evaluated and committed, the fourth's evaluation running.
            released, deadline = set(), time.monotonic() + 240
            while True:
                for name in checkpoint_signals.current():
                    evaluation = name.startswith("evaluation-")
                    if not evaluation or (name not in released and len(released) < 3):
                        (checkpoint_signals.folder / name).unlink(missing_ok=True)
                        released |= {name} if evaluation else set()
                waiting = [n for n in checkpoint_signals.current() if n.startswith("evaluation-")
                           and n not in released]
                if len(released) == 3 and waiting:
                    break
                assert driver.poll() is None and time.monotonic() < deadline, log_text()
                time.sleep(0.05)
            (held,) = waiting
            wait_for(lambda: len(read_results(str(experiment))) == 3, 120, "the first three models' rows")
        finally:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        killed_at = pd.Timestamp.now(tz="UTC")
        out = log_text()
        # auto sizing asked the GPU node, found its GPU logical, and said so
        assert "Pack size 1: auto: 1 on CPUs" in out and "logical" in out
        before = read_results(str(experiment))
        assert len(before) == 3 and held.removeprefix("evaluation-") not in set(before["trial_key"])

        checkpoint_signals.release_all()
        with checkpoint_signals.releasing():
            resumed = subprocess.run([*argv, "--resume"], env=env, capture_output=True, text=True,
                                     timeout=400)
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    finally:
        cluster.shutdown()

    trials = pd.read_parquet(experiment / "trials.parquet").sort_values("train_started_at")
    history = pd.read_parquet(experiment / "history.parquet")
    # every model once, with its loss history once
    assert len(trials) == 4 and trials["trial_key"].is_unique
    assert history.groupby("trial_key")["step"].apply(list).to_dict() == dict.fromkeys(
        trials["trial_key"], list(range(REPORT_EVERY, STEPS + 1, REPORT_EVERY)))
    # the first three rows are kept as they were written
    kept = trials.set_index("trial_key").loc[before["trial_key"], "finished_at"]
    assert (kept.to_numpy() == before["finished_at"].to_numpy()).all()

    # the GPU trained the next trial while the CPUs evaluated the one before
    training = list(zip(trials["train_started_at"], trials["train_ended_at"]))
    evaluation = list(zip(trials["eval_started_at"], trials["eval_ended_at"]))
    began = trials["train_started_at"].min()
    print("seconds from the first training's start: training, evaluation",
          [[(round((a - began).total_seconds(), 1), round((b - began).total_seconds(), 1)) for a, b in pairs]
           for pairs in (training, evaluation)])
    assert all(start < end for start, end in training + evaluation)
    assert all(training[i][1] <= evaluation[i][0] for i in range(4))  # each evaluated after its training
    for i in range(3):
        assert overlaps(training[i + 1], evaluation[i]), (i, training, evaluation)
    assert trials["train_started_at"].is_monotonic_increasing  # one GPU: one training at a time
    assert all(training[i][1] <= training[i + 1][0] for i in range(3))

    # the model whose evaluation was cut off was evaluated on resume, not trained again
    last = trials.set_index("trial_key").loc[held.removeprefix("evaluation-")]
    assert last["train_ended_at"] < killed_at < last["eval_started_at"]
    trial_dir = experiment / last["tensorboard_dir"]
    progress = [line["step"] for line in result_lines(trial_dir) if not line.get("done")]
    assert progress == list(range(REPORT_EVERY, STEPS + 1, REPORT_EVERY))  # every report of one training
    # Tune saw scalars: the trained models' configs and timings, never a loss history or metric array
    for line in result_lines(trial_dir):
        assert line.get("evaluated") in (None, False)
        for member in line.get("members", []):
            assert "history" not in member
            assert all(not isinstance(v, (list, dict)) for k, v in member.items() if k != "config")
    assert (trials["device"] == "cpu").all() and trials["test_nll"].notna().all()
