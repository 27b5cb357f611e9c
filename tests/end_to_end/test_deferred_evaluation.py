"""Evaluation does not hold a GPU: on a Ray whose one GPU is logical (a CPU machine started with
``num_gpus=1``), four one-model trials that each reserve the GPU train one after another while the
driver evaluates each trained model in a CPU-only task. Shown by events, not clocks: each
evaluation is held at its start (a checkpoint signal, tests/checkpoint_signals.py) until the next
trial, which holds the one GPU, has written a checkpoint. A driver killed while an evaluation runs
loses nothing: ``--resume`` evaluates the trained model from its final checkpoint, without training
it again, and every model gets its row once. How long training and evaluation overlap is measured
by benchmarks/deferred_evaluation_overlap.py, not here."""

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

# four one-model trials, small: the events, not the speed, show the overlap
GRID = (FOUR_ONE_MODEL_TRIALS.replace("n_images: 2000", "n_images: 600")
        .replace("batch_size: 16", "batch_size: 8").replace("report_every: 25", "report_every: 5")
        .replace("n_nll: 1000", "n_nll: 50").replace("n_metric: 300", "n_metric: 100")
        .replace("steps: 200", "steps: 20"))
STEPS, REPORT_EVERY = 20, 5
EVALUATION = "evaluation-"


def result_lines(trial_dir) -> list[dict]:
    """Tune's record of a trial: result.json, one report a line."""
    return [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines()]


def is_checkpoint_of(signal_name: str, trial_key: str) -> bool:
    """Whether a training checkpoint's signal (``<trial's whole name>-<step>``) is ``trial_key``'s."""
    return signal_name.rsplit("-", 1)[0].endswith(trial_key)


def hold_in_pairs(signals, count: int, driver, log_text) -> tuple[list[tuple[str, str]], str]:
    """Hold each evaluation's signal and the first checkpoint signal of the trial that trains next
    until both wait at the same time (both processes alive, mid-work), then release the two; after
    ``count`` such pairs, hold the next evaluation and return (the pairs, that evaluation's signal).
    Every other signal is released as it comes."""
    pairs: list[tuple[str, str]] = []
    held_evaluation = held_checkpoint = first_trial = None
    seen, paired_trials = set(), set()
    deadline = time.monotonic() + 300  # a bound on the wait, not a measurement
    while True:
        for name in signals.current():
            if name in seen:  # released already (listed before it was)
                continue
            trial = name.rsplit("-", 1)[0]
            first_trial = first_trial or (None if name.startswith(EVALUATION) else trial)
            if name.startswith(EVALUATION) and held_evaluation is None:
                held_evaluation = name
            elif (not name.startswith(EVALUATION) and held_checkpoint is None and trial != first_trial
                  and trial not in paired_trials and len(pairs) < count):
                held_checkpoint = name
            elif name not in (held_evaluation, held_checkpoint):
                seen.add(name)
                (signals.folder / name).unlink(missing_ok=True)
        waiting = signals.current()
        if len(pairs) == count and held_evaluation in waiting:
            return pairs, held_evaluation
        if held_evaluation in waiting and held_checkpoint in waiting and not is_checkpoint_of(
                held_checkpoint, held_evaluation.removeprefix(EVALUATION)):
            pairs.append((held_evaluation, held_checkpoint))
            paired_trials.add(held_checkpoint.rsplit("-", 1)[0])
        for name in (held_evaluation, held_checkpoint):
            if name is not None and (pairs and name in pairs[-1] or name not in waiting):
                seen.add(name)  # paired, or gone by itself (its wait ran out): not held again
                (signals.folder / name).unlink(missing_ok=True)
        held_evaluation = held_evaluation if held_evaluation not in seen else None
        held_checkpoint = held_checkpoint if held_checkpoint not in seen else None
        assert driver.poll() is None, log_text()
        assert time.monotonic() < deadline, (
            f"no evaluation ran while the next trial trained: does evaluation hold the GPU? (pairs so far: "
            f"{pairs}; held: {held_evaluation}, {held_checkpoint})\n{log_text()[-3000:]}")
        time.sleep(0.05)


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
            "--storage-path", str(tmp_path), "--name", "exp", "--gpus-per-trial", "1",
            "--checkpoint-every", "5"]
    env = {**os.environ, "RAY_ADDRESS": cluster.address}
    experiment = tmp_path / "exp"
    try:
        log = open(tmp_path / "driver.log", "w")
        log_text = (tmp_path / "driver.log").read_text
        driver = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            # Each trained model's evaluation (a CPU-only task) and the next trial's first checkpoint
            # (that trial holds the one GPU) are held until both wait at once: the GPU trains the next
            # trial while the CPUs evaluate. After three such pairs, the fourth evaluation is held while
            # the driver is killed.
            pairs, held = hold_in_pairs(checkpoint_signals, 3, driver, log_text)
            wait_for(lambda: len(read_results(str(experiment))) == 3, 120, "the first three models' rows")
            wait_for(lambda: len(read_results(str(experiment))) == 3, 120, "the first three models' rows")
        finally:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        out = log_text()
        # auto sizing asked the GPU node, found its GPU logical, and said so
        assert "Pack size 1: auto: 1 on CPUs" in out and "logical" in out
        before = read_results(str(experiment))
        cut_off = held.removeprefix(EVALUATION)
        assert len(before) == 3 and cut_off not in set(before["trial_key"])
        evaluated = [name.removeprefix(EVALUATION) for name, _ in pairs]
        assert sorted(evaluated) == sorted(before["trial_key"])  # each overtaken evaluation, committed

        checkpoint_signals.release_all()
        with checkpoint_signals.releasing() as released:
            resumed = subprocess.run([*argv, "--resume"], env=env, capture_output=True, text=True,
                                     timeout=600)
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    finally:
        cluster.shutdown()

    # the model whose evaluation was cut off was evaluated on resume, and nothing trained again
    assert released == [held], released
    trials = pd.read_parquet(experiment / "trials.parquet")
    history = pd.read_parquet(experiment / "history.parquet")
    # every model once, with its loss history once
    assert len(trials) == 4 and trials["trial_key"].is_unique
    assert history.groupby("trial_key")["step"].apply(list).to_dict() == dict.fromkeys(
        trials["trial_key"], list(range(REPORT_EVERY, STEPS + 1, REPORT_EVERY)))
    # the first three rows are kept as they were written
    kept = trials.set_index("trial_key").loc[before["trial_key"], "finished_at"]
    assert (kept.to_numpy() == before["finished_at"].to_numpy()).all()

    # (its loss history is one training's: above) and Tune, in the resume's new run, saw no training
    last = trials.set_index("trial_key").loc[cut_off]
    trial_dir = experiment / last["tensorboard_dir"]
    assert [line["step"] for line in result_lines(trial_dir) if not line.get("done")] == []
    # Tune saw scalars: the trained models' configs and timings, never a loss history or metric array
    for line in result_lines(trial_dir):
        assert line.get("evaluated") in (None, False)
        for member in line.get("members", []):
            assert "history" not in member
            assert all(not isinstance(v, (list, dict)) for k, v in member.items() if k != "config")
    assert (trials["device"] == "cpu").all() and trials["test_nll"].notna().all()
