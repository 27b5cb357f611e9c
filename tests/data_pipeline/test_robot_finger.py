"""D21's robot-finger layout: the loader streams the PNGs from the tar (plain or in inner tars, in
any member order), maps the nine label columns to named factors, and names the file of every
missing or malformed piece."""

from __future__ import annotations

import tarfile

import numpy as np
import pytest
from robot_finger_files import (
    HELDOUT_COLOURS,
    HELDOUT_SIZES,
    draw,
    random_classes,
    write_set,
    write_tar,
)

from data_pipeline.robot_finger import (
    FACTOR_NAMES,
    FACTOR_SIZES,
    ROOT,
    FingerDataError,
    FingerSet,
    find_root,
    load_finger,
)


@pytest.fixture(scope="module")
def arrays():
    sim = random_classes(24, seed=3)
    return sim, draw(sim, seed=3)


def _sim(tmp_path, arrays, **options):
    classes, images = arrays
    write_set(tmp_path, "finger", classes, images, FACTOR_SIZES, **options)
    return tmp_path / ROOT


@pytest.mark.parametrize("inner", [0, 3])
def test_images_and_classes_come_back_as_written(tmp_path, arrays, inner):
    root = _sim(tmp_path, arrays, inner=inner)  # members in a shuffled order, in folders or inner tars
    dataset = load_finger(root, "finger")
    classes, images = arrays
    assert np.array_equal(dataset.images, images.transpose(0, 3, 1, 2))
    assert np.array_equal(dataset.classes, classes)
    assert dataset.factor_space.names == FACTOR_NAMES
    assert dataset.factor_space.sizes == (1, 8, 1, 30, 30, 30, 30, 30, 10)
    # the degenerate columns are kept as constant factors
    assert (dataset.classes[:, 0] == 0).all() and (dataset.classes[:, 2] == 0).all()


def test_labels_holding_grid_values_give_the_same_classes(tmp_path, arrays):
    root = _sim(tmp_path, arrays, values=True)
    labels = np.load(root / "finger" / "finger_labels.npz")["labels"]
    assert labels[:, 3].min() < 0  # joint angles in radians, not classes
    assert np.array_equal(FingerSet(root).classes, arrays[0])


def test_heldout_colours_and_real_sets(tmp_path):
    held = random_classes(10, HELDOUT_SIZES, seed=1)
    write_set(tmp_path, "finger_heldout_colors", held, draw(held, HELDOUT_COLOURS), HELDOUT_SIZES)
    real = random_classes(7, seed=2)
    real_images = draw(real, real=True)
    write_set(tmp_path, "finger_real", real, real_images, FACTOR_SIZES)
    heldout = load_finger(tmp_path / ROOT, "finger_heldout_colors")
    assert heldout.factor_space.sizes[1] == 4 and np.array_equal(heldout.classes, held)
    loaded = load_finger(tmp_path, "finger_real")  # the folder above robot_finger_datasets works too
    assert np.array_equal(loaded.images, real_images.transpose(0, 3, 1, 2))


def test_info_with_a_pickled_factor_values_is_read_without_unpickling(tmp_path, arrays):
    root = _sim(tmp_path, arrays)
    info = root / "finger" / "finger_info.npz"
    np.savez(info, num_factor_values=np.asarray(FACTOR_SIZES),
             factor_values=np.array({"shape": ["cube"]}, dtype=object), dataset_size=np.asarray(24))
    assert FingerSet(root).n == 24


def test_find_root_looks_in_disgen_data(tmp_path, arrays, monkeypatch):
    _sim(tmp_path, arrays)
    monkeypatch.setenv("DISGEN_DATA", str(tmp_path))
    assert find_root() == tmp_path / ROOT
    monkeypatch.setenv("DISGEN_DATA", str(tmp_path / "elsewhere"))
    assert find_root() is None


def test_a_missing_png_is_named(tmp_path, arrays):
    root = _sim(tmp_path, arrays)
    classes, images = arrays
    tar = root / "finger" / "finger_images.tar"
    write_tar(tar, images[:7])  # rows 7… absent
    with pytest.raises(FingerDataError, match=rf"{tar}: 17 of the 24 images .* missing: 7\.png, 8\.png"):
        FingerSet(root)


def test_a_labels_file_of_the_wrong_shape_is_named(tmp_path, arrays):
    root = _sim(tmp_path, arrays)
    labels = root / "finger" / "finger_labels.npz"
    np.savez(labels, labels=arrays[0][:, :8])
    with pytest.raises(FingerDataError, match=rf"{labels}: labels: expected shape \(N, 9\).*got \(24, 8\)"):
        FingerSet(root)
    np.savez(labels, other=arrays[0])
    with pytest.raises(FingerDataError, match=rf"{labels}: expected key 'labels'"):
        FingerSet(root)
    np.savez(labels, labels=arrays[0] + 0.5)  # neither classes nor grid values
    with pytest.raises(FingerDataError, match=rf"{labels}: labels: column 0 \(shape\) holds neither"):
        FingerSet(root)


def test_info_of_the_wrong_length_is_named(tmp_path, arrays):
    root = _sim(tmp_path, arrays)
    info = root / "finger" / "finger_info.npz"
    np.savez(info, num_factor_values=np.asarray(FACTOR_SIZES[:7]))
    with pytest.raises(FingerDataError, match=rf"{info}: num_factor_values: expected 9 positive integers"):
        FingerSet(root)


@pytest.mark.parametrize("cut", ["half", "inside the last png"])
def test_a_truncated_tar_is_named(tmp_path, arrays, cut):
    root = _sim(tmp_path, arrays)
    tar = root / "finger" / "finger_images.tar"
    with tarfile.open(tar) as archive:
        last = archive.getmembers()[-1]
    payload = tar.read_bytes()
    keep = len(payload) // 2 + 100 if cut == "half" else last.offset_data + last.size // 2
    tar.write_bytes(payload[:keep])
    what = "truncated" if cut == "half" else rf"truncated: member {last.name} ends at byte"
    with pytest.raises(FingerDataError, match=rf"{tar}: {what}"):
        FingerSet(root)


def test_a_png_that_does_not_decode_is_named_when_read(tmp_path, arrays):
    root = _sim(tmp_path, arrays)
    tar = root / "finger" / "finger_images.tar"
    with tarfile.open(tar, "a") as archive:  # a later member of the same name replaces the first
        import io

        member = tarfile.TarInfo("images/5.png")
        member.size = 10
        archive.addfile(member, io.BytesIO(b"not a png!"))
    with pytest.raises(FingerDataError, match=rf"{tar}: two members named 5\.png"):
        FingerSet(root)
    classes, images = arrays
    broken = list(images)
    write_tar(tar, images)
    with tarfile.open(tar, "w") as archive:
        for row, image in enumerate(broken):
            import io

            from robot_finger_files import _png

            payload = b"not a png!" if row == 5 else _png(image)
            member = tarfile.TarInfo(f"{row}.png")
            member.size = len(payload)
            archive.addfile(member, io.BytesIO(payload))
    source = FingerSet(root)  # the headers are fine
    with pytest.raises(FingerDataError, match=rf"{tar}: 5\.png: not a readable PNG"):
        list(source.pieces(0, 8))


def test_real_images_of_another_count_are_named(tmp_path):
    real = random_classes(6, seed=2)
    folder = write_set(tmp_path, "finger_real", real, draw(real, real=True), FACTOR_SIZES)
    images = folder / "finger_real_images.npz"
    np.savez(images, images=draw(real[:5], real=True))
    with pytest.raises(FingerDataError, match=rf"{images}: images: expected 6 images"):
        FingerSet(tmp_path / ROOT, "finger_real")
    (folder / "finger_real_labels.npz").unlink()
    with pytest.raises(FileNotFoundError, match="finger_real_labels.npz: no such file"):
        FingerSet(tmp_path / ROOT, "finger_real")


def test_more_pngs_than_labels_rows_is_named(tmp_path, arrays):
    root = _sim(tmp_path, arrays)
    labels = root / "finger" / "finger_labels.npz"
    np.savez(labels, labels=arrays[0][:20])
    tar = root / "finger" / "finger_images.tar"
    expected = rf"{tar}: holds images/2[0-3]\.png, but the labels have only 20 rows"
    with pytest.raises(FingerDataError, match=expected):
        FingerSet(root)


def test_the_scan_keeps_no_member_of_the_archive(tmp_path, arrays):
    """TarFile keeps every member it reads; the scan empties that list as it goes, so that D21's
    million-member archive costs the offset table alone."""
    from data_pipeline.robot_finger import _members

    root = _sim(tmp_path, arrays)
    with tarfile.open(root / "finger" / "finger_images.tar") as archive:
        names = [m.name for m in _members(archive)]
        assert len(names) == 25 and archive.members == []  # the 24 PNGs and a README


def test_real_images_compressed_in_their_npz_are_read_too(tmp_path):
    real = random_classes(5, seed=4)
    images = draw(real, real=True)
    folder = write_set(tmp_path, "finger_real", real, images, FACTOR_SIZES)
    np.savez_compressed(folder / "finger_real_images.npz", images=images)
    source = FingerSet(tmp_path / ROOT, "finger_real")
    assert not source.rows().seekable()  # prepare then streams it in one read task
    pieces = list(source.pieces(0, 2))
    assert [first for first, _ in pieces] == [0, 2, 4]
    assert np.array_equal(np.concatenate([p for _, p in pieces]), images.transpose(0, 3, 1, 2))
