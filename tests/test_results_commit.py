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


def finished(experiment, seed, steps=(5, 10)):
    """A Tune trial as the results writer sees it when it finishes: its history part written, as
    the trial writes it before its final report, and its last result, which names that part."""
    member = {"config": config(seed), "test_nll": 100.0 + seed}
    part = new_part()
    write_history_part(experiment, part, history_rows("exp", member["config"],
                                                      [{"step": s, "loss": random.random()} for s in steps]))
    return types.SimpleNamespace(trial_id=f"t{seed}", last_result={"done": True, "members": [member],
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
    writer.on_trial_complete(0, [], finished(tmp_path, 1))
    after = read_results(str(tmp_path), TRIALS_FILE).set_index("trial_key")
    assert after["test_nll"].to_dict() == {stored["trial_key"][0]: 100.0, config(1)["trial_key"]: 101.0}
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
