"""The driver lock is a lease (``sweeps.lock``): renewed by its driver, judged stale by the store's
own clock once it is not, so a driver on a new head machine takes over the folder of one that died
with no manual step, and a live driver's renewed lease is never taken; a driver whose renewal is
refused (another took the lock) stops as a Ctrl-C stops it, with exit 1 and its resume command.
Locally and on S3 (moto on loopback, behind the proxy that applies conditional writes atomically).
Time passes on the store, not in the test: a lock is made to read as written long ago (``age``:
its modification time moved back; on S3 the proxy's ``Last-Modified``), so nothing waits for a
lease to run out."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading

import pytest
from s3_faults import FaultyS3

from analysis import storage
from sweeps import lock as lock_module
from sweeps.errors import UsageError
from sweeps.lock import LOCK_FILE, ExperimentLock

OLD_HEAD = {"host": "old-head", "boot_id": "the-old-head-machine", "pid": 4242, "started": 1.0,
            "token": "old"}


class Store:
    """An experiment folder (``url``), and ``age(seconds)``: its lock reads as last written that
    long ago."""

    def __init__(self, url: str, proxy: FaultyS3 | None = None):
        self.url, self.proxy = url, proxy

    def age(self, seconds: float) -> None:
        if self.proxy is not None:
            self.proxy.age("/" + storage.join(self.url, LOCK_FILE).removeprefix("s3://"), seconds)
        else:
            path = os.path.join(self.url, LOCK_FILE)
            then = os.stat(path).st_mtime - seconds
            os.utime(path, (then, then))


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path, monkeypatch):
    if request.param == "s3":
        proxy = FaultyS3(request.getfixturevalue("s3_server")["AWS_ENDPOINT_URL"], atomic_conditions=True)
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        request.addfinalizer(proxy.close)
        return Store("s3://disgen-test/runs/exp", proxy)
    return Store(str(tmp_path / "exp"))


@pytest.fixture
def experiment_url(store):
    return store.url


def write_lock(url, record):
    fs, inner = storage.resolve(storage.join(url, LOCK_FILE))
    fs.create_dir(inner.rsplit("/", 1)[0], recursive=True)
    storage.write_whole(fs, inner, json.dumps(record).encode())


def on_the_old_head(monkeypatch):
    """Locks taken from now on name another machine (until the returned function is called)."""
    me = lock_module._me
    monkeypatch.setattr(lock_module, "_me",
                        lambda: {**me(), "host": "old-head", "boot_id": "the-old-head-machine"})
    return lambda: monkeypatch.setattr(lock_module, "_me", me)


def test_an_expired_lease_from_another_host_is_taken_over(store, capsys):
    write_lock(store.url, OLD_HEAD)
    lock = ExperimentLock(store.url, lease_s=120)
    with pytest.raises(UsageError, match=r"host old-head, pid 4242.*its lease runs out in \d+ s"):
        lock.acquire()  # fresh: its driver may be alive
    store.age(200)  # not renewed since, for longer than its lease
    lock.acquire()
    try:
        assert "taking over a stale lock" in capsys.readouterr().out
        assert lock.read()["token"] == lock.record["token"] != "old"
    finally:
        lock.release()
    assert ExperimentLock(store.url).read() is None


def test_a_renewed_lease_is_refused_however_long_ago_it_was_taken(store, monkeypatch):
    back = on_the_old_head(monkeypatch)
    holder = ExperimentLock(store.url, lease_s=120, renew_s=3600)  # renewed below, by hand
    holder.acquire()
    back()
    try:
        store.age(1000)  # taken long ago: stale, had it not been renewed since
        assert holder.renew()
        with pytest.raises(UsageError, match=r"host old-head.*its lease was renewed \d+ s ago"):
            ExperimentLock(store.url, lease_s=120).acquire()
        assert holder.lost is None and holder.read()["token"] == holder.record["token"]
    finally:
        holder.release()


def test_a_resume_from_a_new_host_after_the_old_driver_died_needs_no_manual_step(store, monkeypatch):
    back = on_the_old_head(monkeypatch)
    old = ExperimentLock(store.url, lease_s=120, renew_s=3600)
    old.acquire()
    back()
    old._stop.set()  # the old head dies: no more renewals, no release
    old._thread.join()
    new = ExperimentLock(store.url, lease_s=120)
    with pytest.raises(UsageError, match="the same command then takes the folder over"):
        new.acquire()  # its lease has not run out yet
    store.age(200)  # now it has
    new.acquire()  # the same command, run again
    assert new.read()["host"] != "old-head"
    new.release()


@pytest.mark.slow  # a renewal thread, every 0.2 s
def test_a_driver_whose_renewal_is_refused_learns_it_and_leaves_the_other_drivers_lock(experiment_url):
    lost = threading.Event()
    lock = ExperimentLock(experiment_url, renew_s=0.2, on_lost=lambda reason: lost.set())
    lock.acquire()
    write_lock(experiment_url, OLD_HEAD)  # another driver took it over
    assert lost.wait(10)
    assert "another driver took over the driver lock" in lock.lost
    lock.release()
    assert ExperimentLock(experiment_url).read() == OLD_HEAD


def lock_renewal(method, path, headers) -> bool:
    """A rule (tests/s3_faults.py): a renewal of the lock, a PUT conditional on its ETag."""
    return method == "PUT" and path.split("?")[0].endswith("/" + LOCK_FILE) and \
        "if-match" in {k.lower() for k in headers}


@pytest.mark.slow  # a renewal thread, every 0.2 s
def test_a_renewal_applied_whose_answer_is_lost_keeps_the_lease(s3_server, monkeypatch):
    """S3 applies the renewal, its answer is lost, the SDK sends it again with the old ETag and is
    refused (412): the lock, read back, holds this driver's token, so the driver still holds it."""
    proxy = FaultyS3(s3_server["AWS_ENDPOINT_URL"], atomic_conditions=True)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    lost = threading.Event()
    lock = ExperimentLock("s3://disgen-test/runs/exp", renew_s=0.2, on_lost=lambda reason: lost.set())
    try:
        lock.acquire()
        proxy.lose(lock_renewal, times=1)
        assert not lost.wait(3), lock.lost  # renewals every 0.2 s, the first one's answer lost
        assert len(proxy.lost) == 1 and proxy.lost[0][2] == 200  # applied, then its answer lost
        renewals = [status for method, path, status in proxy.requests
                    if method == "PUT" and path.endswith("/" + LOCK_FILE)]
        assert 412 in renewals and renewals[-1] == 200  # the SDK's resend refused; later ones renewed
        assert lock.read()["token"] == lock.record["token"] and lock.read()["renewals"] >= 3
        lock.release()
        assert lock.read() is None
    finally:
        lock.release()
        proxy.close()


@pytest.mark.slow  # a renewal thread, every 0.2 s, and the SDK's retries of each
def test_a_driver_that_cannot_renew_stops_before_its_lease_runs_out(s3_server, monkeypatch):
    """Every renewal fails (the store does not answer): the driver gives the folder up by its own
    clock, one renewal before the lease would run out, so it has stopped before another driver may
    take the folder over."""
    proxy = FaultyS3(s3_server["AWS_ENDPOINT_URL"], atomic_conditions=True)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # one 503 is one failed renewal
    reasons = []
    lost = threading.Event()
    lock = ExperimentLock("s3://disgen-test/runs/exp", lease_s=3.0, renew_s=0.5,
                          on_lost=lambda reason: (reasons.append(reason), lost.set()))
    try:
        lock.acquire()
        started = len(proxy.requests)
        proxy.fail(lock_renewal, times=None)
        assert lost.wait(30)
        assert "could not renew the driver lock" in reasons[0] and "3 s lease runs out" in reasons[0]
        failed = [r for r in proxy.requests[started:] if r[2] == 503]
        assert len(failed) >= 2  # a failed renewal is tried again until the deadline
    finally:
        proxy.heal()
        lock.release()
        proxy.close()


@pytest.mark.slow  # imports Ray
def test_the_command_stops_as_a_ctrl_c_does_when_its_lease_is_taken(tmp_path, capsys, monkeypatch):
    import sweeps.driver
    from sweeps.paper_grid import main

    monkeypatch.setattr(lock_module, "RENEW_S", 0.2)

    def running(sweep, stop, fence=None):  # a sweep that runs until it is stopped
        write_lock(sweep.experiment_dir, OLD_HEAD)  # meanwhile another driver took the folder over
        assert stop.received.wait(10)
        return sweeps.driver.SweepSummary(trials=None, failed=0, seconds=1.0, stop=stop)

    monkeypatch.setattr(sweeps.driver, "run", running)
    argv = ["--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "Stopped: another driver took over the driver lock" in out
    assert f"Resume with:  python -m sweeps.paper_grid {' '.join(argv)} --resume\n" in out
    assert json.loads((tmp_path / "exp" / LOCK_FILE).read_text()) == OLD_HEAD  # the other's, untouched


@pytest.mark.slow  # imports Ray
def test_a_stop_asked_from_the_lease_thread_ends_tunes_run_without_an_error():
    import signal

    from ray.tune.tune import _setup_signal_catching

    from sweeps.errors import StopSignal
    from sweeps.ray_edge import bridge_signals

    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    tune_stopped = _setup_signal_catching()  # Tune's own handler, as a run installs it
    stop = StopSignal()
    try:
        bridge_signals(stop)
        errors = []

        def lease_thread():
            try:
                stop.request("another driver took over the driver lock")
            except Exception as error:  # what the thread would die of
                errors.append(error)

        thread = threading.Thread(target=lease_thread)
        thread.start()
        thread.join(10)
        assert not errors and tune_stopped.is_set() and stop.received.is_set()
        assert stop.reason == "another driver took over the driver lock"
    finally:  # both handlers bridge_signals replaced, as the driver's ``with stop`` puts them back
        for signum, handler in before.items():
            signal.signal(signum, handler)


def test_a_driver_past_its_deadline_or_its_lease_writes_no_result(store, monkeypatch):
    """The results store asks the lock before every write (``ExperimentLock.fence``): a driver whose
    monotonic clock shows its deadline passed with no renewal (it was paused: SIGSTOP, a frozen
    machine) commits, folds and compacts nothing; neither does one whose lock another driver
    holds, found by reading the lock back before compaction's deletes."""
    import time

    from analysis.schema import TRIALS_FILE
    from analysis.storage import ResultsStore, new_part, read_results
    from sweeps.lock import LeaseLost

    lock = ExperimentLock(store.url)
    lock.acquire()
    try:
        results = ResultsStore(store.url, fence=lock.fence)
        results.commit(new_part(), [{"trial_key": "a", "status": "finished"}])
        real, woke = time.monotonic, time.monotonic() + lock.lease_s  # paused a whole lease long
        monkeypatch.setattr(lock_module.time, "monotonic", lambda: woke)
        with pytest.raises(LeaseLost, match="past this driver's deadline"):
            results.commit(new_part(), [{"trial_key": "b", "status": "finished"}])
        with pytest.raises(LeaseLost):
            results.compact()
        monkeypatch.setattr(lock_module.time, "monotonic", real)  # awake, within its lease, but ...
        write_lock(store.url, OLD_HEAD)  # meanwhile another driver took the folder over
        with pytest.raises(LeaseLost, match="another driver holds"):
            results.compact()
        assert read_results(store.url, TRIALS_FILE)["trial_key"].tolist() == ["a"]
    finally:
        lock.release()


HOLD_IN_A_CONTAINER = """
import sys, time
from sweeps.lock import ExperimentLock

lock = ExperimentLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
time.sleep(120)
"""


def test_a_live_driver_in_another_container_on_this_kernel_is_judged_by_its_lease(tmp_path):
    """Containers on one kernel share its boot id; each has its own PID namespace, where the other's
    pid names another process or none. A live driver there is not taken for a dead one here."""
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare")
    url = str(tmp_path / "exp")
    # the driver in a PID namespace of its own, with its own /proc, as in another container: its pid
    # there is 1 or 2, which here is another process
    # (--kill-child: the driver ends with unshare, which the test kills)
    holder = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc",
                               sys.executable, "-c", HOLD_IN_A_CONTAINER, url],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline()
        if line.strip() != "held":
            pytest.skip(f"cannot make a PID namespace here (unshare --pid): {holder.stderr.read()[-500:]}")
        record = ExperimentLock(url).read()
        assert record["boot_id"] == lock_module.boot_id()  # the same kernel ...
        assert record["pid_namespace"] != lock_module.pid_namespace()  # ... another container
        with pytest.raises(UsageError, match="its lease runs out in"):
            ExperimentLock(url).acquire()
    finally:
        holder.kill()
        holder.wait()


def test_the_lease_is_set_by_its_variable_and_a_bad_value_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DISGEN_LEASE_SECONDS", "20")
    lock = ExperimentLock(str(tmp_path / "exp"))
    assert (lock.lease_s, lock.renew_s) == (20.0, 5.0)
    for bad in ["2", "ten", "1e9", "nan"]:
        monkeypatch.setenv("DISGEN_LEASE_SECONDS", bad)
        with pytest.raises(UsageError, match=rf"\$DISGEN_LEASE_SECONDS='{bad}': .* from 8 to 86400"):
            ExperimentLock(str(tmp_path / "exp"))
