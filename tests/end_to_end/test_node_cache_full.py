"""A dataset that does not fit in a node's cache fails its trial's models once, with the cache's
error in their rows: no crash, so Tune does not retry it (--max-failures 2 here)."""

import os
import subprocess
import sys

import pandas as pd
import pytest

GRID = """
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
    grid.write_text(GRID)
    cache = tmp_path / "cache"
    argv = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp",
            "--max-failures", "2", "--num-cpus", "1"]
    env = {**os.environ, "DISGEN_CACHE": str(cache), "DISGEN_CACHE_LIMIT": "1M"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-m", "sweeps.paper_grid", *argv], capture_output=True, text=True,
                          timeout=300, env=env)
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
