"""Every results file is written whole or not at all, on a local disk and on S3 (moto on loopback,
with faults injected): a write that raises halfway publishes nothing and leaves the previous
version intact, an interrupted compaction loses and duplicates nothing, a burst of 503s is
retried, a persistent failure raises and publishes nothing."""

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from s3_faults import is_put

from analysis import storage
from analysis.schema import HISTORY_FILE, TRIALS_FILE
from analysis.storage import PARTS_DIR, compact, read_results, write_results
from data_pipeline import prepared


class Interrupted(KeyboardInterrupt):
    """The second Ctrl-C, raised from inside a write."""


class HalfWritingStream:
    """A real output stream that takes half of what it is given, then raises (``Interrupted``)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, data):
        data = bytes(data)
        self.stream.write(data[:len(data) // 2])
        raise Interrupted

    def __enter__(self):
        return self

    def __exit__(self, *exc):  # as pyarrow's own streams do: close, and so publish, whatever happened
        self.stream.close()


class FailingFileSystem:
    """A real pyarrow file system whose ``fail_at``-th output stream (counting from 1) breaks
    halfway; everything else is the real one's."""

    def __init__(self, fs, fail_at=1):
        self.fs, self.fail_at, self.opened = fs, fail_at, 0
        # a store written through pyarrow's streams (the temporary, then the copy: on S3 without
        # boto3, or another object store); S3 with boto3 is one PutObject, which S3 shows whole
        # or not at all (test_on_s3_a_file_is_one_put_with_no_temporary_object)
        self.type_name = f"streams-of-{fs.type_name}"

    def open_output_stream(self, path, *args, **kwargs):
        self.opened += 1
        stream = self.fs.open_output_stream(path, *args, **kwargs)
        return HalfWritingStream(stream) if self.opened == self.fail_at else stream

    def __getattr__(self, name):
        return getattr(self.fs, name)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.slow)])
def experiment(request, tmp_path):
    if request.param == "s3":
        request.getfixturevalue("s3_server")
        return "s3://disgen-test/runs/exp"
    (tmp_path / "exp").mkdir()
    return str(tmp_path / "exp")


def all_files(experiment) -> dict[str, bytes]:
    fs, inner = storage.resolve(experiment)
    infos = fs.get_file_info(pafs.FileSelector(inner, recursive=True, allow_not_found=True))
    return {info.path[len(inner) + 1:]: storage.read_bytes(info.path, fs)
            for info in infos if info.type == pafs.FileType.File}


def table_bytes(rows: int) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"x": list(range(rows))}), sink)
    return sink.getvalue().to_pybytes()


def test_a_write_that_raises_halfway_publishes_nothing_and_keeps_the_old_file(experiment):
    fs, inner = storage.resolve(experiment)
    path = f"{inner}/{TRIALS_FILE}"
    with pytest.raises(Interrupted):  # a new file: none appears
        storage.write_whole(FailingFileSystem(fs), path, table_bytes(1000))
    assert all_files(experiment) == {}
    old = table_bytes(10)
    storage.write_whole(fs, path, old)
    with pytest.raises(Interrupted):  # over an old file: it stays as it was
        storage.write_whole(FailingFileSystem(fs), path, table_bytes(1000))
    with pytest.raises(ValueError):  # the content's own writer fails halfway: nothing is opened
        storage.write_whole(fs, path, lambda stream: (stream.write(b"PAR1" * 100), int("x")))
    assert all_files(experiment) == {TRIALS_FILE: old}  # and no temporary left beside it
    assert pq.read_table(pa.BufferReader(storage.read_bytes(path, fs))).num_rows == 10


def test_a_prepared_block_that_fails_halfway_is_absent(experiment, monkeypatch):
    import numpy as np

    fs, _ = prepared.filesystem(experiment)
    monkeypatch.setattr(prepared, "filesystem", lambda uri: (FailingFileSystem(fs), fs_path(uri)))
    with pytest.raises(Interrupted):
        prepared.write_block(experiment, 0, np.zeros((4, 1, 8, 8), np.uint8))
    assert all_files(experiment) == {}


def fs_path(uri):
    return storage.resolve(uri)[1]


def rows(keys, steps=(1, 2)):
    return ([{"trial_key": k, "test_nll": float(i)} for i, k in enumerate(keys)],
            [{"trial_key": k, "step": s, "loss": float(s)} for k in keys for s in steps])


def snapshot(experiment):
    trials = read_results(experiment, TRIALS_FILE).sort_values("trial_key").reset_index(drop=True)
    history = read_results(experiment, HISTORY_FILE).sort_values(["trial_key", "step"]).reset_index(drop=True)
    return trials[["trial_key", "test_nll", "status"]], history[["trial_key", "step", "loss"]]


@pytest.mark.parametrize("broken", [1, 2], ids=["history.parquet", "trials.parquet"])
def test_a_compaction_interrupted_inside_a_write_loses_and_duplicates_nothing(experiment, broken,
                                                                             monkeypatch):
    write_results(experiment, *rows(["a", "b"]))
    compact(experiment)  # the two tables exist: the interrupted compaction would overwrite them
    for key in ("c", "d", "e"):
        write_results(experiment, *rows([key]))
    before = snapshot(experiment)
    assert len(before[0]) == 5 and len(before[1]) == 10
    resolve = storage.resolve
    with monkeypatch.context() as patch, pytest.raises(Interrupted):
        patch.setattr(storage, "resolve", lambda *a: (FailingFileSystem(resolve(*a)[0], broken),
                                                      resolve(*a)[1]))
        compact(experiment)
    files = all_files(experiment)
    assert sum(name.startswith(PARTS_DIR) for name in files) == 6  # no part deleted
    assert not [name for name in files if name.endswith(".tmp")]
    for name, data in files.items():  # every file whole
        if name.endswith(".parquet"):
            pq.read_table(pa.BufferReader(data))
    for was, now in zip(before, snapshot(experiment)):
        assert was.equals(now)
    compact(experiment)  # the next compaction finishes the job
    assert sorted(all_files(experiment)) == [HISTORY_FILE, TRIALS_FILE]
    for was, now in zip(before, snapshot(experiment)):
        assert was.equals(now)


def test_a_burst_of_503s_is_retried_and_stores_each_row_once(faulty_s3):
    experiment = "s3://disgen-test/runs/exp"
    write_results(experiment, *rows(["a"]))
    faulty_s3.fail(is_put, times=2)
    write_results(experiment, *rows(["b", "c"]))
    assert faulty_s3.failed() == 2
    trials, history = snapshot(experiment)
    assert list(trials["trial_key"]) == ["a", "b", "c"] and len(history) == 6
    assert not [name for name in all_files(experiment) if name.endswith(".tmp")]


@pytest.mark.slow  # the SDK's own retries, with their backoff, before it gives up
def test_a_persistent_failure_raises_and_publishes_nothing(faulty_s3):
    experiment = "s3://disgen-test/runs/exp"
    fs, inner = storage.resolve(experiment)
    old = table_bytes(10)
    storage.write_whole(fs, f"{inner}/{TRIALS_FILE}", old)
    faulty_s3.fail(is_put)  # every upload refused
    with pytest.raises(OSError, match="SlowDown"):
        storage.write_whole(fs, f"{inner}/{TRIALS_FILE}", table_bytes(1000))
    faulty_s3.heal()
    assert all_files(experiment) == {TRIALS_FILE: old}


def test_on_s3_a_file_is_one_put_with_no_temporary_object(faulty_s3):
    """S3 shows a PutObject whole or not at all: no temporary, copy or delete (which a worker's
    policy denies under results-parts/, cluster/iam/worker-policy.json)."""
    experiment = "s3://disgen-test/runs/exp"
    write_results(experiment, *rows(["a"]))
    assert [(method, path.rsplit("/", 1)[1].split(".", 1)[1]) for method, path, _ in faulty_s3.requests] == [
        ("PUT", "history.parquet"), ("PUT", "trials.parquet")]
