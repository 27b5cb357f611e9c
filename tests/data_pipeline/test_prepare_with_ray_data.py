"""`prepare` as a Ray Data pipeline (a read of the shards' rows, `map_batches`, a `Datasink`): the
same bytes and manifest as one process, for a generator and for small files in the real formats,
and a rerun after an interruption that keeps the intact shards. A real local Ray on 2 CPUs."""

from __future__ import annotations

import json
import os
import pickle

import h5py
import numpy as np
import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from data_pipeline import conversion, factor_space, prepared, render  # noqa: E402
from data_pipeline.loaders import DSPRITES_NPZ, SHAPES3D_H5  # noqa: E402
from data_pipeline.prepare import main, prepare, prepare_single_process  # noqa: E402

pytestmark = pytest.mark.slow


def assert_same_build(ray_folder, one_folder) -> dict:
    """The two folders hold the same files, byte for byte, and manifests that differ only in who
    built them and how long it took; the Ray build's manifest."""
    names = sorted(p.name for p in ray_folder.iterdir())
    assert names == sorted(p.name for p in one_folder.iterdir())  # no record or temporary is left
    for name in names:
        if name != prepared.MANIFEST:
            assert (ray_folder / name).read_bytes() == (one_folder / name).read_bytes(), name
    ray_manifest = json.loads((ray_folder / prepared.MANIFEST).read_text())
    one_manifest = json.loads((one_folder / prepared.MANIFEST).read_text())
    assert ray_manifest["built_by"] == "ray.data"
    drop = ("built_by", "seconds")
    assert {k: v for k, v in ray_manifest.items() if k not in drop} == \
        {k: v for k, v in one_manifest.items() if k not in drop}
    prepared.verify(ray_folder)
    return ray_manifest


def test_a_generator_read_as_grid_indices_writes_what_one_process_writes(ray_session, tmp_path):
    manifest = prepare("dsprites", tmp_path / "ray", n_images=300, rows_per_block=128, seed=2)
    prepare_single_process("dsprites", tmp_path / "one", n_images=300, rows_per_block=128, seed=2)
    assert [b["count"] for b in manifest["blocks"]] == [128, 128, 44]
    assert assert_same_build(tmp_path / "ray", tmp_path / "one") == manifest
    data = prepared.open_dataset(tmp_path / "ray")  # training's memory maps read it unchanged
    assert isinstance(data.images.blocks[0], np.memmap)


def _shapes3d_file(folder, n=700, chunk=250):
    space = factor_space("shapes3d")
    classes = space.classes_of(np.sort(np.random.default_rng(0).choice(space.n_images, n, replace=False)))
    with h5py.File(folder / SHAPES3D_H5, "w") as f:
        f.create_dataset("images", data=render("shapes3d", classes), chunks=(chunk, 4, 4, 1),
                         compression="gzip")
        f.create_dataset("labels", data=space.raw_values(classes), chunks=(chunk, 1), compression="gzip")
    return folder / SHAPES3D_H5


def _dsprites_file(folder, compressed: bool, n=300):
    space = factor_space("dsprites")
    classes = space.classes_of(np.sort(np.random.default_rng(1).choice(space.n_images, n, replace=False)))
    latents = np.concatenate([np.zeros((n, 1), np.int64), classes], axis=1)
    metadata = np.array(pickle.dumps({"title": "dSprites"}, protocol=2), dtype=object)
    save = np.savez_compressed if compressed else np.savez
    save(folder / DSPRITES_NPZ, imgs=render("dsprites", classes), latents_classes=latents, metadata=metadata)
    return folder / DSPRITES_NPZ


def _circles_file(folder):
    space = factor_space("circles")
    np.savez(folder / "circles.npz", images=render("circles", space.all_classes()) // 255,
             factor_values=space.raw_values(space.all_classes()), factor_sizes=np.array(space.sizes))
    return folder / "circles.npz"


@pytest.mark.parametrize("kind", ["shapes3d_h5", "dsprites_npz_compressed", "dsprites_npz_stored",
                                  "circles_npz_0_1"])
def test_a_real_file_read_by_row_ranges_writes_what_the_conversion_writes(ray_session, tmp_path, kind):
    source = tmp_path / "source"
    source.mkdir()
    path, dataset, step = {
        "shapes3d_h5": lambda: (_shapes3d_file(source), "shapes3d", 300),  # rounded to chunks of 250
        "dsprites_npz_compressed": lambda: (_dsprites_file(source, True), "dsprites", 70),  # one read task
        "dsprites_npz_stored": lambda: (_dsprites_file(source, False), "dsprites", 70),  # one per shard
        "circles_npz_0_1": lambda: (_circles_file(source), "circles", 400),  # 0/1 pixels, found by a pass
    }[kind]()
    manifest = prepare(dataset, tmp_path / "ray", rows_per_block=step, from_file=path)
    conversion.convert(path, tmp_path / "one", dataset=dataset, rows_per_block=step, progress=False)
    assert len(manifest["blocks"]) > 1
    assert assert_same_build(tmp_path / "ray", tmp_path / "one") == manifest
    # done once: a rerun reads nothing and returns the manifest
    written = (tmp_path / "ray" / manifest["blocks"][0]["file"]).stat().st_mtime_ns
    assert prepare(dataset, tmp_path / "ray", rows_per_block=step, from_file=path) == manifest
    assert (tmp_path / "ray" / manifest["blocks"][0]["file"]).stat().st_mtime_ns == written


def test_the_command_line_converts_a_file_with_ray_data(ray_session, tmp_path, capsys):
    path = _circles_file(tmp_path)
    main(["circles", "--from-file", str(path), "--out", str(tmp_path / "ray")])
    assert "ray.data" in capsys.readouterr().out
    main(["circles", "--from-file", str(path), "--out", str(tmp_path / "one"), "--single-process"])
    assert "conversion" in capsys.readouterr().out
    assert_same_build(tmp_path / "ray", tmp_path / "one")


def test_an_interrupted_build_keeps_its_intact_shards_and_writes_the_rest(ray_session, tmp_path):
    out = tmp_path / "ray"
    out.mkdir()
    (out / prepared.block_name(600)).mkdir()  # the last shard cannot be written: the build fails
    with pytest.raises(Exception, match="images-000000600.npy"):
        prepare("simple", out, n_images=700, rows_per_block=200, seed=1)
    assert not (out / prepared.MANIFEST).exists()  # unfinished
    records = sorted(p.name for p in out.iterdir() if p.name.startswith("progress-"))
    assert records and "progress-000000600.json" not in records
    (out / prepared.block_name(600)).rmdir()
    kept = [json.loads((out / r).read_text())["block"]["file"] for r in records]
    damaged = out / kept[-1]
    damaged.write_bytes(damaged.read_bytes()[:-1] + b"\x01")  # damaged while stopped: written again
    times = {name: (out / name).stat().st_mtime_ns for name in kept[:-1]}
    prepare("simple", out, n_images=700, rows_per_block=200, seed=1)
    assert {name: (out / name).stat().st_mtime_ns for name in kept[:-1]} == times  # not rewritten
    prepare_single_process("simple", tmp_path / "one", n_images=700, rows_per_block=200, seed=1)
    assert_same_build(out, tmp_path / "one")


def test_the_sink_puts_a_shard_together_from_pieces_and_never_writes_a_part(tmp_path):
    from ray.data.block import BlockAccessor

    from data_pipeline.prepare import _ray_classes

    _, ShardSink = _ray_classes()
    images = np.random.default_rng(0).integers(0, 256, (10, 1, 4, 4), dtype=np.uint8)
    sink = ShardSink(tmp_path, 4, 10, {"kind": "test"}, [], {}, 0.0)

    def block(rows):
        return BlockAccessor.batch_to_block({"row": np.asarray(rows), "image": images[rows]})

    # shard 4…7 in two pieces, out of order; shard 0…3 and the last, 8…9, whole
    written = sink.write([block([6, 7, 8, 9]), block([0, 1, 2, 3]), block([5, 4])], None)
    assert [b["first"] for b in written] == [8, 0, 4]
    for entry in written:
        stored = np.load(tmp_path / entry["file"])
        assert np.array_equal(stored, images[entry["first"]:entry["first"] + entry["count"]])
        assert json.loads((tmp_path / f"progress-{entry['first']:09d}.json").read_text())["block"] == entry
    with pytest.raises(RuntimeError, match=r"rows \[4\] reached a write task incomplete"):
        ShardSink(tmp_path / "part", 4, 10, {}, [], {}, 0.0).write([block([4, 5, 6])], None)
    assert not (tmp_path / "part").exists()  # nothing of the shard was written
