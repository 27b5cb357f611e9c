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
from sweep_runs import wait_for

from analysis.storage import read_results

GRID = """
description: four one-model trials, each long enough to train while the one before is evaluated
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 2000, data_seed: 0,
        batch_size: 16, report_every: 25, n_nll: 1000, n_metric: 300, metrics: [d_score], lr: 0.001,
        split: blank_side}
axes:
  beta: [1.0, 2.0, 4.0, 8.0]
scales:
  tiny: {steps: 200}
"""
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


@pytest.mark.slow
def test_a_deferred_evaluation_reads_an_s3_checkpoint_and_gives_the_in_trial_metrics(tmp_path, s3_server):
    """``evaluate_saved`` (what each CPU-only task runs) on a final checkpoint in an object store:
    the metrics the trial would have computed itself, the loss history the checkpoint holds, and
    the model's final TensorBoard record uploaded beside its training's."""
    from types import SimpleNamespace

    import torch
    from conftest import S3_BUCKET

    from analysis import storage
    from data_pipeline.node_cache import open_reference
    from models import build_trainer
    from models.checkpoint import save_final
    from sweeps.data import plan_data
    from sweeps.evaluation import DeferredEvaluations, evaluate_model, evaluate_saved, split_rows
    from sweeps.grid import load_grid_file, trial_configs

    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID.replace("steps: 200", "steps: 10").replace("report_every: 25", "report_every: 5")
                    .replace("n_nll: 1000", "n_nll: 100"))
    trial = trial_configs(load_grid_file(str(grid)), "grid", "tiny", [0])[0]
    reference = plan_data([trial])[trial.data.key]
    data = open_reference(reference, trial.data.n_images, trial.data.data_seed)
    split, train_rows, _ = split_rows(trial, data)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer = build_trainer(trial.model, data.images, data.classes, data.factor_space, train_rows)
        history = list(trainer.run(report_every=5))
        in_trial = evaluate_model(trainer, trial, data, split, cpus=1)
        local = tmp_path / "checkpoint"
        local.mkdir()
        save_final(str(local), [trainer.model.state_dict()], [trainer.step], {}, [history],
                   {"members": [trial.to_dict()]})
        experiment = f"s3://{S3_BUCKET}/exp"
        checkpoint = storage.join(experiment, trial.dirname, "checkpoint_000000")
        for file in local.iterdir():  # the index and the model's own file
            storage.upload(str(file), storage.join(checkpoint, file.name))
        # a Tune checkpoint names its folder inside the store's file system: bucket/exp/...
        tune_checkpoint = SimpleNamespace(path=f"{S3_BUCKET}/exp/{trial.dirname}/checkpoint_000000")
        assert DeferredEvaluations(experiment)._checkpoint_location(tune_checkpoint) == checkpoint
        out = evaluate_saved({"config": trial.to_dict(), "position": 0, "checkpoint": checkpoint,
                              "reference": reference.to_dict(), "cpus": 1,
                              "tensorboard": storage.join(experiment, trial.dirname)})
    finally:
        torch.set_num_threads(threads)
    timings = ("eval_seconds", "eval_started_at", "eval_ended_at")
    assert set(out["metrics"]) == set(in_trial)
    deferred = out["metrics"]
    differing = {k: (deferred[k], in_trial[k]) for k in in_trial if k not in timings
                 and deferred[k] != in_trial[k] and not (pd.isna(deferred[k]) and pd.isna(in_trial[k]))}
    assert not differing  # the very same numbers
    assert in_trial["test_nll"] > 0 and in_trial["d_score"] >= 0
    assert out["history"] == history and out["step"] == 10
    assert out["metrics"]["eval_started_at"] < out["metrics"]["eval_ended_at"]
    assert any(name.startswith("events.out.tfevents")
               for name in storage.list_names(storage.join(experiment, trial.dirname)))


def test_a_trials_gpu_settings_take_its_share_of_the_gpu(monkeypatch):
    from sweeps.trainable import gpu_settings

    monkeypatch.setenv("DISGEN_GPU_SETTINGS", "tf32=off")
    settings = gpu_settings(0.25)
    assert settings.memory_share == 0.25 and settings.tf32 is False  # the share, on top of the switches
    assert gpu_settings(2).memory_share == 1.0  # more than one GPU: a process still uses one
    monkeypatch.delenv("DISGEN_GPU_SETTINGS")
    assert gpu_settings(0).memory_share == 1.0 and gpu_settings(0).tf32
