"""Sharing: a dataset put into Ray's object store once is read zero-copy, read-only, by every
process on the node that receives it (what ``tune.with_parameters`` does for a sweep's trials)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from data_pipeline import load_procedural

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")


def test_two_holders_on_a_node_read_one_shared_read_only_copy(ray_session):
    from sweeps.ray_sharing import DatasetHolder, memory_mapping

    ray = ray_session
    data = load_procedural("circles")  # 1,024 images of 64×64: 4 MiB, far above Ray's inline limit
    assert "plasma" not in memory_mapping(data.images)["file"]  # control: a private array (heap)
    datasets = ray.put({("circles", None, 0): data})  # one object-store copy, as tune.with_parameters
    holders = [DatasetHolder.remote(datasets) for _ in range(2)]
    seen = ray.get([h.describe.remote(("circles", None, 0)) for h in holders])

    assert seen[0]["pid"] != seen[1]["pid"] and seen[0]["node"] == seen[1]["node"]
    expected = int(data.images.sum(dtype=np.int64))
    for report in seen:
        assert report["dtype"] == "uint8" and report["checksum"] == expected
        assert report["writeable"] is False  # a view of the object store, not a private copy
        assert "plasma" in report["file"]  # the bytes lie in the object store's shared memory
    # both processes read the same bytes of the same shared file: one copy on the node
    assert (seen[0]["file"], seen[0]["offset"]) == (seen[1]["file"], seen[1]["offset"])

    here = ray.get(datasets)[("circles", None, 0)]
    assert memory_mapping(here.images)["offset"] == seen[0]["offset"]
    with pytest.raises(ValueError, match="read-only"):
        here.images[0, 0, 0, 0] = 1
    for holder in holders:
        ray.kill(holder)
