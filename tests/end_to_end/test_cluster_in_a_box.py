"""The cluster in a box: a Ray head and two worker nodes on this machine, and an S3 server (moto, on
loopback) that enforces the IAM policies as shipped (tests/enforced_s3.py). The head node, and the
driver, hold the head's access key; each worker node holds the worker's, as the instance profiles
of cluster.yaml give them (docs/cluster.md). The head has no CPU for trials, so every trial, and
every write a trial makes, runs on a worker node with the worker's credentials: a tiny grid and a
tiny Optuna search finish with every model stored and no trial in ERROR, and a process on a worker
node that tries to write what only the driver writes (the plan, the results tables, the parts that
commit rows, the lock, the Optuna study) is refused by S3."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
from enforced_s3 import BUCKET
from sweep_runs import TWO_SHORT_TRIALS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

STORAGE = f"s3://{BUCKET}/disgen"

OPTUNA_GRID = TWO_SHORT_TRIALS + """search:
  metric: test_nll
  mode: min
  space:
    beta: {loguniform: [0.25, 16.0]}
"""


@pytest.fixture(scope="module")
def box():
    """(the S3 server, the Ray cluster's address, the worker nodes' ids)."""
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    from conftest import _free_port
    from enforced_s3 import EnforcedS3
    from ray.cluster_utils import Cluster

    server = EnforcedS3(_free_port())
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False, "env_vars": server.env("head")})
    try:
        workers = [cluster.add_node(num_cpus=1, env_vars=server.env("worker")) for _ in range(2)]
        cluster.wait_for_nodes()
        yield server, cluster.address, {w.node_id for w in workers}
    finally:
        cluster.shutdown()
        server.close()


def run_driver(box, tmp_path, grid_text: str, name: str, *extra: str) -> subprocess.CompletedProcess:
    """``python -m sweeps.paper_grid`` on the box, as its driver runs it: the head's credentials."""
    server, address, _ = box
    grid = tmp_path / f"{name}.yaml"
    grid.write_text(grid_text)
    argv = [sys.executable, "-m", "sweeps.paper_grid", "--grid", str(grid), "--scale", "tiny",
            "--storage-path", STORAGE, "--name", name, "--max-failures", "0", *extra]
    env = {**os.environ, **server.env("head"), "RAY_ADDRESS": address}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)


def stored(box, monkeypatch, name: str) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """The experiment's trials and history tables, and every key under it, read as the head."""
    import boto3

    import analysis

    server = box[0]
    for variable, value in server.env("head").items():
        monkeypatch.setenv(variable, value)
    s3 = boto3.session.Session().client("s3", endpoint_url=server.endpoint)
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
            for o in page.get("Contents", [])]
    uri = f"{STORAGE}/{name}"
    return analysis.load_trials(uri), analysis.load_history(uri), keys


def test_a_tiny_grid_finishes_with_every_trials_writes_under_the_worker_policy(box, tmp_path, monkeypatch):
    done = run_driver(box, tmp_path, TWO_SHORT_TRIALS, "grid")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 of 2 trials finished" in done.stdout, done.stdout[-3000:]
    trials, history, keys = stored(box, monkeypatch, "grid")
    assert len(trials) == 2 and (trials["status"] == "finished").all() and trials["trial_key"].is_unique
    assert set(trials["node_id"]) <= box[2]  # trained on worker nodes, with the worker's key
    assert history.groupby("trial_key")["step"].apply(list).to_dict() == dict.fromkeys(
        trials["trial_key"], [5, 10])  # each trial's history part, written by its worker
    experiment = [k for k in keys if k.startswith("disgen/grid/")]
    assert not [k for k in experiment if k.rsplit("/", 1)[-1].startswith("error")], experiment
    assert [k for k in experiment if "tfevents" in k]  # TensorBoard files, uploaded by the workers
    assert any(k.startswith("checkpoints/") for k in keys)  # checkpoints and seals, by the workers
    # Tune's per-trial records stay off the bucket: each save of Tune's state would upload them all again
    assert not [k for k in experiment if k.endswith(("/result.json", "/progress.csv", "/params.json"))]


def test_a_tiny_optuna_search_finishes_under_the_worker_policy(box, tmp_path, monkeypatch):
    done = run_driver(box, tmp_path, OPTUNA_GRID, "optuna", "--search", "optuna", "--num-samples", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    trials, history, keys = stored(box, monkeypatch, "optuna")
    assert len(trials) == 2 and (trials["status"] == "finished").all()
    assert set(trials["node_id"]) <= box[2]
    assert len(history) == 4  # two reports each, both trials' histories stored
    assert "disgen/optuna/optuna.jsonl" in keys  # the study, uploaded by the driver


WORKER_WRITES = """
import json, sys
import ray

ray.init(address=sys.argv[1], log_to_driver=False)


@ray.remote(num_cpus=1)
def write(paths):
    from analysis import storage

    fs, _ = storage.resolve("s3://{bucket}/disgen")
    said = {{}}
    for path in paths:
        try:
            storage.write_whole(fs, path, b"written by a worker")
            said[path] = "written"
        except OSError as error:
            said[path] = "AccessDenied" if "AccessDenied" in str(error) else repr(error)
    return ray.get_runtime_context().get_node_id(), said


print(json.dumps(ray.get(write.remote(json.loads(sys.argv[2])))))
"""


def test_a_process_on_a_worker_node_may_not_write_what_the_driver_writes(box, tmp_path):
    server, address, worker_nodes = box
    base = f"{BUCKET}/disgen/grid"
    denied = [f"{base}/plan.json", f"{base}/trials.parquet", f"{base}/history.parquet",
              f"{base}/results-parts/20261129T000000000000Z-0a1b2c3d.trials.parquet",
              f"{base}/driver.lock", f"{base}/optuna.jsonl"]
    allowed = [f"{base}/results-parts/20261129T000000000000Z-0a1b2c3d.history.parquet"]
    script = tmp_path / "write.py"
    script.write_text(WORKER_WRITES.format(bucket=BUCKET))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # the node's own key only
    done = subprocess.run([sys.executable, str(script), address, json.dumps(denied + allowed)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    node, said = json.loads(done.stdout.strip().splitlines()[-1])
    assert node in worker_nodes
    assert {path: said[path] for path in denied} == dict.fromkeys(denied, "AccessDenied")
    assert {path: said[path] for path in allowed} == dict.fromkeys(allowed, "written")
