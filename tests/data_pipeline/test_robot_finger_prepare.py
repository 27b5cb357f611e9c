"""D21's robot-finger sets through ``python -m data_pipeline.prepare``: the Ray Data build (one read
task per shard of the PNG tar) writes what the one-process conversion writes, with a sha256 per
shard in the manifest; a malformed copy fails naming its file and leaves a prepared folder as it
was."""

from __future__ import annotations

import json
import os
import tarfile

import numpy as np
import pytest
from robot_finger_files import _png, write_finger_datasets, write_tar

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from data_pipeline import conversion, prepared  # noqa: E402
from data_pipeline.prepare import main, prepare  # noqa: E402
from data_pipeline.robot_finger import SETS, load_finger  # noqa: E402


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_finger_datasets(tmp_path_factory.mktemp("finger"), n=90, n_heldout=20, n_real=12)


def _files(folder) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.slow
def test_ray_data_converts_each_set_as_one_process_does(ray_session, root, tmp_path):
    for name in SETS:
        step = 40 if name == "finger" else 8
        manifest = prepare(name, tmp_path / "ray" / name, rows_per_block=step, from_file=root)
        conversion.convert(root, tmp_path / "one" / name, dataset=name, rows_per_block=step, progress=False)
        ray_files, one_files = _files(tmp_path / "ray" / name), _files(tmp_path / "one" / name)
        assert sorted(ray_files) == sorted(one_files)  # no shard record is left
        for file in ray_files:
            if file != prepared.MANIFEST:
                assert ray_files[file] == one_files[file], file
        assert manifest["built_by"] == "ray.data" and len(manifest["blocks"]) > 1
        assert all(len(block["sha256"]) == 64 for block in manifest["blocks"])
        prepared.verify(tmp_path / "ray" / name)  # every shard against its recorded sha256
        data, loaded = prepared.open_dataset(tmp_path / "ray" / name), load_finger(root, name)
        assert np.array_equal(np.asarray(data.images), loaded.images)
        assert np.array_equal(data.classes, loaded.classes)
        assert data.factor_space.names == loaded.factor_space.names
        assert data.factor_space.sizes == loaded.factor_space.sizes
    # done once: a rerun reads nothing
    again = prepare("finger", tmp_path / "ray" / "finger", rows_per_block=40, from_file=root)
    assert again == json.loads((tmp_path / "ray" / "finger" / prepared.MANIFEST).read_text())


def _copy(root, tmp_path):
    import shutil

    copy = tmp_path / "copy" / "robot_finger_datasets"
    shutil.copytree(root, copy)
    return copy


def _drop_png(copy):
    tar = copy / "finger" / "finger_images.tar"
    images = load_finger(copy, "finger").images.transpose(0, 2, 3, 1)
    write_tar(tar, images[:50])
    return tar, r"missing: 50\.png"


def _wrong_labels(copy):
    labels = copy / "finger" / "finger_labels.npz"
    np.savez(labels, labels=np.zeros((90, 7)))
    return labels, r"expected shape \(N, 9\)"


def _truncate(copy):
    tar = copy / "finger" / "finger_images.tar"
    tar.write_bytes(tar.read_bytes()[:tar.stat().st_size * 2 // 3])
    return tar, "truncated"


@pytest.mark.parametrize("damage", [_drop_png, _wrong_labels, _truncate])
def test_a_malformed_copy_fails_naming_its_file_and_leaves_the_prepared_folder(root, tmp_path, capsys,
                                                                               damage):
    out = tmp_path / "prepared"
    conversion.convert(root, out, dataset="finger", rows_per_block=40, progress=False)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()}
    copy = _copy(root, tmp_path)
    path, what = damage(copy)
    for extra in ([], ["--single-process"]):  # the Ray build checks the files before Ray starts
        with pytest.raises(SystemExit):
            main(["finger", "--from-file", str(copy), "--out", str(out), "--rows-per-block", "40", *extra])
        message = capsys.readouterr().err
        assert str(path) in message and __import__("re").search(what, message), message
        assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()} == before
    prepared.verify(out)


@pytest.mark.slow
def test_a_png_that_does_not_decode_fails_its_shard_and_keeps_the_others(ray_session, root, tmp_path):
    copy = _copy(root, tmp_path)
    tar = copy / "finger" / "finger_images.tar"
    images = load_finger(root, "finger").images.transpose(0, 2, 3, 1)
    with tarfile.open(tar, "w") as archive:
        import io

        for row, image in enumerate(images):
            payload = b"\x89PNG broken" if row == 85 else _png(image)
            member = tarfile.TarInfo(f"{row}.png")
            member.size = len(payload)
            archive.addfile(member, io.BytesIO(payload))
    out = tmp_path / "prepared"
    with pytest.raises(ValueError, match=rf"{tar}: 85\.png: not a readable PNG"):
        prepare("finger", out, rows_per_block=40, from_file=copy)
    assert not (out / prepared.MANIFEST).exists()  # unfinished: no manifest
    assert not (out / prepared.block_name(80)).exists()  # the shard holding 85.png: absent, not part-written
    records = sorted(p.name for p in out.iterdir() if p.name.startswith("progress-"))
    assert records == ["progress-000000000.json", "progress-000000040.json"]  # the others kept
