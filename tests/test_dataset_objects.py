"""Each trial fetches only its own dataset: on a local two-node Ray cluster, each worker node pulls
into its object store the dataset of the trial it runs, not every dataset of the sweep."""

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_each_worker_node_pulls_only_its_trials_dataset():
    done = subprocess.run([sys.executable, "benchmarks/dataset_objects.py", "--mode", "per-dataset",
                           "--n-images", "3000", "--steps", "10"],
                          env={**os.environ, "PYTHONPATH": os.getcwd()}, capture_output=True, text=True,
                          timeout=400)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    result = json.loads(line[len("RESULT "):])
    assert result["finished"] == 2
    sizes = sorted(result["datasets"].values())  # dSprites (1 channel) and 3DShapes (3 channels)
    pulled = sorted(result["pulled_per_node"].values())
    assert len(pulled) == 2 and sizes[0] < sizes[1]
    # each node pulled one dataset (and a few small objects), never both
    for got, size in zip(pulled, sizes):
        assert size <= got < size + 2**20, (pulled, sizes)
