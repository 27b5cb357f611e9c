"""How the driver commits results (sweeps/results.py) through the store, without Ray: one pair of
small parts per finished trial (its history, written by the trial, then its trials rows, written by
the driver: the commit), each file whole, locally and on an object store alike; a trial that
finishes again keeps its first stored row, the driver folds the parts every so many commits, and a
resume reads the stored keys once (what a resume then runs: tests/sweeps/test_resume_plans.py).
How the store merges and compacts parts is checked in
tests/analysis/test_results_parts_merge_and_compact.py, a crash between a real sweep's two writes
in tests/end_to_end/test_resume.py."""

import os
import random
import types

import pandas as pd
import pytest
from report_rows import experiment_files

from analysis.schema import HISTORY_FILE, TRIALS_FILE
from analysis.storage import PARTS_DIR, ResultsStore, compact, new_part, read_results, write_history_part
from sweeps.results import history_rows
from sweeps.trials import TrialConfig


def config(seed):
    return TrialConfig.complete({"dataset": "dsprites", "split": "blank_side", "n_images": 100,
                                 "data_seed": 0, "report_every": 5, "n_nll": 10, "n_metric": 10,
                                 "architecture": "burgess", "objective": "beta_vae", "steps": 10, "beta": 1.0,
                                 "seed": seed}).to_dict()


def finished(experiment, seed, steps=(5, 10), pack=()):
    """A Tune trial as the results writer sees it when it finishes: its history part written, as
    the trial writes it before its final report, and its last result, which names that part. With
    ``pack``, the seeds of more members trained with it."""
    members = [{"config": config(s), "test_nll": 100.0 + s} for s in (seed, *pack)]
    part = new_part()
    write_history_part(experiment, part, [row for m in members for row in history_rows(
        "exp", m["config"]["trial_key"], [{"step": s, "loss": random.random()} for s in steps])])
    return types.SimpleNamespace(trial_id=f"t{seed}", last_result={"done": True, "members": members,
                                                                   "results_part": part},
                                 config={"members": [m["config"] for m in members]},
                                 checkpoint=None)  # no final checkpoint here: no checkpoints to clear


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_finished_trial_adds_a_part_and_leaves_the_big_files_alone(where, tmp_path, request):
    from sweeps.results import ResultsWriter

    if where == "s3":
        request.getfixturevalue("s3_server")
        experiment = "s3://disgen-test/runs/exp"
    else:
        experiment = str(tmp_path / "exp")
    writer = ResultsWriter(ResultsStore(experiment))
    for seed in range(3):
        writer.completed(finished(experiment, seed, steps=range(5, 10001, 5)))
    compact(experiment)
    before = experiment_files(experiment)
    assert before[HISTORY_FILE][0] > 40_000

    writer.completed(finished(experiment, 3))
    after = experiment_files(experiment)
    assert after[HISTORY_FILE] == before[HISTORY_FILE] and after[TRIALS_FILE] == before[TRIALS_FILE]
    new = sorted(p for p in set(after) - set(before) if p.endswith(".parquet"))  # files, not the folder
    assert len(new) == 2 and all(p.startswith(PARTS_DIR + "/") for p in new)
    part = next(p for p in new if p.endswith(HISTORY_FILE))
    assert after[part][0] < before[HISTORY_FILE][0] / 5  # one trial's rows, not the whole file
    trials = read_results(experiment, TRIALS_FILE)
    assert sorted(trials["seed"]) == [0, 1, 2, 3] and trials["trial_key"].is_unique
    history = read_results(experiment, HISTORY_FILE)
    assert history.groupby("trial_key").size().sort_values().tolist() == [2, 2000, 2000, 2000]


def test_a_trial_that_finishes_again_keeps_its_first_stored_row(tmp_path):
    # A trial can finish again (a driver killed after storing its row, before Tune ended the
    # trial; a sampled model Optuna asks for twice): the stored row and history stay as they were.
    from sweeps.results import ResultsWriter

    writer = ResultsWriter(ResultsStore(str(tmp_path)))
    first = finished(tmp_path, 0)
    writer.completed(first)
    stored = read_results(str(tmp_path), TRIALS_FILE)
    history = read_results(str(tmp_path), HISTORY_FILE)
    again = finished(tmp_path, 0)  # its own history part, with other losses
    again.last_result["members"][0]["test_nll"] = 999.0
    writer.completed(again)
    # a pack with it and a new model: only the new one is stored, with its own history
    pack = finished(tmp_path, 0, pack=(1,))
    pack.last_result["members"][0]["test_nll"] = 999.0
    writer.completed(pack)
    after = read_results(str(tmp_path), TRIALS_FILE).set_index("trial_key")
    assert after["test_nll"].to_dict() == {stored["trial_key"][0]: 100.0, config(1)["trial_key"]: 101.0}
    assert len(read_results(str(tmp_path), HISTORY_FILE).query("trial_key == @config(1)['trial_key']")) == 2
    pd.testing.assert_frame_equal(
        read_results(str(tmp_path), HISTORY_FILE).query("trial_key == @stored.trial_key[0]"), history)


def test_the_driver_folds_every_so_many_commits_and_a_resume_reads_the_keys_once(tmp_path):
    from analysis import storage
    from sweeps.results import ResultsWriter

    experiment = str(tmp_path / "exp")
    # a trial that has written its history part and not yet reported: the folds leave it alone
    running = finished(experiment, 9)
    writer = ResultsWriter(storage.ResultsStore(experiment, compact_every=2))
    for seed in range(5):
        writer.completed(finished(experiment, seed))
    trials = read_results(experiment, TRIALS_FILE)
    history = read_results(experiment, HISTORY_FILE)
    assert sorted(trials["seed"]) == [0, 1, 2, 3, 4]
    assert history.groupby("trial_key").size().tolist() == [2] * 5
    parts = sorted(os.listdir(tmp_path / "exp" / PARTS_DIR))
    folded = [p for p in parts if p.startswith(storage.COMPACTED)]
    assert len(folded) == 4 and len(parts) == 4 + 2 * 5 + 1  # two folded pairs; the parts stay until the end
    # what a reader reads: the folded pairs and the one part no fold holds yet
    _, pairs, unfolded = storage._listing(*storage.resolve(experiment))
    assert len(pairs) == 2 and len(storage._committed(*storage.resolve(experiment))) == 3

    # a resume opens the store again: the stored keys and the unfolded part, from one read
    store = storage.ResultsStore(experiment, compact_every=2)
    assert store.keys == set(trials["trial_key"]) and len(store.unfolded) == 1
    writer = ResultsWriter(store)
    writer.completed(running)
    new = {p for p in os.listdir(tmp_path / "exp" / PARTS_DIR) if p.startswith(storage.COMPACTED)}
    new -= set(folded)
    assert len(new) == 2  # the sixth commit folded the two unfolded parts into a third pair
    assert store.compact() == 4 + 2 * 6 + 2
    assert sorted(os.listdir(tmp_path / "exp")) == [HISTORY_FILE, TRIALS_FILE]
    after = read_results(experiment, TRIALS_FILE)
    assert sorted(after["seed"]) == [0, 1, 2, 3, 4, 9]
    pd.testing.assert_frame_equal(after[after["seed"] < 9].reset_index(drop=True), trials)
    assert read_results(experiment, HISTORY_FILE).groupby("trial_key").size().tolist() == [2] * 6


def test_in_training_checkpoints_go_once_the_rows_are_stored_and_every_model_was_evaluated(
        tmp_path, monkeypatch):
    """A trial with a final checkpoint: its in-training checkpoints are deleted once its rows are
    stored and none of its models failed; where a model failed (its final checkpoint did not
    evaluate, say) or the rows could not be stored, they stay, for the resume to go on from."""
    from sweeps import results
    from sweeps.checkpoints import TRAINING_PREFIX, checkpoint_folder
    from sweeps.errors import StopSignal
    from sweeps.results import ResultsWriter

    experiment = str(tmp_path / "exp")
    writer = ResultsWriter(ResultsStore(experiment), stop=StopSignal())

    def with_checkpoints(trial, error=None):
        trial.checkpoint = "final"  # Tune's record of the final checkpoint
        if error is not None:
            trial.last_result["members"][0]["error"] = error
        _, folder = checkpoint_folder(experiment, [TrialConfig.complete(c) for c in trial.config["members"]])
        for step in (5, 10):
            os.makedirs(f"{folder}/{TRAINING_PREFIX}{step:010d}")
        return trial, folder

    stored, stored_folder = with_checkpoints(finished(experiment, 0))
    failed, failed_folder = with_checkpoints(finished(experiment, 1), error="evaluation: corrupt checkpoint")
    writer.completed(stored)
    writer.completed(failed)
    assert os.listdir(stored_folder) == []
    assert len(os.listdir(failed_folder)) == 2
    unstored, unstored_folder = with_checkpoints(finished(experiment, 2))
    monkeypatch.setattr(results, "WRITE_ATTEMPTS", 1)
    monkeypatch.setattr(results, "_commit", lambda store, outcome: (_ for _ in ()).throw(OSError("SlowDown")))
    writer.completed(unstored)
    assert writer.failure and len(os.listdir(unstored_folder)) == 2
