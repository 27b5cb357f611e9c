"""``--address auto`` where no Ray cluster runs: one line that says how to start one (or to drop
--address), exit code 2, no traceback, for the sweep and for ``data_pipeline.prepare``.

Each command runs as a user runs it, in a subprocess with no ``RAY_ADDRESS``. Ray's ``auto`` finds
a cluster by ``$RAY_ADDRESS``, the ``ray_current_cluster`` file of ``ray start`` in its temp folder,
and any raylet process it can see on the machine; the tests beside this one run local Rays, so the
command runs in a PID namespace of its own (``unshare``), where no other process is seen, with a
temp folder of its own. Where ``unshare`` is not allowed, it runs plainly if no Ray runs here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

SWEEP = ["-m", "sweeps.paper_grid", "--scale", "tiny", "--address", "auto"]
PREPARE = ["-m", "data_pipeline.prepare", "dsprites", "--n-images", "100", "--address", "auto"]


def _isolated() -> list[str] | None:
    """A command prefix under which no other process on this machine is seen; None if there is none."""
    unshare = shutil.which("unshare")
    if unshare:
        prefix = [unshare, "--pid", "--fork", "--mount-proc"]
        for extra in ([], ["--map-root-user"]):
            done = subprocess.run([*prefix, *extra, "true"], capture_output=True)
            if done.returncode == 0:
                return [*prefix, *extra]
    return None


def _run(arguments: list[str], tmp_path) -> subprocess.CompletedProcess:
    prefix = _isolated()
    if prefix is None:
        from ray._private.services import find_gcs_addresses

        if find_gcs_addresses():
            pytest.skip("another Ray runs on this machine and unshare is not allowed here, so "
                        "--address auto would join it")
        prefix = []
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    env["RAY_TMPDIR"] = str(tmp_path / "ray")  # no ray_current_cluster of another ray start
    return subprocess.run([*prefix, sys.executable, *arguments], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # two command lines, each importing its module in a subprocess: about 5 s each
@pytest.mark.parametrize("command", [
    [*SWEEP, "--storage-path", "{tmp}/results"],
    [*PREPARE, "--out", "{tmp}/dsprites"],
], ids=["paper_grid", "prepare"])
def test_address_auto_with_no_cluster_is_a_one_line_error(command, tmp_path):
    done = _run([a.replace("{tmp}", str(tmp_path)) for a in command], tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    assert "--address auto: no Ray cluster runs on this machine" in lines[0]
    assert "ray up cluster.yaml" in lines[0] and "ray start --head" in lines[0]
    assert "drop --address" in lines[0]
    assert not list(tmp_path.glob("results/*/*")) and not (tmp_path / "dsprites").exists()  # nothing run


def test_an_address_that_finds_a_cluster_is_not_refused(monkeypatch):
    from data_pipeline.prepare import missing_cluster

    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")  # Ray's own lookup takes it as found
    assert missing_cluster("auto") is None
    assert missing_cluster(None) is None and missing_cluster("local") is None
