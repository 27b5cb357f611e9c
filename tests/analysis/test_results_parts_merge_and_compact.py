"""How results are stored (analysis/storage.py), without Ray or the sweep: each write adds a pair of
small parts, readers merge them (the latest part of a trial wins, a history part without its trials
part stays hidden), compaction folds them into the two files, locally and on an object store alike,
and a reader that meets a compaction reads again. The driver's commits through the store are
checked in tests/sweeps/test_results_commit_by_the_driver.py, a crash between a real sweep's two
writes in tests/end_to_end/test_resume.py."""

import pytest
from report_rows import experiment_files

from analysis.schema import HISTORY_FILE, TRIALS_FILE
from analysis.storage import (
    PARTS_DIR,
    compact,
    new_part,
    read_results,
    uncommitted_parts,
    write_history_part,
    write_results,
)


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
    assert compact(experiment) == 6  # the three parts' files; the uncommitted history is not compaction's
    check()
    (uncommitted,) = uncommitted_parts(experiment)  # its trials row may be on its way: it stays ...
    assert sorted(experiment_files(experiment)) == sorted([
        HISTORY_FILE, TRIALS_FILE, PARTS_DIR, uncommitted.split("/exp/")[1]])
    assert compact(experiment, [uncommitted]) == 1  # ... unless named stale (a killed run's, ResultsStore)
    check()
    assert compact(experiment) == 0
    assert sorted(experiment_files(experiment)) == [HISTORY_FILE, TRIALS_FILE]


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_part_committed_while_compaction_runs_survives_it(where, tmp_path, request, monkeypatch):
    """Another driver (one that has not yet noticed it lost the lease) commits a part after this
    driver's compaction listed the parts: the compaction deletes only what it folded."""
    from analysis import storage

    if where == "s3":
        request.getfixturevalue("s3_server")
        experiment = "s3://disgen-test/runs/exp"
    else:
        experiment = str(tmp_path / "exp")
    write_results(experiment, [{"trial_key": "a"}], [{"trial_key": "a", "step": 5}])
    real_put, puts = storage._put, []

    def put_then_another_commit(fs, table, path):
        puts.append(path)
        if len(puts) == 1:  # compaction has listed and read the parts, and writes its tables
            write_results(experiment, [{"trial_key": "b"}], [{"trial_key": "b", "step": 5}])
        real_put(fs, table, path)

    monkeypatch.setattr(storage, "_put", put_then_another_commit)
    compact(experiment)
    monkeypatch.setattr(storage, "_put", real_put)
    assert sorted(read_results(experiment, TRIALS_FILE)["trial_key"]) == ["a", "b"]
    assert sorted(read_results(experiment, HISTORY_FILE)["trial_key"]) == ["a", "b"]
    compact(experiment)  # the next compaction folds it
    assert sorted(read_results(experiment, TRIALS_FILE)["trial_key"]) == ["a", "b"]
    assert sorted(experiment_files(experiment)) == [HISTORY_FILE, TRIALS_FILE]


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
