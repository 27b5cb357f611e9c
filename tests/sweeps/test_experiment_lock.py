"""One driver per experiment folder: a lock file with host and pid, checked with real processes, and
with drivers that take it at the same moment, locally and on S3 (moto on loopback). Its lease
(renewal, expiry, a lost lease): tests/sweeps/test_driver_lease.py."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading

import pytest
from s3_faults import FaultyS3

from analysis import storage
from sweeps.errors import UsageError
from sweeps.lock import LOCK_FILE, ExperimentLock

HOLD = textwrap.dedent("""
    import sys, time
    from sweeps.lock import ExperimentLock
    ExperimentLock(sys.argv[1]).acquire()
    print("held", flush=True)
    time.sleep(120)
""")


def holder(folder):
    """A second Python process that takes the lock and keeps it."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_driver_is_refused_while_the_first_runs_and_takes_over_once_it_is_dead(tmp_path, capsys):
    first = holder(tmp_path)
    try:
        record = json.loads((tmp_path / LOCK_FILE).read_text())
        assert record["host"] == socket.gethostname() and record["pid"] == first.pid
        with pytest.raises(UsageError, match=f"in use by another driver .*pid {first.pid}"):
            ExperimentLock(str(tmp_path)).acquire()
        with pytest.raises(UsageError, match="in use by another driver"):
            ExperimentLock(str(tmp_path)).check_free()
    finally:
        first.kill()
        first.wait()
    # the holder died without releasing: its lock is stale, and the next driver takes it over
    lock = ExperimentLock(str(tmp_path))
    lock.acquire()
    assert "taking over a stale lock" in capsys.readouterr().out
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    lock.release()
    assert not (tmp_path / LOCK_FILE).exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no stale copies left behind


def test_a_reused_pid_does_not_keep_a_lock_alive(tmp_path):
    # the pid is alive (this very process) but it started long after the lock was taken
    (tmp_path / LOCK_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                                  "started": 1.0, "token": "old"}))
    with ExperimentLock(str(tmp_path)):
        assert json.loads((tmp_path / LOCK_FILE).read_text())["token"] != "old"


def test_a_fresh_lock_from_another_host_is_refused_until_its_lease_runs_out(tmp_path):
    (tmp_path / LOCK_FILE).write_text(json.dumps({"host": "other-host", "pid": 1, "started": 1.0}))
    with pytest.raises(UsageError, match="host other-host, pid 1.*its lease runs out in 120 s and the same "
                                         "command then takes the folder over"):
        ExperimentLock(str(tmp_path)).acquire()


def test_release_leaves_a_lock_that_another_driver_took(tmp_path):
    lock = ExperimentLock(str(tmp_path))
    lock.acquire()
    (tmp_path / LOCK_FILE).write_text(json.dumps({"host": "x", "pid": 1, "token": "theirs"}))
    lock.release()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["token"] == "theirs"


def test_the_lock_works_on_an_object_store(s3_server):
    url = "s3://disgen-test/runs/exp"
    first = subprocess.Popen([sys.executable, "-c", HOLD, url], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, **s3_server, "PYTHONPATH": os.getcwd()})
    try:
        assert first.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match=f"pid {first.pid}"):
            ExperimentLock(url).acquire()
    finally:
        first.kill()
        first.wait()
    with ExperimentLock(url) as lock:
        assert lock.read()["pid"] == os.getpid()
    assert ExperimentLock(url).read() is None


def race(url, drivers=8):
    """``drivers`` drivers (threads, each with its own lock object) take the lock at the same
    moment; each one's ExperimentLock if it got the lock, else its refusal."""
    barrier, outcomes = threading.Barrier(drivers), [None] * drivers

    def driver(i):
        lock = ExperimentLock(url)
        barrier.wait()
        try:
            lock.acquire()
            outcomes[i] = lock
        except UsageError as error:
            outcomes[i] = str(error)

    threads = [threading.Thread(target=driver, args=(i,)) for i in range(drivers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return outcomes


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.slow)])
def experiment_url(request, tmp_path, monkeypatch):
    if request.param == "s3":
        # S3 applies a conditional PUT atomically; moto checks, then writes: the proxy makes its
        # conditional PUTs one at a time, as S3's are (tests/s3_faults.py)
        proxy = FaultyS3(request.getfixturevalue("s3_server")["AWS_ENDPOINT_URL"], atomic_conditions=True)
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        request.addfinalizer(proxy.close)
        return "s3://disgen-test/runs/exp"
    return str(tmp_path / "exp")


@pytest.mark.parametrize("round", range(10))  # a lock that is not atomic loses some of these races
def test_of_drivers_started_at_the_same_moment_exactly_one_takes_the_lock(experiment_url, round):
    outcomes = race(experiment_url)
    held = [o for o in outcomes if isinstance(o, ExperimentLock)]
    assert len(held) == 1, outcomes
    for refusal in (o for o in outcomes if isinstance(o, str)):
        assert f"in use by another driver (host {socket.gethostname()}, pid {os.getpid()}" in refusal
        assert "wait for it to finish (or stop it), then run again" in refusal
    assert held[0].read()["token"] == held[0].record["token"]
    held[0].release()
    assert ExperimentLock(experiment_url).read() is None


def test_of_drivers_that_find_a_stale_lock_at_the_same_moment_exactly_one_takes_it_over(
        experiment_url, tmp_path, monkeypatch):
    temp = tmp_path / "temp"  # the machine's temporary folder: the takeover leaves nothing there
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale = {"host": socket.gethostname(), "pid": int(gone), "started": 1.0, "token": "gone"}
    fs, inner = storage.resolve(storage.join(experiment_url, LOCK_FILE))
    fs.create_dir(inner.rsplit("/", 1)[0], recursive=True)
    storage.write_whole(fs, inner, json.dumps(stale).encode())
    outcomes = race(experiment_url)
    held = [o for o in outcomes if isinstance(o, ExperimentLock)]
    assert len(held) == 1, outcomes
    assert all(f"pid {os.getpid()}" in o for o in outcomes if isinstance(o, str))
    held[0].release()
    assert list(temp.iterdir()) == []


def test_a_fresh_lock_on_s3_from_another_host_is_refused_until_its_lease_runs_out(s3_server):
    url = "s3://disgen-test/runs/exp"
    fs, inner = storage.resolve(storage.join(url, LOCK_FILE))
    storage.write_whole(fs, inner, json.dumps({"host": "other-host", "pid": 1, "started": 1.0}).encode())
    with pytest.raises(UsageError, match="host other-host, pid 1.*its lease runs out in 1[12][0-9] s"):
        ExperimentLock(url).acquire()
