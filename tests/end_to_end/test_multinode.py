"""Several nodes: trials spread over them, and losing a node mid-sweep loses no result: its trial
is retried on the other node from its last checkpoint, and every report lands once. Data reaches
the nodes by reference: each caches a prepared dataset once, and no object store holds it."""

import json
import os
import subprocess
import sys
import time

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
