"""How results are committed: one pair of small parts per finished trial (its history, written by
the trial, then its trials rows, written by the driver: the commit), each file whole, locally and
on an object store alike; readers merge the parts, the driver folds them every so many commits and
compacts them at the end; a crash between the writes shows no half-stored trial, and the resume
stores it."""

import os
import random
import subprocess
import sys
import textwrap
import types

import pandas as pd
import pytest
from sweep_runs import TWO_SHORT_TRIALS

from analysis.schema import HISTORY_FILE, TRIALS_FILE
from analysis.storage import PARTS_DIR, compact, new_part, read_results, write_history_part, write_results
from sweeps.paper_grid import main
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
        "exp", m["config"], [{"step": s, "loss": random.random()} for s in steps])])
    return types.SimpleNamespace(trial_id=f"t{seed}", last_result={"done": True, "members": members,
                                                                   "results_part": part})


def experiment_files(fs, inner):
    import pyarrow.fs as pafs

    return {info.path[len(inner) + 1:]: (info.size, info.mtime)
            for info in fs.get_file_info(pafs.FileSelector(inner, recursive=True))}


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "s3"])
def test_parts_merge_on_read_and_compact_into_the_two_files(where, tmp_path, request):
    if where == "s3":
        request.getfixturevalue("s3_server")
        experiment = "s3://disgen-test/runs/exp"
    else:
        experiment = str(tmp_path / "exp")
    write_results(experiment, [{"trial_key": "a", "test_nll": 1.0}],
                  [{"trial_key": "a", "step": s, "loss": 1.0} for s in (5, 10)])
    write_results(experiment, [{"trial_key": "b", "test_nll": 2.0}],
                  [{"trial_key": "b", "step": 5, "loss": 2.0}])
    # a trial written again (a resumed one) replaces its rows: the latest part wins
    write_results(experiment, [{"trial_key": "a", "test_nll": 3.0}],
                  [{"trial_key": "a", "step": 5, "loss": 3.0}])
    # a crash after the history part and before the trials part: that history stays hidden
    write_history_part(experiment, new_part(), [{"trial_key": "c", "step": 5, "loss": 9.0}])

    def check():
        trials = read_results(experiment, TRIALS_FILE).set_index("trial_key")
        assert trials["test_nll"].to_dict() == {"a": 3.0, "b": 2.0}
        history = read_results(experiment, HISTORY_FILE)
        assert sorted(zip(history["trial_key"], history["step"], history["loss"])) == [
            ("a", 5, 3.0), ("a", 10, 1.0), ("b", 5, 2.0)]

    check()
    assert compact(experiment) == 7
    check()
    assert compact(experiment) == 0
    import pyarrow.fs as pafs

    local = (pafs.LocalFileSystem(), experiment)
    fs, inner = pafs.FileSystem.from_uri(experiment) if where == "s3" else local
    assert sorted(experiment_files(fs, inner)) == [HISTORY_FILE, TRIALS_FILE]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_finished_trial_adds_a_part_and_leaves_the_big_files_alone(where, tmp_path, request):
    import pyarrow.fs as pafs

    from sweeps.results import ResultsWriter

    if where == "s3":
        request.getfixturevalue("s3_server")
        experiment = "s3://disgen-test/runs/exp"
        fs, inner = pafs.FileSystem.from_uri(experiment)
    else:
        experiment = inner = str(tmp_path / "exp")
        fs = pafs.LocalFileSystem()
    writer = ResultsWriter(experiment)
    for seed in range(3):
        writer.on_trial_complete(0, [], finished(experiment, seed, steps=range(5, 10001, 5)))
    compact(experiment)
    before = experiment_files(fs, inner)
    assert before[HISTORY_FILE][0] > 40_000

    writer.on_trial_complete(0, [], finished(experiment, 3))
    after = experiment_files(fs, inner)
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
    # A resume can run a finished trial again when the driver died after storing its row and
    # before Tune saved it as finished: the stored row and history stay as they were.
    from sweeps.results import ResultsWriter

    writer = ResultsWriter(str(tmp_path))
    first = finished(tmp_path, 0)
    writer.on_trial_complete(0, [], first)
    stored = read_results(str(tmp_path), TRIALS_FILE)
    history = read_results(str(tmp_path), HISTORY_FILE)
    again = finished(tmp_path, 0)  # its own history part, with other losses
    again.last_result["members"][0]["test_nll"] = 999.0
    writer.on_trial_complete(0, [], again)
    # a pack with it and a new model: only the new one is stored, with its own history
    pack = finished(tmp_path, 0, pack=(1,))
    pack.last_result["members"][0]["test_nll"] = 999.0
    writer.on_trial_complete(0, [], pack)
    after = read_results(str(tmp_path), TRIALS_FILE).set_index("trial_key")
    assert after["test_nll"].to_dict() == {stored["trial_key"][0]: 100.0, config(1)["trial_key"]: 101.0}
    assert len(read_results(str(tmp_path), HISTORY_FILE).query("trial_key == @config(1)['trial_key']")) == 2
    pd.testing.assert_frame_equal(
        read_results(str(tmp_path), HISTORY_FILE).query("trial_key == @stored.trial_key[0]"), history)


CRASH_BETWEEN_THE_WRITES = textwrap.dedent("""
    # The driver dies as it commits a finished trial's rows: the trial has written its history part.
    import os, sys
    from analysis.storage import ResultsStore
    def die(self, part, rows):
        print("dying between the writes", flush=True)
        os._exit(3)
    ResultsStore.commit = die
    from sweeps.paper_grid import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.slow
def test_a_crash_between_the_two_writes_shows_no_half_trial_and_the_resume_stores_it(ray_session, tmp_path):
    grid = tmp_path / "two.yaml"
    grid.write_text(TWO_SHORT_TRIALS)
    args = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp",
            "--max-concurrent-trials", "1", "--max-failures", "0"]
    env = {**os.environ, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address}
    crashed = subprocess.run([sys.executable, "-c", CRASH_BETWEEN_THE_WRITES, *args], env=env,
                             capture_output=True, text=True, timeout=300)
    assert crashed.returncode == 3, crashed.stdout[-3000:] + crashed.stderr[-3000:]
    experiment = tmp_path / "exp"
    # the history landed, the trials row did not
    (part,) = (experiment / PARTS_DIR).glob("*." + HISTORY_FILE)
    assert len(pd.read_parquet(part)) == 2 and not list((experiment / PARTS_DIR).glob("*." + TRIALS_FILE))
    assert not (experiment / TRIALS_FILE).exists()
    # what readers see: no trial, and no history without its trial
    assert read_results(str(experiment), TRIALS_FILE).empty
    assert read_results(str(experiment), HISTORY_FILE).empty

    # The resume, in this process and joined to the same Ray (only the crash needed a process of its
    # own). The trial's last recorded checkpoint is gone, so Tune's restore of it fails once (no retries:
    # a trial keeps the --max-failures of the run that made it) and it runs again from the start.
    assert main([*args, "--resume"]) == 0
    trials = read_results(str(experiment), TRIALS_FILE)
    assert len(trials) == 2 and trials["trial_key"].is_unique
    history = pd.read_parquet(experiment / HISTORY_FILE)
    assert not history.duplicated(["trial_key", "step"]).any()
    assert history.groupby("trial_key").size().to_dict() == dict.fromkeys(trials["trial_key"], 2)


def test_the_driver_folds_every_so_many_commits_and_a_resume_reads_the_keys_once(tmp_path):
    from analysis import storage
    from sweeps.results import ResultsWriter

    experiment = str(tmp_path / "exp")
    # a trial that has written its history part and not yet reported: the folds leave it alone
    running = finished(experiment, 9)
    writer = ResultsWriter(experiment, store=storage.ResultsStore(experiment, compact_every=2))
    for seed in range(5):
        writer.on_trial_complete(0, [], finished(experiment, seed))
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
    writer = ResultsWriter(experiment, store=store)
    writer.on_trial_complete(0, [], running)
    new = {p for p in os.listdir(tmp_path / "exp" / PARTS_DIR) if p.startswith(storage.COMPACTED)}
    new -= set(folded)
    assert len(new) == 2  # the sixth commit folded the two unfolded parts into a third pair
    assert store.compact() == 4 + 2 * 6 + 2
    assert sorted(os.listdir(tmp_path / "exp")) == [HISTORY_FILE, TRIALS_FILE]
    after = read_results(experiment, TRIALS_FILE)
    assert sorted(after["seed"]) == [0, 1, 2, 3, 4, 9]
    pd.testing.assert_frame_equal(after[after["seed"] < 9].reset_index(drop=True), trials)
    assert read_results(experiment, HISTORY_FILE).groupby("trial_key").size().tolist() == [2] * 6


def test_repair_stores_finished_trials_whose_rows_never_landed(tmp_path):
    # The driver died after Tune recorded the trials as finished and before their commit: the
    # resume's repair commits them from Tune's last results, with the history parts they wrote.
    from sweeps.results import repair, results_store

    experiment = str(tmp_path / "exp")
    done = [finished(experiment, seed).last_result for seed in (0, 1)]
    unfinished = {**finished(experiment, 2).last_result, "done": False}
    # a result of older disgen, whose history travelled in the result: stored all the same
    older = {"done": True, "members": [{"config": config(3), "test_nll": 1.0,
                                        "history": [{"step": 5, "loss": 2.0}]}]}
    store = results_store(experiment, fresh=True)
    assert repair(store, [done[0], None, unfinished, done[1], older]) == 3
    assert repair(store, [done[0], done[1], older]) == 0  # stored once
    trials = read_results(experiment, TRIALS_FILE)
    assert sorted(trials["seed"]) == [0, 1, 3] and trials["trial_key"].is_unique
    history = read_results(experiment, HISTORY_FILE)
    assert history.groupby("trial_key").size().to_dict() == {config(0)["trial_key"]: 2,
                                                              config(1)["trial_key"]: 2,
                                                              config(3)["trial_key"]: 1}


def test_a_reader_that_meets_a_compacted_part_reads_again(tmp_path, monkeypatch):
    from analysis import storage

    experiment = str(tmp_path / "exp")
    for key in "ab":
        write_results(experiment, [{"trial_key": key}], [{"trial_key": key, "step": 5}])
    real, listings = storage._listing, []

    def listing_then_compaction(fs, inner):
        listed = real(fs, inner)
        listings.append(listed)
        if len(listings) == 1:  # the driver compacts between the reader's listing and its reads
            monkeypatch.setattr(storage, "_listing", real)
            compact(experiment)
            monkeypatch.setattr(storage, "_listing", listing_then_compaction)
        return listed

    monkeypatch.setattr(storage, "_listing", listing_then_compaction)
    assert sorted(read_results(experiment, HISTORY_FILE)["trial_key"]) == ["a", "b"]
    assert [len(parts) for _, _, parts in listings] == [2, 0]  # the parts, gone: read again
