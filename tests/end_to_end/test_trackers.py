"""The trackers, each a whole sweep on the tests' Ray (sweeps/tracking.py): ``--mlflow`` logs each
model of a sweep as one MLflow run, in a local file store; ``--wandb`` as one Weights & Biases run,
written offline (W&B's offline mode writes each run as a transaction log,
``offline-run-*/run-ID.wandb``, for a later ``wandb sync``: read here record by record: the run,
its history and summary updates, its exit)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import struct
import threading

import pandas as pd
import pytest

from sweeps.paper_grid import main
from tests.sweep_runs import PACK_AND_LONE_MODEL as GRID


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None,
                    reason="mlflow is an optional extra: pip install -e '.[mlflow]'")
@pytest.mark.slow
def test_each_model_is_one_mlflow_run_with_its_settings_and_final_metrics(ray_session, tmp_path, capsys,
                                                                          monkeypatch):
    from mlflow.tracking import MlflowClient

    # --mlflow sets these for the driver's process (a file store allowed; MLflow names its URI): the
    # command's process ends with them, this test's goes on, so monkeypatch undoes them afterwards
    for name in ("MLFLOW_ALLOW_FILE_STORE", "MLFLOW_TRACKING_URI"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)

    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID)
    store = f"file://{tmp_path / 'mlruns'}"
    argv = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "tracked",
            "--pack-size", "2", "--mlflow", store]
    assert main(argv) == 0
    assert "Packing 3 trials into 2 packs of up to 2 models" in capsys.readouterr().out
    assert main([*argv, "--resume"]) == 0  # nothing left to run: no run added or changed
    trials = pd.read_parquet(tmp_path / "tracked" / "trials.parquet").set_index("trial_key")

    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("tracked")  # the disgen experiment's name
    runs = {run.data.tags["trial_key"]: run for run in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == sorted(trials.index)  # one run per model, the pack's members included
    for key, run in runs.items():
        row, config = trials.loc[key], json.loads(trials.loc[key, "config"])
        # the model's name, as disgen names it (its TensorBoard folder)
        assert run.info.run_name == os.path.basename(row["tensorboard_dir"])
        assert run.info.status == "FINISHED"
        params = run.data.params
        for setting in ("objective", "steps", "batch_size", "seed", "trial_key", "split", "n_images"):
            assert params[setting] == str(config[setting]), setting
        for metric in ("train_nll", "test_nll", "d_score"):
            assert run.data.metrics[metric] == pytest.approx(row[metric], rel=1e-9), metric
        loss = [m.step for m in client.get_metric_history(run.info.run_id, "loss")]
        # a lone model's run holds its progress; a pack's reports are means over its members
        assert loss == ([2, 4, 6] if config["objective"] == "factor_vae" else []), (key, loss)
    assert sorted(run.data.tags["tune_trial"].split("-")[0] for run in runs.values()) == [
        "blank_side", "pack2", "pack2"]



needs_wandb = pytest.mark.skipif(importlib.util.find_spec("wandb") is None,
                                 reason="wandb is an optional extra: pip install -e '.[wandb]'")

BLOCK, FULL, LAST = 32768, 1, 4  # the LevelDB log layout of a .wandb file: blocks of records in chunks


def records(path):
    """The protobuf records of a .wandb file."""
    from wandb.proto import wandb_internal_pb2

    data = open(path, "rb").read()
    ident, magic, _ = struct.unpack("<4sHB", data[:7])
    assert (ident, magic) == (b":W&B", 0xBEE1), path
    position, chunks = 7, b""
    while position + 7 <= len(data):
        if BLOCK - position % BLOCK < 7:  # a block's tail too short for a chunk header: padding
            position += BLOCK - position % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if not (length or kind):
            break
        chunks += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            chunks = b""
            yield record


def offline_run(path) -> dict:
    """A run's id, name, group, project, config, history ({metric: [(step, value)]}), summary and
    exit code, from its .wandb file."""
    run = {"history": {}, "summary": {}, "exit_code": None}
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.update(id=record.run.run_id, name=record.run.display_name, group=record.run.run_group,
                       project=record.run.project,
                       config={u.key: json.loads(u.value_json) for u in record.run.config.update})
        elif kind == "history":
            items = {(i.key or ".".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item}
            for name, value in items.items():
                if not name.startswith("_"):
                    run["history"].setdefault(name, []).append((items["_step"], value))
        elif kind == "summary":
            for u in record.summary.update:
                run["summary"][u.key or ".".join(u.nested_key)] = json.loads(u.value_json)
        elif kind == "exit":
            run["exit_code"] = record.exit.exit_code
    return run


@pytest.fixture
def trap():
    """A loopback server that counts the connections it is offered: W&B's server, for this test."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    calls = []

    def accept():
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            calls.append(connection.recv(200))
            connection.close()

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", calls
    server.close()


@needs_wandb
@pytest.mark.slow
def test_each_model_is_one_wandb_run_with_its_settings_and_final_metrics(ray_session, tmp_path, capsys,
                                                                        monkeypatch, trap):
    from sweeps.tracking import wandb_run_id

    base_url, calls = trap
    wandb_dir = tmp_path / "wandb-offline"
    wandb_dir.mkdir()
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    for name, value in {"WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir), "WANDB_SILENT": "true",
                        "WANDB_BASE_URL": base_url}.items():
        monkeypatch.setenv(name, value)
    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID)
    argv = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "tracked",
            "--pack-size", "2", "--wandb", "disgen-tests"]
    assert main(argv) == 0
    assert "Packing 3 trials into 2 packs of up to 2 models" in capsys.readouterr().out
    assert main([*argv, "--resume"]) == 0  # nothing left to run: no run added
    trials = pd.read_parquet(tmp_path / "tracked" / "trials.parquet").set_index("trial_key")

    files = sorted((wandb_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    runs = {run["config"]["trial_key"]: run for run in map(offline_run, files)}
    assert len(files) == len(runs) == 3
    assert sorted(runs) == sorted(trials.index)  # one run per model, the pack's members included
    for key, run in runs.items():
        row, config = trials.loc[key], json.loads(trials.loc[key, "config"])
        assert run["id"] == wandb_run_id("tracked", key)
        # the model's name, as disgen names it (its TensorBoard folder); grouped by the experiment
        assert run["name"] == os.path.basename(row["tensorboard_dir"])
        assert (run["group"], run["project"]) == ("tracked", "disgen-tests")
        for setting in ("objective", "steps", "batch_size", "seed", "split", "n_images", "metrics"):
            assert run["config"][setting] == config[setting], setting
        for metric in ("train_nll", "test_nll", "d_score"):
            assert run["summary"][metric] == pytest.approx(row[metric], rel=1e-9), metric
            assert run["history"][metric] == [(6, run["summary"][metric])], metric  # at the last step
        assert run["summary"]["status"] == "finished"
        assert run["exit_code"] == 0
        loss = [step for step, _ in run["history"].get("loss", [])]
        # a lone model's run holds its progress; a pack's reports are means over its members
        assert loss == ([2, 4, 6] if config["objective"] == "factor_vae" else []), (key, loss)
    assert sorted(run["config"]["tune_trial"].split("-")[0] for run in runs.values()) == [
        "blank_side", "pack2", "pack2"]
    assert calls == []  # offline: W&B's server was never called
