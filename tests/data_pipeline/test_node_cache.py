"""The node cache: a dataset reference materialised once per node (whatever the number of processes
asking at once), verified, written atomically, then memory-mapped; subsets are index sets."""

from __future__ import annotations

import multiprocessing
import os

import numpy as np
import pytest

from data_pipeline import load_procedural, node_cache, prepared
from data_pipeline.datasets import ImageRows
from data_pipeline.node_cache import (
    materialisations,
    open_reference,
    prepared_reference,
    procedural_reference,
)
from data_pipeline.prepare import prepare_single_process


def _visible(cache) -> list[str]:
    """The cache folder's entries, locks and logs, besides its bookkeeping (the cache-wide lock and
    the holders' leases), which must hold nothing half-built or half-evicted."""
    hidden = sorted(p.name for p in cache.iterdir() if p.name.startswith("."))
    assert set(hidden) <= {node_cache.INDEX_LOCK, node_cache.HOLDERS}, hidden
    return sorted(p.name for p in cache.iterdir() if not p.name.startswith("."))


def _open_in_a_process(args) -> tuple[int, int]:
    reference, cache = args
    data = open_reference(reference, cache_dir=cache)
    return os.getpid(), int(np.asarray(data.images).sum(dtype=np.int64))


def test_processes_that_ask_at_once_share_one_materialisation(tmp_path):
    reference = procedural_reference("dsprites", 1500, 4)
    # spawned, not forked: a fork copies whichever lock another thread of this worker holds (a server
    # an earlier test left, a lease renewer), and the child waits on it for ever (seen in CI)
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        seen = pool.map(_open_in_a_process, [(reference, tmp_path)] * 6, chunksize=1)
    expected = int(load_procedural("dsprites", 1500, seed=4).images.sum(dtype=np.int64))
    assert {total for _, total in seen} == {expected} and len({pid for pid, _ in seen}) > 1
    (record,) = materialisations(tmp_path)  # one build, under the lock; the others waited, then mapped it
    assert record["kind"] == "procedural" and record["content_id"] == reference.content_id
    assert _visible(tmp_path) == [reference.entry, f"{reference.entry}.lock", node_cache.LOG]
    data = open_reference(reference, cache_dir=tmp_path)
    assert isinstance(data.images, np.memmap) and not data.images.flags.writeable
    assert len(materialisations(tmp_path)) == 1


def test_procedural_references_name_the_grid_points_not_the_request():
    assert procedural_reference("circles", None, 0) == procedural_reference("circles", 5000, 3)  # whole grid
    seeds = {procedural_reference("circles", 100, seed).content_id for seed in (0, 1)}
    assert len(seeds) == 2
    assert procedural_reference("3dshapes", 10, 0).dataset == "shapes3d"


def test_a_prepared_copy_is_verified_and_a_damaged_or_changed_source_leaves_nothing(tmp_path):
    source = tmp_path / "prepared" / "simple"
    prepare_single_process("simple", source, n_images=600, rows_per_block=250, seed=3)
    reference = prepared_reference(source)
    block = source / "images-000000250.npy"
    good = block.read_bytes()
    block.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(ValueError, match="images-000000250.npy: sha256 differs from the manifest"):
        open_reference(reference, cache_dir=tmp_path / "cache")
    assert _visible(tmp_path / "cache") == [f"{reference.entry}.lock"]  # no entry
    block.write_bytes(good)
    data = open_reference(reference, 200, 7, cache_dir=tmp_path / "cache")
    whole = load_procedural("simple", 600, seed=3)
    rows = np.sort(np.random.default_rng(7).choice(600, 200, replace=False))  # not the generator's draw
    assert isinstance(data.images, ImageRows) and np.array_equal(data.images.rows, rows)  # an index set
    assert np.array_equal(data.images[np.arange(200)], whole.images[rows])
    assert np.array_equal(data.classes, whole.classes[rows]) and data.observe is not None
    # the same draw as the generator's: every row, so the same images a procedural trial sees
    same = open_reference(reference, 600, 3, cache_dir=tmp_path / "cache")
    assert np.array_equal(np.asarray(same.images), whole.images)
    assert len(materialisations(tmp_path / "cache")) == 1
    prepare_single_process("simple", source, n_images=600, seed=4)  # the data changes after planning
    with pytest.raises(ValueError, match="changed since"):
        open_reference(reference, cache_dir=tmp_path / "other")


def test_a_build_that_died_is_cleared_and_done_again(tmp_path):
    reference = procedural_reference("circles", 50, 0)
    stale = tmp_path / f".{reference.entry}.tmp-999999"
    stale.mkdir(parents=True)
    (stale / "images-000000000.npy").write_bytes(b"half")
    data = open_reference(reference, cache_dir=tmp_path)
    assert not stale.exists() and len(data) == 50
    prepared.verify(tmp_path / reference.entry)


def test_image_rows_index_like_numpy():
    rng = np.random.default_rng(0)
    whole = rng.integers(0, 256, (50, 1, 4, 4), dtype=np.uint8)
    blocks = [whole[:20], whole[20:35], whole[35:]]
    rows = rng.permutation(50)[:30]
    for view, array in [(ImageRows(blocks), whole), (ImageRows(blocks, rows), whole[rows]),
                        (ImageRows(blocks).subset(rows).subset(np.arange(5, 25)), whole[rows][5:25])]:
        assert len(view) == len(array) and view.shape == array.shape and view.nbytes == array.nbytes
        for key in [np.array([3, 0, 19, 1, 3]), slice(2, 17, 3), 7, -1, np.arange(len(array)) % 2 == 0,
                    (np.array([4, 2]), 0, slice(1, 3))]:
            assert np.array_equal(view[key], array[key]), key
        assert np.array_equal(np.asarray(view), array)
    with pytest.raises(IndexError):
        ImageRows(blocks)[np.array([50])]
