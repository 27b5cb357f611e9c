"""A results file is read as one version (``analysis.storage._whole``): on S3 one ``GetObject`` of
the whole object, no ranges that compaction's rewrite could split between two versions; on another
store, a read across a change of the file (its size or modification time, before and after) is
read again, as a file compacted away meanwhile is, and never reaches the reader torn."""

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from s3_faults import FaultyS3

from analysis import storage
from analysis.schema import TRIALS_FILE
from analysis.storage import read_table, write_results
from data_pipeline import prepared


def rows(n, tag):
    return [{"experiment": "exp", "trial_key": f"{tag}{i:06d}", "status": "finished", "seed": i}
            for i in range(n)]


@pytest.mark.slow  # a moto server
def test_a_results_file_on_s3_is_read_in_one_get_of_the_whole_object(s3_server, monkeypatch):
    proxy = FaultyS3(s3_server["AWS_ENDPOINT_URL"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    prepared._S3_CLIENTS.clear()
    try:
        experiment = "s3://disgen-test/runs/exp"
        write_results(experiment, rows(20000, "a"))
        storage.compact(experiment)
        proxy.requests.clear()
        assert read_table(experiment).num_rows == 20000
        key = f"/disgen-test/runs/exp/{TRIALS_FILE}"
        gets = [status for method, path, status in proxy.requests if method == "GET" and path == key]
        assert gets == [200] and key not in proxy.ranged  # one answer: one version
    finally:
        proxy.close()
        prepared._S3_CLIENTS.clear()


class ReplacedWhileRead:
    """A file system (not the local one: read as a remote store is) whose first read of
    ``trials.parquet`` meets the driver's compaction: the file is replaced by ``new`` halfway, so
    the bytes read are the old file's first half and the new one's second half."""

    type_name = "other"

    def __init__(self, new: bytes):
        self.fs, self.new, self.reads = pafs.LocalFileSystem(), new, 0

    def open_input_stream(self, path):
        if not path.endswith(TRIALS_FILE):
            return self.fs.open_input_stream(path)
        self.reads += 1
        with self.fs.open_input_stream(path) as stream:
            old = stream.read()
        if self.reads == 1:
            with open(path, "wb") as file:
                file.write(self.new)
            return pa.BufferReader(old[:len(old) // 2] + self.new[len(old) // 2:])
        return pa.BufferReader(old)

    def __getattr__(self, name):
        return getattr(self.fs, name)


def test_a_read_across_a_rewrite_is_read_again_whole(tmp_path):
    new_experiment, experiment = tmp_path / "new", tmp_path / "exp"
    for folder, tag in ((experiment, "a"), (new_experiment, "b")):
        write_results(str(folder), rows(3000, tag))
        storage.compact(str(folder))
    fs = ReplacedWhileRead((new_experiment / TRIALS_FILE).read_bytes())
    table = read_table(str(experiment), filesystem=fs)
    assert fs.reads == 2  # the torn read was not used
    assert sorted(table.column("trial_key").to_pylist()) == [f"b{i:06d}" for i in range(3000)]
