"""docs/cluster.md's step 4 against a Ray head with token authentication on, as the cluster runs it:
``ray get-auth-token --generate`` writes the token, a head started with ``RAY_AUTH_MODE=token``
and that token serves the job API, and the job commands of step 4, run by bash as printed (the
``export RAY_AUTH_MODE=token`` line included; only the address's port and the job's command are
this test's), submit a job that succeeds. Without the export the same submission is refused: Ray
2.60's job client sends ``~/.ray/auth_token`` only when ``RAY_AUTH_MODE=token`` is in its own
environment. A client with another token is refused too.

Nothing here touches the user's ``~/.ray`` or another Ray on the machine: HOME is a temporary
folder (where ``ray get-auth-token`` writes, and the head and the client read, the token), the head
has free ports and a temp folder of its own, and it is stopped by its process ids, never with
``ray stop`` (which stops every Ray on the machine).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def step_4_commands() -> list[str]:
    """docs/cluster.md's step 4 block, its lines joined where they continue."""
    doc = (ROOT / "docs" / "cluster.md").read_text()
    block = doc.split("4. **Run the sweep's driver as a Ray job**", 1)[1].split("```bash", 1)[1]
    block = block.split("```", 1)[0]
    lines = re.sub(r"\\\n\s*", "", block).splitlines()
    return [re.sub(r"\s+#\s.*$", "", line).strip() for line in lines if line.strip()]  # comments dropped


def _environment(home: Path, **extra) -> dict:
    """This process's environment without any RAY_ setting (the test suite's disables token
    authentication), with HOME a folder of the test's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, "HOME": str(home), **extra}


def _bash(script: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def head():
    """(dashboard URL, HOME with the token, the token) of a local head with token authentication."""
    if shutil.which("ray") is None:
        pytest.skip("the ray command is not on PATH")
    from ray._private.utils import get_dashboard_dependency_error

    missing = get_dashboard_dependency_error()  # the job API's server and client are ray[default]'s
    if missing:
        pytest.skip(f"Ray's dashboard and job client need ray[default] ({missing}); the test extra "
                    "installs it: pip install -e '.[test]'")
    base = Path(tempfile.mkdtemp(prefix="dgtok", dir="/tmp"))  # short: Ray's socket paths
    home = base / "home"
    home.mkdir()
    generated = _bash("ray get-auth-token --generate", _environment(home))
    assert generated.returncode == 0, generated.stderr
    token = (home / ".ray" / "auth_token").read_text().strip()
    assert token and generated.stdout.strip() == token  # written where the docs say, and printed
    gcs, dashboard, client, agent, agent_grpc, metrics, runtime_env = _free_ports(7)
    log = open(base / "head.log", "w")
    process = subprocess.Popen(
        ["ray", "start", "--head", "--block", f"--port={gcs}", "--num-cpus=1", "--include-dashboard=true",
         "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}", f"--ray-client-server-port={client}",
         f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
         f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={runtime_env}",
         f"--temp-dir={base / 'ray'}", "--disable-usage-stats"],
        env=_environment(home, RAY_AUTH_MODE="token"), stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, cwd=base)
    url = f"http://127.0.0.1:{dashboard}"
    try:
        deadline = time.monotonic() + 150
        while True:
            assert process.poll() is None, (base / "head.log").read_text()[-3000:]
            try:
                urllib.request.urlopen(f"{url}/api/version", timeout=5)
                break
            except urllib.error.HTTPError:  # it answers (an authentication refusal is an answer)
                break
            except OSError:
                assert time.monotonic() < deadline, (base / "head.log").read_text()[-3000:]
                time.sleep(1)
        yield url, home, token
    finally:
        _stop(process, base)
        log.close()
        shutil.rmtree(base, ignore_errors=True)


def _stop(process: subprocess.Popen, base: Path) -> None:
    """Stop the head this test started: its ``ray start --block`` (which stops its processes), then,
    by id, any process left whose command line names the head's own temp folder."""
    import psutil

    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    for _ in range(2):
        left = []
        for candidate in psutil.process_iter(["cmdline"]):
            try:
                if any(str(base) in part for part in candidate.info["cmdline"] or []):
                    left.append(candidate)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        for candidate in left:
            try:
                candidate.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(left, timeout=10)


def _as_printed(command: str, url: str) -> str:
    """A step-4 command with the head's address and this test's job in place of the sweep."""
    command = command.replace("http://localhost:8265", url)
    if " -- " in command:  # the job's own command: a quick one instead of the sweep
        command = command.split(" -- ", 1)[0] + " -- python -c \"print('the job ran')\""
    return command


def test_step_4_submits_with_the_exported_mode_and_is_refused_without_it(head):
    url, home, _ = head
    commands = step_4_commands()
    export = commands.index("export RAY_AUTH_MODE=token")
    submit = next(i for i, c in enumerate(commands) if c.startswith("ray job submit"))
    assert export < submit  # the docs set the mode before the first job command
    env = _environment(home)  # the laptop: the token in ~/.ray/auth_token, no RAY_AUTH_MODE

    refused = _bash(_as_printed(commands[submit], url), env)
    assert refused.returncode != 0
    assert "Authentication required" in refused.stdout + refused.stderr

    submitted = _bash("\n".join([commands[export], _as_printed(commands[submit], url)]), env)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    (job,) = set(re.findall(r"raysubmit_\w+", submitted.stdout + submitted.stderr))
    logs, status = (next(c for c in commands if c.startswith(f"ray job {name}"))
                    for name in ("logs", "status"))
    followed = _bash("\n".join([commands[export], _as_printed(logs, url).replace("raysubmit_...", job)]), env)
    assert followed.returncode == 0 and "the job ran" in followed.stdout, followed.stdout + followed.stderr
    ended = _bash("\n".join([commands[export], _as_printed(status, url).replace("raysubmit_...", job)]), env)
    assert re.search(rf"Job '{job}' succeeded", ended.stdout + ended.stderr), ended.stdout + ended.stderr


def test_a_client_with_another_token_is_refused(head, tmp_path):
    url, _, token = head
    other = tmp_path / "home"
    (other / ".ray").mkdir(parents=True)
    (other / ".ray" / "auth_token").write_text("0" * len(token))
    done = _bash(f"export RAY_AUTH_MODE=token\nray job list --address {url}", _environment(other))
    assert done.returncode != 0
    assert re.search(r"403|[Ii]nvalid", done.stdout + done.stderr), done.stdout + done.stderr
