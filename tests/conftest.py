"""Shared fixtures. One local Ray instance serves every test that needs Ray (ray.init costs ~6 s)."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

# the support modules (planted, sweep_runs, dataset_files...) live here, beside the package folders
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # ray.init would otherwise write a token to ~/.ray
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# MLflow's telemetry: importing mlflow outside a test (at collection, a module that imports
# sweeps.tracking) sets $_MLFLOW_TELEMETRY_SESSION_ID, and its background thread unsets it once its
# configuration cannot be fetched (no network here), at a moment no test controls, so the process-state
# check failed whichever test was running then, in some orders only. The tests send no telemetry:
# it is off before anything imports MLflow, here and in every process the tests start.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# Checkpoint signals (tests/checkpoint_signals.py): every ray.init of this process and of the
# drivers it starts (which inherit this environment) gives its workers the signals' setup hook; they
# act only while the folder exists, i.e. inside a test that uses the ``checkpoint_signals`` fixture.
# One folder per test process: pytest-xdist's workers inherit the controller's environment, so the
# name is set here, in each process, never inherited (two workers' fault tests would release each
# other's trials). The repository's root is on every subprocess's path, for ``tests.*``.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])
os.environ["RAY_RUNTIME_ENV_HOOK"] = "tests.checkpoint_signals.runtime_env_hook"
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


@pytest.fixture(autouse=True)
def process_state_unchanged(request):
    """Fails a test that leaves process-wide state changed (tests/process_state.py), after setting it
    back: Ray started or stopped, torch's switches, the environment, the directory, signal handlers.
    Which tests share a process depends on the order, so such a leak would fail some later test, in
    some orders only; here it fails the test that made it, in every order."""
    from process_state import changes, restore, snapshot

    before = snapshot()
    yield
    changed = changes(before, snapshot(), may_start_ray="ray_session" in request.fixturenames)
    if changed:
        restore(before)
        pytest.fail("this test left process-wide state changed, which later tests in the same process "
                    "would see (set it back in the test, e.g. with a fixture): " + "; ".join(changed),
                    pytrace=False)


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


def start_moto_server(port: int, environment: dict | None = None) -> subprocess.Popen:
    """moto's S3 server on loopback at ``port`` (with ``environment``, else this process's), once
    it accepts connections."""
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            if time.monotonic() > deadline:
                server.terminate()
                raise AssertionError("moto server did not start") from None
            time.sleep(0.2)


@pytest.fixture
def s3_server(monkeypatch):
    """A real S3-compatible server (moto's server mode) on loopback with the bucket ``disgen-test``;
    its AWS_* environment is set for this process and returned for subprocesses."""
    # moto[server] >= 5.2.5 is in the test extra (5.2.1 breaks pyarrow's multipart uploads)
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    port = _free_port()
    server = start_moto_server(port)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        environment = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test",
                       "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        import boto3

        boto3.session.Session().client("s3", endpoint_url=endpoint).create_bucket(Bucket=S3_BUCKET)
        yield environment
    finally:
        server.terminate()
        server.wait()


@pytest.fixture
def enforced_s3():
    """A moto S3 server that enforces the shipped IAM policies (tests/enforced_s3.py)."""
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    from enforced_s3 import EnforcedS3

    server = EnforcedS3(_free_port())
    yield server
    server.close()


@pytest.fixture
def checkpoint_signals():
    """The checkpoint signals of this test's trials; outside it the folder is gone and none wait."""
    import pathlib

    from tests.checkpoint_signals import CheckpointSignals

    folder = pathlib.Path(os.environ["DISGEN_CHECKPOINT_SIGNAL_DIR"])
    shutil.rmtree(folder, ignore_errors=True)
    signals = CheckpointSignals(folder)
    yield signals
    shutil.rmtree(folder, ignore_errors=True)


# Two short trials (β 1 and 4, one split) with one cheap metric: for the tests of faults and storage,
# whose subject is where results land, not the metrics (the default preset's full evaluation is
# tested end to end in tests/end_to_end/test_command.py).
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


# The end-to-end tests run whole sweeps on real Ray: each gets this long before pytest-timeout fails
# it, unless it names its own limit. The suite's 300 s (pyproject.toml) guards a unit test against a
# hang; a sweep's test takes 1-3 minutes on a quiet 2-core machine and two or three times that beside
# a busy process or the other xdist worker's sweeps. A limit is a hang guard, never a test of speed.
SWEEP_TIMEOUT_S = 900


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need a CUDA device: skipped without one, the reason in the summary (-ra).
    Tests in tests/end_to_end get ``SWEEP_TIMEOUT_S`` where they name no timeout of their own."""
    for item in items:
        if item.nodeid.startswith("tests/end_to_end/") and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SWEEP_TIMEOUT_S))
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device: torch.cuda.is_available() is False on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def faulty_s3(s3_server, monkeypatch):
    """The ``s3_server`` behind a proxy that fails the requests a test asks it to
    (``tests/s3_faults.py``), with ``AWS_ENDPOINT_URL`` pointed at the proxy."""
    from s3_faults import FaultyS3

    proxy = FaultyS3(s3_server["AWS_ENDPOINT_URL"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    yield proxy
    proxy.close()
