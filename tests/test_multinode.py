"""Several nodes: trials spread over them, and losing a node mid-sweep loses no result."""

import json
import os
import subprocess
import sys
import time

import pandas as pd
import pytest


def nodes_seen(experiment):
    """The Ray node ids in every report of every trial so far (result.json, one line a report)."""
    seen = set()
    for result_file in experiment.glob("*/result.json"):
        for line in result_file.read_text().splitlines():
            try:
                seen.add(json.loads(line).get("node_id"))
            except json.JSONDecodeError:  # a line being written
                pass
    return seen - {None}


@pytest.mark.slow
def test_trials_spread_over_nodes_and_a_removed_node_loses_nothing(tmp_path):
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
        cluster.wait_for_nodes()
        argv = [sys.executable, "-m", "sweeps.paper_grid", "--scale", "tiny", "--storage-path", str(tmp_path),
                "--name", "exp", "--max-failures", "3"]
        env = {**os.environ, "RAY_ADDRESS": cluster.address}
        driver = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        experiment = tmp_path / "exp"
        deadline = time.monotonic() + 240
        while len(nodes_seen(experiment)) < 2:  # trials run on both worker nodes at once
            assert time.monotonic() < deadline and driver.poll() is None, "trials did not spread"
            time.sleep(0.5)
        cluster.remove_node(workers[1])  # its running trial fails and is retried on the other node
        out, _ = driver.communicate(timeout=400)
        assert driver.returncode == 0, out[-3000:]
    finally:
        cluster.shutdown()

    trials = pd.read_parquet(experiment / "trials.parquet")
    assert len(trials) == 4 and trials["trial_key"].is_unique
    assert nodes_seen(experiment) == {workers[0].node_id, workers[1].node_id}
    history = pd.read_parquet(experiment / "history.parquet")
    assert not history.duplicated(["trial_key", "step"]).any() and len(history) == 4 * 4
