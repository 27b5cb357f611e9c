"""--mlflow: each model of a sweep as one MLflow run, in a local file store (sweeps/tracking.py)."""

from __future__ import annotations

import importlib.util
import json
import os

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
