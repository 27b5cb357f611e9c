"""Ray Data preparation: shards and manifest written in parallel blocks, read back verified."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from data_pipeline import load_procedural  # noqa: E402
from data_pipeline.prepare import prepare, prepare_single_process, read_shards  # noqa: E402


@pytest.mark.slow
def test_ray_data_shards_read_back_equal_the_generator(ray_session, tmp_path):
    manifest = prepare("simple", tmp_path / "ray", n_images=700, rows_per_shard=200, seed=1)
    assert manifest["n_images"] == 700 and len(manifest["shards"]) == 4
    on_disk = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert on_disk["shards"] == manifest["shards"]
    data = read_shards(tmp_path / "ray")
    expected = load_procedural("simple", n_images=700, seed=1)
    assert np.array_equal(data.classes, expected.classes)
    assert np.array_equal(data.images, expected.images)
    single = prepare_single_process("simple", tmp_path / "one", n_images=700, rows_per_shard=200, seed=1)
    assert np.array_equal(read_shards(tmp_path / "one").images, data.images)
    assert sum(s["count"] for s in single["shards"]) == 700


def test_a_corrupt_shard_is_refused(tmp_path):
    manifest = prepare_single_process("circles", tmp_path, rows_per_shard=500)
    shard = tmp_path / manifest["shards"][0]["file"]
    shard.write_bytes(shard.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(ValueError, match="sha256 differs"):
        read_shards(tmp_path)
