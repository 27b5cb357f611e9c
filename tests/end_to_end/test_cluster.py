"""The cluster's own faults and commands on this machine: several Ray nodes, over which trials
spread, and losing one mid-sweep loses no result (its trial is retried on the other node from its
last checkpoint, every report lands once); data reaching the nodes by reference (each caches a
prepared dataset once, no object store holds it, and a dataset too big for a node's cache fails its
models once, with the cache's error in their rows, never retried); and docs/cluster.md's step 4
against a Ray head with token authentication on, as the cluster runs it (the job commands run by
bash as printed submit a job that succeeds; without the ``export RAY_AUTH_MODE=token`` line, or with
another token, they are refused). Nothing here touches the user's ``~/.ray`` or another Ray on the
machine: the head has a temporary HOME, free ports and a temp folder of its own, and is stopped by
its process ids, never with ``ray stop`` (which stops every Ray on the machine)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sweep_runs import trial_dir_of


def reports(trial_dir):
    """Tune's record of a trial: result.json, one report a line (a line being written is skipped)."""
    path = trial_dir / "result.json"
    found = []
    for line in (path.read_text().splitlines() if path.exists() else []):
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return found


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_removed_nodes_trial_restores_from_its_checkpoint_on_the_other_node(tmp_path, checkpoint_signals,
                                                                             two_trial_grid):
    from ray.cluster_utils import Cluster

    # the nodes inherit DISGEN_CHECKPOINT_SIGNAL_DIR (tests/conftest.py): trials wait at checkpoints
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
        cluster.wait_for_nodes()
        argv = [sys.executable, "-m", "sweeps.paper_grid", "--grid", str(two_trial_grid), "--scale", "tiny",
                "--storage-path", str(tmp_path),
                "--name", "exp", "--max-failures", "3", "--checkpoint-every", "10"]
        env = {**os.environ, "RAY_ADDRESS": cluster.address}
        driver = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        experiment = tmp_path / "exp"
        running = lambda: driver.poll() is None
        # The known point: two trials, one on each node, both waiting at their checkpoint of step 10.
        first, _ = checkpoint_signals.hold(lambda name: name.endswith("-10"), 300, running)
        second, _ = checkpoint_signals.hold(lambda name: name.endswith("-10") and name != first, 300,
                                            running, keep=(first,))
        held = {trial_dir_of(name) for name in (first, second)}
        deadline = time.monotonic() + 30
        while not all(any(r["step"] == 10 for r in reports(experiment / d)) for d in held):
            assert time.monotonic() < deadline, "the checkpoint reports are not in result.json"
            time.sleep(0.2)
        node_of = {d: reports(experiment / d)[-1]["node_id"] for d in held}
        assert set(node_of.values()) == {w.node_id for w in workers}  # trials spread over both nodes
        (lost,) = [d for d in held if node_of[d] == workers[1].node_id]
        cluster.remove_node(workers[1])  # its trial fails and is retried on the other node
        with checkpoint_signals.releasing():
            out, _ = driver.communicate(timeout=600)
        assert driver.returncode == 0, out[-3000:]
    finally:
        cluster.shutdown()

    trials = pd.read_parquet(experiment / "trials.parquet")
    assert len(trials) == 2 and trials["trial_key"].is_unique
    history = pd.read_parquet(experiment / "history.parquet")
    assert history.groupby("trial_key")["step"].apply(list).to_dict() == dict.fromkeys(
        trials["trial_key"], [5, 10, 15, 20])  # every report once, none lost
    # Tune's record of the lost trial: reports to step 10 on the removed node, then, on the other
    # node, from step 15 on: the retried trial went on from its checkpoint of step 10 on storage
    record = reports(experiment / lost)
    removed, other = workers[1].node_id, workers[0].node_id
    assert [(r["step"], r["node_id"]) for r in record[:2]] == [(5, removed), (10, removed)]
    assert record[2]["step"] == 15 and record[2]["iterations_since_restore"] == 1
    assert all(r["node_id"] == other for r in record[2:])


NODE_GRID = """
description: four tiny trials on 25,000 dSprites images (98 MiB)
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 25000, data_seed: 0,
        batch_size: 32, report_every: 5, n_nll: 100, n_metric: 200, metrics: [d_score], lr: 0.001,
        split: blank_side}
axes:
  beta: [1.0, 2.0, 4.0, 8.0]
scales:
  tiny: {steps: 10}
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_nodes_smaller_than_the_data_cache_it_once_each_and_no_object_store_holds_it(tmp_path):
    """The data is rendered once, by Ray Data on the cluster, to shared storage (a folder every node
    sees); each node copies it into its own cache once; no object store ever holds it."""
    from ray._private.internal_api import node_stats
    from ray.cluster_utils import Cluster

    from data_pipeline import prepared
    from data_pipeline.node_cache import materialisations

    grid = tmp_path / "grid.yaml"
    grid.write_text(NODE_GRID)
    shared = tmp_path / "shared"
    shared.mkdir()
    caches = [tmp_path / f"node-{i}-cache" for i in range(3)]
    store = 80 * 2**20  # each node's object store: smaller than the data
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        # each node its own cache folder, as on separate machines
        nodes = [cluster.add_node(num_cpus=1, object_store_memory=store,
                                  env_vars={"DISGEN_CACHE": str(cache)}) for cache in caches]
        cluster.wait_for_nodes()
        argv = [sys.executable, "-m", "sweeps.paper_grid", "--grid", str(grid), "--scale", "tiny",
                "--storage-path", str(tmp_path), "--name", "exp", "--data-source", "procedural",
                "--data-dir", str(shared)]
        done = subprocess.run(argv, env={**os.environ, "RAY_ADDRESS": cluster.address}, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
        created = [node_stats(n.node_ip_address, n.node_manager_port, include_memory_info=False)
                   .store_stats.cumulative_created_bytes for n in nodes]
    finally:
        cluster.shutdown()

    (rendered,) = shared.iterdir()  # rendered once, to the shared folder, in the prepared layout
    manifest = prepared.read_manifest(rendered)
    images_bytes = sum(block["bytes"] for block in manifest["blocks"])
    assert manifest["built_by"] == "ray.data" and manifest["n_images"] == 25_000 and images_bytes > store
    trials = pd.read_parquet(tmp_path / "exp" / "trials.parquet")
    assert len(trials) == 4 and trials["trial_key"].is_unique and np.isfinite(trials["test_nll"]).all()
    assert set(trials["node_id"]) == {n.node_id for n in nodes}  # every node ran a trial
    assert set(trials["data_source"]) == {"procedural"} and set(trials["data_uri"]) == {str(rendered)}
    assert set(trials["data_content_id"]) == {manifest["content_id"]}
    for cache in caches:  # each node copied the data once, though one of them ran two trials
        (record,) = materialisations(cache)
        assert (record["kind"], record["content_id"], record["bytes"]) == ("prepared", manifest["content_id"],
                                                                            images_bytes)
    # every object any node's store ever held adds up to a sliver of the data: the images never went
    # through an object store (trials received a reference of a few hundred bytes)
    assert max(created) < images_bytes / 20, created



TOO_BIG_GRID = """
description: one short trial
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 1000, data_seed: 0,
        batch_size: 8, report_every: 5, n_nll: 50, n_metric: 50, dci_estimator: none, split: blank_side,
        metrics: [d_score], lr: 0.001}
axes:
  beta: [4.0]
scales:
  tiny: {steps: 10}
"""


@pytest.mark.slow  # a private Ray in a subprocess, one trial that fails at once
def test_a_dataset_too_big_for_the_node_cache_fails_its_models_once_without_a_retry(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(TOO_BIG_GRID)
    cache = tmp_path / "cache"
    argv = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp",
            "--max-failures", "2", "--num-cpus", "1"]
    env = {**os.environ, "DISGEN_CACHE": str(cache), "DISGEN_CACHE_LIMIT": "1M"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-m", "sweeps.paper_grid", *argv], capture_output=True, text=True,
                          timeout=600, env=env)
    # its model failed, as a diverged pack member does; no Tune trial crashed (the exit code counts those)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "FAILED blank_side-b4-s0-" in done.stdout and "NodeCacheFull" in done.stdout
    (row,) = pd.read_parquet(tmp_path / "exp" / "trials.parquet").to_dict("records")
    assert row["status"] == "failed" and row["error"].startswith("NodeCacheFull: the node cache on ")
    assert "limit is 1.0 MiB (1M ($DISGEN_CACHE_LIMIT))" in row["error"]
    assert "DISGEN_CACHE_LIMIT=200G" in row["error"]
    # Tune saw a finished trial, not a crash: no error file, so no retry
    assert not [f for _, _, files in os.walk(tmp_path / "exp") for f in files if f.startswith("error.")]
    assert not [p for p in cache.iterdir() if not p.name.startswith(".") and not p.name.endswith(".lock")]



ROOT = Path(__file__).resolve().parents[2]


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
    """A local head with token authentication: its dashboard URL, the HOME holding the token, the
    token, and the head's log."""
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
    # the ports are picked free, then bound by `ray start`: another test's server may take one in
    # between (two tests run at once), which kills the head; then it starts again on other ports
    for attempt in range(3):
        process, url = _start_head(base, home, base / f"ray{attempt}")
        if _answers(process, url, deadline=time.monotonic() + 150):
            break
        _stop(process, base)
        assert attempt < 2, (base / "head.log").read_text()[-3000:]
    try:
        yield Head(url, home, token, base / "head.log")
    finally:
        _stop(process, base)
        shutil.rmtree(base, ignore_errors=True)


@dataclasses.dataclass
class Head:
    url: str
    home: Path
    token: str
    log: Path

    def said(self, *done: subprocess.CompletedProcess) -> str:
        """What the commands printed, and the end of the head's log: a failure's whole story."""
        printed = "\n".join(d.stdout + d.stderr for d in done)
        return f"{printed}\n--- the head's log (end) ---\n{self.log.read_text()[-2000:]}"


def _start_head(base: Path, home: Path, temp: Path) -> tuple[subprocess.Popen, str]:
    gcs, dashboard, client, agent, agent_grpc, metrics, runtime_env = _free_ports(7)
    with open(base / "head.log", "w") as log:
        process = subprocess.Popen(
            ["ray", "start", "--head", "--block", f"--port={gcs}", "--num-cpus=1", "--include-dashboard=true",
             "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
             f"--ray-client-server-port={client}",
             f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
             f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={runtime_env}",
             f"--temp-dir={temp}", "--disable-usage-stats"],
            env=_environment(home, RAY_AUTH_MODE="token"), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=base)
    return process, f"http://127.0.0.1:{dashboard}"


def _answers(process: subprocess.Popen, url: str, deadline: float) -> bool:
    """Whether the head came up (its dashboard answers, and `ray start` still runs a few seconds
    later: it ends when one of the head's processes could not start)."""
    while process.poll() is None and time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/api/version", timeout=5)
        except urllib.error.HTTPError:  # it answers (an authentication refusal is an answer)
            pass
        except OSError:
            time.sleep(1)
            continue
        time.sleep(5)
        return process.poll() is None
    return False


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


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_step_4_submits_with_the_exported_mode_and_is_refused_without_it(head):
    url = head.url
    commands = step_4_commands()
    export = commands.index("export RAY_AUTH_MODE=token")
    submit = next(i for i, c in enumerate(commands) if c.startswith("ray job submit"))
    assert export < submit  # the docs set the mode before the first job command
    env = _environment(head.home)  # the laptop: the token in ~/.ray/auth_token, no RAY_AUTH_MODE

    refused = _bash(_as_printed(commands[submit], url), env)
    assert refused.returncode != 0, head.said(refused)
    assert "Authentication required" in refused.stdout + refused.stderr, head.said(refused)

    submitted = _bash("\n".join([commands[export], _as_printed(commands[submit], url)]), env)
    assert submitted.returncode == 0, head.said(submitted)
    (job,) = set(re.findall(r"raysubmit_\w+", submitted.stdout + submitted.stderr))
    logs, status = (next(c for c in commands if c.startswith(f"ray job {name}"))
                    for name in ("logs", "status"))
    followed = _bash("\n".join([commands[export], _as_printed(logs, url).replace("raysubmit_...", job)]), env)
    assert followed.returncode == 0 and "the job ran" in followed.stdout, head.said(followed)
    ended = _bash("\n".join([commands[export], _as_printed(status, url).replace("raysubmit_...", job)]), env)
    assert re.search(rf"Job '{job}' succeeded", ended.stdout + ended.stderr), head.said(ended)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_client_with_another_token_is_refused(head, tmp_path):
    other = tmp_path / "home"
    (other / ".ray").mkdir(parents=True)
    (other / ".ray" / "auth_token").write_text("0" * len(head.token))
    done = _bash(f"export RAY_AUTH_MODE=token\nray job list --address {head.url}", _environment(other))
    assert done.returncode != 0, head.said(done)
    assert re.search(r"403|[Ii]nvalid", done.stdout + done.stderr), head.said(done)
