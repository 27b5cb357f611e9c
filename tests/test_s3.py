"""Object storage: a whole sweep against a real S3-compatible server (moto) on loopback."""

import os
import socket
import subprocess
import sys
import time

import pandas as pd
import pytest

pytest.importorskip("moto.server", reason="moto[server] is in the test extra")  # 5.2.1 breaks pyarrow uploads


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def s3_server(monkeypatch):
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "moto server did not start"
                time.sleep(0.2)
        environment = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test",
                       "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        import boto3

        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="disgen-test")
        yield environment
    finally:
        server.terminate()
        server.wait()


@pytest.mark.slow
def test_a_sweep_writes_its_results_to_s3(s3_server, tmp_path):
    import pyarrow.fs as pafs

    argv = [sys.executable, "-m", "sweeps.paper_grid", "--scale", "tiny", "--storage-path",
            "s3://disgen-test/runs", "--name", "exp", "--address", "local", "--max-concurrent-trials", "2"]
    done = subprocess.run(argv, env={**os.environ, **s3_server}, capture_output=True, text=True, timeout=400,
                          cwd=tmp_path)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert "4 of 4 trials finished" in done.stdout

    fs, _ = pafs.FileSystem.from_uri("s3://disgen-test/runs")
    trials = pd.read_parquet("disgen-test/runs/exp/trials.parquet", filesystem=fs)
    history = pd.read_parquet("disgen-test/runs/exp/history.parquet", filesystem=fs)
    assert len(trials) == 4 and len(history) == 16
    selector = pafs.FileSelector("disgen-test/runs/exp", recursive=True)
    files = [info.path for info in fs.get_file_info(selector)]
    assert sum("tfevents" in f for f in files) >= 4  # TensorBoard files synced as trial artifacts
    assert any("/checkpoint_" in f for f in files)
    assert not os.path.exists(tmp_path / "disgen_results")
