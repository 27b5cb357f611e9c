"""Cache leases have a time to live (``data_pipeline.node_cache``): on a cache folder shared between
machines, another host's lease holds its entry only while its process renews it; one not renewed
for ``LEASE_TTL_S`` (by the file system's own clock) is stale, so a dead host's dataset is
evicted; a process renews its own leases."""

from __future__ import annotations

import gc
import json
import os
import time

import pytest

from data_pipeline import node_cache
from data_pipeline.node_cache import (
    NodeCacheFull,
    evictions,
    expected_bytes,
    open_reference,
    procedural_reference,
)


def foreign_lease(cache, entry, age_s):
    """A lease of a process on another machine, last renewed ``age_s`` seconds ago."""
    path = cache / node_cache.HOLDERS / entry / "other-host.4242"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": 4242, "host": "other-host", "started": "1", "at": "then"}))
    os.utime(path, (time.time() - age_s, time.time() - age_s))
    return path


def built(reference, cache, limit):
    data = open_reference(reference, cache_dir=cache, limit=limit)
    del data
    gc.collect()


def test_another_hosts_lease_holds_its_entry_until_its_time_to_live_runs_out(tmp_path):
    a, b = procedural_reference("dsprites", 300, 0), procedural_reference("dsprites", 300, 1)
    limit = int(1.5 * expected_bytes(a))  # one entry fits, two do not
    built(a, tmp_path, limit)
    lease = foreign_lease(tmp_path, a.entry, age_s=node_cache.LEASE_TTL_S / 2)  # renewed lately
    assert [h["host"] for h in node_cache.holders(tmp_path, a.entry)] == ["other-host"]
    with pytest.raises(NodeCacheFull, match="held by running processes"):
        open_reference(b, cache_dir=tmp_path, limit=limit)
    # that host died: its lease is not renewed, and once its time to live has passed it holds nothing
    os.utime(lease, (time.time() - node_cache.LEASE_TTL_S - 5,) * 2)
    assert node_cache.holders(tmp_path, a.entry) == [] and not lease.exists()
    built(b, tmp_path, limit)
    assert [r["entry"] for r in evictions(tmp_path)] == [a.entry]


def test_a_process_renews_the_leases_it_holds(tmp_path):
    reference = procedural_reference("dsprites", 300, 0)
    data = open_reference(reference, cache_dir=tmp_path)
    try:
        (path,) = (tmp_path / node_cache.HOLDERS / reference.entry).iterdir()
        os.utime(path, (time.time() - 1000,) * 2)  # not renewed for 1,000 s: stale for another host
        assert node_cache.renew_leases() >= 1
        # another host judges the lease by its age on the file system's clock: renewed, it is live
        renewed = path.stat()
        path.write_text(json.dumps({**json.loads(path.read_text()), "host": "other-host"}))
        os.utime(path, ns=(renewed.st_atime_ns, renewed.st_mtime_ns))
        assert [h["host"] for h in node_cache.holders(tmp_path, reference.entry)] == ["other-host"]
        assert node_cache._RENEWER[os.getpid()].is_alive()  # and a thread does it every LEASE_TTL_S / 3
    finally:
        del data
        gc.collect()
