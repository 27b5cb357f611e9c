"""The prepared layout: blocks and manifest written in parallel Ray Data tasks or one process, read
back memory-mapped and verified; a damaged block is refused."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from data_pipeline import load_procedural, prepared  # noqa: E402
from data_pipeline.datasets import ImageRows  # noqa: E402
from data_pipeline.prepare import prepare, prepare_single_process  # noqa: E402


@pytest.mark.slow
def test_ray_data_blocks_read_back_equal_the_generator(ray_session, tmp_path):
    manifest = prepare("simple", tmp_path / "ray", n_images=700, rows_per_block=200, seed=1)
    assert manifest["n_images"] == 700 and [b["count"] for b in manifest["blocks"]] == [200, 200, 200, 100]
    on_disk = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert on_disk["blocks"] == manifest["blocks"] and on_disk["built_by"] == "ray.data"
    data = prepared.open_dataset(tmp_path / "ray")
    expected = load_procedural("simple", n_images=700, seed=1)
    assert isinstance(data.images, ImageRows)  # the four blocks, memory-mapped, read in place
    assert np.array_equal(data.classes, expected.classes)
    assert np.array_equal(np.asarray(data.images), expected.images)
    single = prepare_single_process("simple", tmp_path / "one", n_images=700, rows_per_block=200, seed=1)
    assert single["content_id"] == manifest["content_id"]  # the same bytes, however they were written
    assert prepare_single_process("simple", tmp_path / "other", n_images=700, seed=2)["content_id"] != \
        manifest["content_id"]


def test_the_manifest_keeps_the_factor_kinds_and_an_older_one_reads_as_ordinal(tmp_path):
    from data_pipeline.factors import FactorSpace

    manifest = prepare_single_process("dsprites", tmp_path, n_images=50)
    assert manifest["factor_kinds"] == ["categorical", "ordinal", "circular", "ordinal", "ordinal"]
    assert manifest["factor_symmetry"] == [["orientation", "shape", [4, 2, 1]]]
    space = prepared.space_of({**manifest, "dataset": "a_users_copy"})  # not the registered space
    assert space.kinds == tuple(manifest["factor_kinds"])
    assert space.symmetry == (("orientation", "shape", (4, 2, 1)),)
    older = {k: v for k, v in manifest.items() if k not in ("factor_kinds", "factor_symmetry")}
    older["dataset"] = "a_users_copy"
    assert prepared.space_of(older).kinds == ("ordinal",) * 5
    assert isinstance(prepared.space_of(manifest), FactorSpace)


def test_blocks_are_memory_mapped_and_a_damaged_block_is_refused(tmp_path):
    manifest = prepare_single_process("circles", tmp_path, rows_per_block=500)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["classes.npy", "images-000000000.npy", "images-000000500.npy", "images-000001000.npy",
                     "manifest.json"]
    assert np.load(tmp_path / "classes.npy").dtype == np.uint8  # the few MB a driver reads
    data = prepared.open_dataset(tmp_path)
    rows = np.array([1023, 0, 499, 500, 999, 1000])
    expected = load_procedural("circles")
    assert np.array_equal(data.images[rows], expected.images[rows])
    assert np.array_equal(data.images[7], expected.images[7])
    assert isinstance(data.images.blocks[0], np.memmap) and not data.images.blocks[0].flags.writeable
    prepared.verify(tmp_path)
    block = tmp_path / manifest["blocks"][1]["file"]
    payload = bytearray(block.read_bytes())
    payload[-10] ^= 1
    block.write_bytes(bytes(payload))
    with pytest.raises(ValueError, match="images-000000500.npy: sha256 differs"):
        prepared.verify(tmp_path)
    block.write_bytes(bytes(payload[:-10]))
    with pytest.raises(ValueError, match="wrong size"):
        prepared.open_dataset(tmp_path)
