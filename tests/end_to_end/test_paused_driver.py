"""A driver paused past its lease (SIGSTOP: a frozen machine, a container the host stopped) while a
second driver takes the experiment over: the second finishes the sweep; the first, woken, writes
nothing of disgen's records (results, parts, plan, lock) and exits as a Ctrl-C does; every finished
trial's row and history are readable once, none lost, none duplicated.

The first driver runs in a PID namespace of its own (``unshare --pid``; its /proc stays this
machine's, which Ray's client needs), as another container on this kernel would: so the second
judges its lock by its lease (by the store's clock), as it would judge a driver on another
machine. The lease is 30 s here (``DISGEN_LEASE_SECONDS``) so that the test waits seconds, not
minutes.

What this run shows is the whole story, not the fence alone: the woken driver's lease thread finds
the lock gone and stops the sweep before its Tune loop has a result to store, so with the fence
switched off this test still passes (tried). The fence itself, a write refused past the deadline
or under another driver's lock, is tested in tests/sweeps/test_driver_lease.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest
from sweep_runs import TWO_SHORT_TRIALS, Driver, ray_env, results, sweep_argv, wait_for

LEASE = 30  # renewals every 7.5 s: a late renewal under load must not stop the second driver

# disgen's own records in an experiment folder (Tune's files and the trials' folders are not them)
RECORDS = ("trials.parquet", "history.parquet", "plan.json", "driver.lock", "errors.jsonl")
RECORD_FOLDERS = ("results-parts", "errors-parts")


def records(experiment) -> dict[str, tuple[int, int]]:
    """(size, modification time in ns) of each of disgen's records in the experiment."""
    found = {}
    for name in RECORDS:
        if (experiment / name).exists():
            found[name] = (experiment / name).stat().st_size, (experiment / name).stat().st_mtime_ns
    for folder in RECORD_FOLDERS:
        for path in sorted((experiment / folder).glob("*")) if (experiment / folder).exists() else []:
            found[f"{folder}/{path.name}"] = path.stat().st_size, path.stat().st_mtime_ns
    return found


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_driver_paused_past_its_lease_writes_nothing_once_another_took_over(
        ray_session, tmp_path, checkpoint_signals):
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare")
    probe = subprocess.run(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a PID namespace here (unshare --pid): {probe.stderr[-300:]}")
    grid = tmp_path / "two.yaml"
    grid.write_text(TWO_SHORT_TRIALS.replace("steps: 10", "steps: 40"))  # checkpoints at 10, 20, 30
    argv = sweep_argv(grid, tmp_path, "exp", "--max-concurrent-trials", "1", "--checkpoint-every", "10",
                      "--checkpoint-minutes", "0")
    env = ray_env(ray_session, DISGEN_LEASE_SECONDS=str(LEASE))
    experiment = tmp_path / "exp"

    # 1. The first driver, in its own PID namespace: its first trial finishes and is stored; the
    # second waits at its checkpoint of step 20; then the driver is paused.
    first = Driver(["unshare", "--pid", "--fork", "--kill-child", *argv], env,
                   tmp_path / "first.log")
    try:
        held, _ = checkpoint_signals.hold(lambda name: name.endswith("-30"), 300, first.running)
        checkpoint_signals.release_all()
        wait_for(lambda: (experiment / "results-parts").exists() and any(
            p.name.endswith(".trials.parquet") for p in (experiment / "results-parts").iterdir()),
            120, first.output)
        checkpoint_signals.hold(lambda name: name.endswith("-20") and name[:-3] != held[:-3], 300,
                                first.running)
        os.killpg(first.process.pid, signal.SIGSTOP)
        paused = time.monotonic()

        # 2. The second driver, once the first's lease has run out by the store's clock, takes the
        # folder over and finishes the sweep.
        time.sleep(max(0.0, LEASE + 2 - (time.monotonic() - paused)))
        with checkpoint_signals.releasing():
            second = subprocess.run([*argv, "--resume"], env=env, capture_output=True, text=True, timeout=600)
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
        assert "taking over a stale lock" in second.stdout, second.stdout[-3000:]
        after_second = records(experiment)
        trials, history = results(experiment)

        # 3. The first wakes: past its deadline, it stops as a Ctrl-C stops it and writes nothing
        os.killpg(first.process.pid, signal.SIGCONT)
        first.process.wait(timeout=600)
    finally:
        if first.running():
            os.killpg(first.process.pid, signal.SIGCONT)
            first.kill()
    said = first.output()
    assert first.process.returncode == 1, said
    assert "past this driver's deadline" in said or "another driver" in said, said
    assert records(experiment) == after_second  # not one of disgen's records written or removed
    assert "driver.lock" not in after_second  # the second released it; the first did not write it again

    assert len(trials) == 2 and trials["trial_key"].is_unique and (trials["status"] == "finished").all()
    assert not history.duplicated(["trial_key", "step"]).any()
    assert history.groupby("trial_key")["step"].apply(list).to_dict() == dict.fromkeys(
        trials["trial_key"], [5, 10, 15, 20, 25, 30, 35, 40])
