"""One deferred evaluation (sweeps/evaluation.py), run as its CPU-only task runs it but without Ray:
from a final checkpoint in an object store (moto's S3 server), the very metrics the trial would
have computed itself. The GPU trials that defer their evaluations, and a driver killed while they
run, are tests/end_to_end/test_deferred_evaluation.py."""

from __future__ import annotations

import pandas as pd
import pytest
from sweep_runs import FOUR_ONE_MODEL_TRIALS as GRID


@pytest.mark.slow
def test_a_deferred_evaluation_reads_an_s3_checkpoint_and_gives_the_in_trial_metrics(tmp_path, s3_server):
    """``evaluate_saved`` (what each CPU-only task runs) on a final checkpoint in an object store:
    the metrics the trial would have computed itself, the loss history the checkpoint holds, and
    the model's final TensorBoard record uploaded beside its training's."""

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
        tune_checkpoint = f"{S3_BUCKET}/exp/{trial.dirname}/checkpoint_000000"
        assert DeferredEvaluations(experiment, tasks=None)._checkpoint_location(tune_checkpoint) == checkpoint
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
    assert all(isinstance(out["metrics"][name], float) for name in timings)  # recorded, for the row
    assert any(name.startswith("events.out.tfevents")
               for name in storage.list_names(storage.join(experiment, trial.dirname)))
