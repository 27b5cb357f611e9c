"""Shared fixtures. One local Ray instance serves every test that needs Ray (ray.init costs ~6 s)."""

import os
import socket
import subprocess
import sys
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # ray.init would otherwise write a token to ~/.ray
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def ray_session():
    import ray

    # address="local": always a fresh instance, even if another Ray runs on this machine.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


S3_BUCKET = "disgen-test"


@pytest.fixture
def s3_server(monkeypatch):
    """A real S3-compatible server (moto's server mode) on loopback with the bucket ``disgen-test``;
    its AWS_* environment is set for this process and returned for subprocesses."""
    # moto[server] >= 5.2.5 is in the test extra (5.2.1 breaks pyarrow's multipart uploads)
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    port = _free_port()
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

        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=S3_BUCKET)
        yield environment
    finally:
        server.terminate()
        server.wait()
