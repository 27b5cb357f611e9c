"""One driver per experiment folder: a lock file with host and pid, checked with real processes."""

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

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


def test_a_lock_from_another_host_is_refused_with_how_to_remove_it(tmp_path):
    (tmp_path / LOCK_FILE).write_text(json.dumps({"host": "other-host", "pid": 1, "started": 1.0}))
    with pytest.raises(UsageError, match=f"host other-host, pid 1.*delete .*{LOCK_FILE}"):
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
