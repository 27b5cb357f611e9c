"""Shared fixtures. One local Ray instance serves every test that needs Ray (ray.init costs ~6 s)."""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # ray.init would otherwise write a token to ~/.ray
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# Set before any Ray starts, so that every worker inherits it; the hook in sweeps.trainable acts only
# while the folder exists, i.e. inside a test that uses the ``checkpoint_signals`` fixture. One folder
# per test process: pytest-xdist's workers inherit the controller's environment, so the name is set
# here, in each process, never inherited (two workers' fault tests would release each other's trials).
os.environ["DISGEN_CHECKPOINT_SIGNAL_DIR"] = os.path.join(
    tempfile.gettempdir(), f"disgen-checkpoint-signals-{os.getpid()}")

# The node cache (data_pipeline.node_cache) of this test process and the Ray workers it starts:
# a temporary folder, never the user's ~/.cache; removed at exit by the process that made it.
# Tests that count materialisations use a folder of their own.
if "DISGEN_CACHE" not in os.environ:
    import atexit

    os.environ["DISGEN_CACHE"] = tempfile.mkdtemp(prefix="disgen-test-cache-")
    atexit.register(shutil.rmtree, os.environ["DISGEN_CACHE"], True)

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def ray_session():
    import ray

    # address="local": always a fresh instance, even if another Ray runs on this machine.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module's tests (``pytest.mark.usefixtures``): their models are tiny,
    and two threads on a busy 2-core machine spin and slow each step down many times over."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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


class CheckpointSignals:
    """The files that ``sweeps.trainable`` writes, where ``DISGEN_CHECKPOINT_SIGNAL_DIR`` is set, once a
    trial's checkpoint is reported: ``<trial dir name>-<step>``, holding the worker's pid. The worker
    waits until its file is deleted, so a test can act (kill the worker, its node or the driver) at
    a known checkpoint; ``hold`` keeps the one it wants and releases every other."""

    def __init__(self, folder):
        self.folder = folder
        folder.mkdir()

    def current(self) -> dict[str, int]:
        """The signals now waiting: file name -> pid."""
        return {p.name: int(p.read_text()) for p in self.folder.iterdir() if not p.name.endswith(".tmp")}

    def hold(self, wanted, timeout: float, alive=lambda: True, keep=()) -> tuple[str, int]:
        """Release every signal (but those named in ``keep``) until one whose name ``wanted(name)``
        accepts arrives; return its (name, pid) with that worker still waiting."""
        deadline = time.monotonic() + timeout
        while True:
            for name, pid in self.current().items():
                if wanted(name):
                    return name, pid
                if name not in keep:
                    (self.folder / name).unlink(missing_ok=True)
            assert time.monotonic() < deadline and alive(), "no checkpoint signal arrived"
            time.sleep(0.05)

    def release_all(self) -> None:
        for path in self.folder.iterdir():
            path.unlink(missing_ok=True)

    @contextlib.contextmanager
    def releasing(self):
        """Release every signal as it arrives, for as long as the block runs."""
        stop = threading.Event()

        def release():
            while not stop.is_set():
                self.release_all()
                stop.wait(0.05)

        thread = threading.Thread(target=release, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


@pytest.fixture
def checkpoint_signals():
    """The checkpoint signals of this test's trials; outside it the folder is gone and none wait."""
    import pathlib

    folder = pathlib.Path(os.environ["DISGEN_CHECKPOINT_SIGNAL_DIR"])
    shutil.rmtree(folder, ignore_errors=True)
    signals = CheckpointSignals(folder)
    yield signals
    shutil.rmtree(folder, ignore_errors=True)


# Two short trials (β 1 and 4, one split) with one cheap metric: for the tests of faults and storage,
# whose subject is where results land, not the metrics (the default preset's full evaluation is
# tested end to end in tests/test_paper_grid.py).
TWO_TRIAL_GRID = """
description: two tiny trials (β 1 and 4) with one cheap metric
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 2000, data_seed: 0,
        batch_size: 32, report_every: 5, n_nll: 100, n_metric: 200, metrics: [d_score], lr: 0.001,
        split: blank_side}
axes:
  beta: [1.0, 4.0]
scales:
  tiny: {steps: 20}
"""


@pytest.fixture
def two_trial_grid(tmp_path):
    """The path of a grid file with TWO_TRIAL_GRID (20 steps, a report every 5)."""
    path = tmp_path / "two-trials.yaml"
    path.write_text(TWO_TRIAL_GRID)
    return path


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need a CUDA device: skipped without one, the reason in the summary (-ra)."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device: torch.cuda.is_available() is False on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
