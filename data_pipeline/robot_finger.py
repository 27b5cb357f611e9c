"""D21's robot-finger datasets in the layout their authors distributed them in.

Dittadi et al. 2021 (D21) introduced a TriFinger scene: a robot finger with three joints and a cube
in a bowl-shaped stage, 128×128 RGB images. The authors' archive unpacks into::

    robot_finger_datasets/
      finger/                   finger_info.npz, finger_labels.npz, finger_images.tar
      finger_heldout_colors/    finger_heldout_colors_info.npz, …_labels.npz, …_images.tar
      finger_real/              finger_real_info.npz, finger_real_labels.npz, finger_real_images.npz

(the layout the authors' loader reads, kept in the fork erow/disentanglement_lib,
``disentanglement_lib/data/ground_truth/robot_finger.py``; GiuliaLanzillotta/CausalAE
``datasets/robot_finger_dataset.py`` reads the same files). What each file must hold:

- ``<set>_info.npz``: ``num_factor_values``, (9,) integers, the number of classes of each label
  column. Other entries (``factor_values``, ``dataset_size``) may be present; ``factor_values`` is
  a pickled dict, which disgen never unpickles, so the factor values come from :data:`FACTORS`.
- ``<set>_labels.npz``: ``labels``, (N, 9) numbers, one row per image: each column the image's
  class of that factor, 0 … ``num_factor_values``-1 (integers, or floats holding integers). A file
  holding the factors' raw values instead (a joint angle in radians) is read too: each value is
  matched to the nearest value of the factor's grid.
- ``<set>_images.tar`` (the simulated sets): one PNG per image, 128×128 RGB, named
  ``<index>.png`` where ``index`` is the image's row in the labels, in any folder of the archive;
  the archive may hold inner (uncompressed) tar files that hold the PNGs. Other members are
  ignored.
- ``finger_real_images.npz`` (the real set): ``images``, (N, 128, 128, 3) uint8.

The tar archives are never unpacked: the archive's headers are read once into a table (index →
byte offset and length of the PNG inside the file), and a PNG is then read by seeking to it. The
table is a pair of integer arrays, so a reader of rows is small and picklable, and the read tasks
of :mod:`data_pipeline.prepare` each read their own shard of the archive.

Every check names the file: a missing ``<index>.png``, an archive cut short, a labels file of the
wrong shape, a PNG that does not decode or is not 128×128 RGB.

The nine label columns become nine named factors (:data:`FACTORS`); the two degenerate ones (the
shape, always the cube, and the size, always 0.065) are kept as constant factors of one class, so
that a prepared folder's classes are the file's labels column for column.
"""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from data_pipeline.datasets import GroundTruthDataset
from data_pipeline.factors import FactorSpace, nearest_classes

# the factor space (the nine label columns, the eight colours and their hues) is declared with every
# dataset's, in data_pipeline.spaces; re-exported here
from data_pipeline.spaces import FINGER_FACTOR_NAMES as FACTOR_NAMES
from data_pipeline.spaces import FINGER_FACTOR_SIZES as FACTOR_SIZES  # noqa: F401
from data_pipeline.spaces import FINGER_FACTORS as FACTORS
from data_pipeline.spaces import TRAINING_COLOURS, colour_hues, finger_space  # noqa: F401

ROOT = "robot_finger_datasets"
SETS = ("finger", "finger_heldout_colors", "finger_real")
REAL = "finger_real"
IMAGE_SHAPE = (128, 128, 3)  # as stored: height, width, RGB
PUBLISHED_SIZE = 1_000_000  # images of the `finger` set (D21 §2): what a plan costs a whole-set trial at



class FingerDataError(ValueError):
    """A file of the robot-finger layout is missing a piece or malformed; the message names it."""


def set_folder(root, name: str) -> Path:
    """The folder of set ``name`` under ``root``: ``root`` is the ``robot_finger_datasets``
    folder, the folder above it, or the set's own folder."""
    if name not in SETS:
        raise ValueError(f"unknown robot-finger set {name!r}; expected one of {', '.join(SETS)}")
    root = Path(root)
    for folder in (root / name, root / ROOT / name, root):
        if folder.name == name and folder.is_dir():
            return folder
    raise FileNotFoundError(f"{root}: no folder {name}/ (nor {ROOT}/{name}/); expected the robot-finger "
                            f"layout {ROOT}/{{{', '.join(SETS)}}}/ (docs/datasets.md)")


def find_root(data_dir=None) -> Path | None:
    """The ``robot_finger_datasets`` folder in ``data_dir``, else in ``$DISGEN_DATA`` (either may
    be that folder itself); None where neither holds its ``finger`` set."""
    folders = [Path(data_dir)] if data_dir is not None else []
    if os.environ.get("DISGEN_DATA"):
        folders.append(Path(os.environ["DISGEN_DATA"]))
    for folder in folders:
        for root in (folder / ROOT, folder):
            if root.name == ROOT and (root / "finger").is_dir():
                return root
    return None


def _npz(path: Path, key: str) -> np.ndarray:
    """Array ``key`` of an npz, never unpickled; a missing file or key names the file."""
    from data_pipeline.loaders import _npz_arrays

    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (the robot-finger layout, docs/datasets.md)")
    try:
        return _npz_arrays(path, (key,))[key]
    except (OSError, EOFError) as error:
        raise FingerDataError(f"{path}: not a readable .npz archive ({error})") from None
    except ValueError as error:
        raise FingerDataError(str(error)) from None


def read_sizes(path: Path) -> tuple[int, ...]:
    """``num_factor_values`` of an info file: nine positive integers."""
    sizes = np.asarray(_npz(path, "num_factor_values"))
    if sizes.shape != (len(FACTORS),) or not np.issubdtype(sizes.dtype, np.integer) or (sizes < 1).any():
        raise FingerDataError(f"{path}: num_factor_values: expected {len(FACTORS)} positive integers "
                              f"(one per label column: {', '.join(FACTOR_NAMES)}); got {sizes.dtype} "
                              f"{sizes.tolist() if sizes.size <= 20 else sizes.shape}")
    return tuple(int(s) for s in sizes)


def label_classes(labels: np.ndarray, space: FactorSpace, source) -> np.ndarray:
    """(N, 9) classes of a labels array: class numbers as they are, or raw values matched to each
    factor's grid (see the module docstring); anything else raises naming ``source``."""
    labels = np.asarray(labels)
    if labels.ndim != 2 or labels.shape[1] != len(FACTORS):
        raise FingerDataError(f"{source}: labels: expected shape (N, {len(FACTORS)}), one column per factor "
                              f"({', '.join(FACTOR_NAMES)}); got {labels.shape}")
    if not (np.issubdtype(labels.dtype, np.integer) or np.issubdtype(labels.dtype, np.floating)):
        raise FingerDataError(f"{source}: labels: expected numbers; got dtype {labels.dtype}")
    values = labels.astype(np.float64)
    if not np.isfinite(values).all():
        row, col = np.argwhere(~np.isfinite(values))[0]
        raise FingerDataError(f"{source}: labels: row {row}, column {col} ({FACTOR_NAMES[col]}) is "
                              f"{values[row, col]}")
    integral = (values == np.round(values)).all()
    sizes = np.asarray(space.sizes)
    if integral and len(values) and (values >= 0).all() and (values < sizes).all():
        return values.astype(np.int64)
    classes, col, worst = nearest_classes(values, space)
    if col is not None:
        raise FingerDataError(
            f"{source}: labels: column {col} ({space.names[col]}) holds neither class numbers "
            f"0…{space.sizes[col] - 1} nor values of its grid {np.round(space.values[col], 4).tolist()} "
            f"(worst distance {worst:.4g})")
    return classes


# -- the PNGs in the tar archive -----------------------------------------------------------------


def _png_index(name: str) -> int | None:
    base = name.rsplit("/", 1)[-1]
    stem, dot, suffix = base.rpartition(".")
    if dot and suffix.lower() == "png" and stem.isdigit():
        return int(stem)
    return None


def _members(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The archive's members one at a time, none kept: ``TarFile`` keeps every member it reads
    (a million ``TarInfo`` objects for D21's archive), so the list is emptied as it goes."""
    while (member := archive.next()) is not None:
        archive.members.clear()
        yield member


def _scan(archive: tarfile.TarFile, base: int, table: np.ndarray, where: str, file_bytes: int,
          depth: int) -> None:
    """Record (absolute offset, length) of every ``<index>.png`` of ``archive`` (whose byte 0 is
    ``base`` in the file) in row ``index`` of ``table`` (n, 2), descending into inner uncompressed
    tar members."""
    for member in _members(archive):
        if not member.isfile():
            continue
        start = base + member.offset_data
        if start + member.size > file_bytes:
            raise FingerDataError(f"{where}: truncated: member {member.name} ends at byte "
                                  f"{start + member.size:,} of a {file_bytes:,}-byte file")
        index = _png_index(member.name)
        if index is not None:
            if index >= len(table):
                raise FingerDataError(f"{where}: holds {member.name}, but the labels have only "
                                      f"{len(table):,} rows (images 0.png … {len(table) - 1}.png expected)")
            if table[index, 0] >= 0:
                raise FingerDataError(f"{where}: two members named {index}.png")
            table[index] = start, member.size
        elif member.name.lower().endswith(".tar") and depth < 2:
            inner = archive.extractfile(member)
            try:
                with tarfile.open(fileobj=inner, mode="r:") as nested:
                    _scan(nested, start, table, f"{where}: {member.name}", file_bytes, depth + 1)
            except tarfile.ReadError as error:
                raise FingerDataError(f"{where}: inner archive {member.name} is not an uncompressed tar "
                                      f"({error})") from None


def png_table(path, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, lengths) (n,) int64 of ``0.png`` … ``<n-1>.png`` in the tar ``path``, read from
    the archive's headers alone. A missing PNG, an archive cut short or not a tar raises naming
    the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (one PNG per image, <index>.png; docs/datasets.md)")
    file_bytes = path.stat().st_size
    table = np.full((n, 2), -1, dtype=np.int64)
    try:
        with tarfile.open(path, mode="r:") as archive:
            _scan(archive, 0, table, str(path), file_bytes, 0)
            end = archive.offset  # where the member after the last one read would start
        with open(path, "rb") as handle:  # a whole archive ends with two zero blocks
            handle.seek(end)
            if handle.read(2 * tarfile.BLOCKSIZE) != bytes(2 * tarfile.BLOCKSIZE):
                raise FingerDataError(f"{path}: truncated: no end-of-archive blocks after byte {end:,} "
                                      f"of {file_bytes:,} (the archive was cut short)")
    except tarfile.ReadError as error:
        reason = "truncated" if "unexpected end" in str(error) or "truncated" in str(error) else "unreadable"
        raise FingerDataError(f"{path}: {reason}: not a whole uncompressed tar archive ({error})") from None
    except EOFError as error:
        raise FingerDataError(f"{path}: truncated: the archive ends inside a member ({error})") from None
    missing = np.flatnonzero(table[:, 0] < 0)
    if len(missing):
        shown = ", ".join(f"{i}.png" for i in missing[:5]) + (" …" if len(missing) > 5 else "")
        raise FingerDataError(f"{path}: {len(missing):,} of the {n:,} images (one per labels row) are "
                              f"missing: {shown}")
    return table[:, 0].copy(), table[:, 1].copy()


def decode_png(payload: bytes, where: str) -> np.ndarray:
    """A PNG's pixels (128, 128, 3) uint8; one that does not decode or has another shape raises."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(payload)) as image:
            if image.format != "PNG":
                raise FingerDataError(f"{where}: expected a PNG; got {image.format}")
            pixels = np.asarray(image.convert("RGB") if image.mode in ("RGBA", "P") else image)
    except (UnidentifiedImageError, OSError, SyntaxError) as error:
        raise FingerDataError(f"{where}: not a readable PNG ({error})") from None
    if pixels.shape != IMAGE_SHAPE or pixels.dtype != np.uint8:
        raise FingerDataError(f"{where}: expected a {IMAGE_SHAPE[0]}×{IMAGE_SHAPE[1]} RGB PNG (8 bits); "
                              f"got {pixels.dtype} {pixels.shape}")
    return pixels


class TarRows:
    """Rows of a simulated set, read from its tar by the offset table: picklable (a path and two
    integer arrays), so that each Ray Data read task of :mod:`data_pipeline.prepare` reads its own
    shard. ``pieces`` yields the raw images as stored, (n, 128, 128, 3) uint8."""

    def __init__(self, path: str, offsets: np.ndarray, lengths: np.ndarray):
        self.path, self.offsets, self.lengths = str(path), offsets, lengths
        self.shape = (len(offsets), *IMAGE_SHAPE)

    def seekable(self) -> bool:
        return True

    def image(self, handle, row: int) -> np.ndarray:
        handle.seek(int(self.offsets[row]))
        payload = handle.read(int(self.lengths[row]))
        where = f"{self.path}: {row}.png"
        if len(payload) != self.lengths[row]:
            raise FingerDataError(f"{where}: truncated: {len(payload)} of {self.lengths[row]} bytes")
        return decode_png(payload, where)

    def pieces(self, shards) -> Iterator[tuple[int, np.ndarray]]:
        with open(self.path, "rb") as handle:
            for first, count in shards:
                images = np.empty((count, *IMAGE_SHAPE), dtype=np.uint8)
                for i in range(count):
                    images[i] = self.image(handle, first + i)
                yield first, images


class NpzRows:
    """Rows of the real set's ``images`` (an npz member, stored or compressed), read by position;
    its header read on construction, a malformed file named. Picklable, as :class:`TarRows`."""

    def __init__(self, path: str):
        self.path = path
        try:
            with zipfile.ZipFile(path) as archive, self._member(archive) as member:
                version = np.lib.format.read_magic(member)
                read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                        else np.lib.format.read_array_header_2_0)
                shape, fortran, dtype = read(member)
                self.start = member.tell()
                self.stored = archive.getinfo("images.npy").compress_type == zipfile.ZIP_STORED
        except (zipfile.BadZipFile, EOFError, OSError, ValueError) as error:
            raise FingerDataError(f"{path}: not a whole .npz archive holding 'images' ({error})") from None
        if fortran or dtype.hasobject:
            raise FingerDataError(f"{path}: images: expected a plain C-order uint8 array")
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    def _member(self, archive):
        held = [n.removesuffix(".npy") for n in archive.namelist()]
        if "images" not in held:
            raise FingerDataError(f"{self.path}: expected key 'images'; the file holds "
                                  f"{', '.join(held) or 'nothing'}")
        return archive.open("images.npy")

    def seekable(self) -> bool:
        return self.stored

    def pieces(self, shards) -> Iterator[tuple[int, np.ndarray]]:
        row_bytes = int(np.prod(self.shape[1:])) * self.dtype.itemsize
        with zipfile.ZipFile(self.path) as archive, self._member(archive) as member:
            for first, count in shards:
                member.seek(self.start + first * row_bytes)
                payload = member.read(count * row_bytes)
                if len(payload) != count * row_bytes:
                    raise FingerDataError(f"{self.path}: images: truncated at row {first}")
                yield first, np.frombuffer(payload, dtype=self.dtype).reshape(count, *self.shape[1:])


class FingerSet:
    """One set of the robot-finger layout, its labels read and its images not: ``name`` (the
    set), ``path`` (its folder), ``n``, ``image_shape`` (3, 128, 128), ``classes`` (N, 9),
    ``factor_space``, ``identity`` (its files' names, sizes and modification times), and
    :meth:`rows`/:meth:`pieces` to stream its images. It has the attributes a
    :class:`~data_pipeline.conversion.RealFile` has, so that :func:`~data_pipeline.conversion.convert`
    and :func:`~data_pipeline.prepare.prepare` convert it as they convert a real file."""

    binary = False
    chunk = 1

    def __init__(self, root, name: str = "finger"):
        self.name = name
        self.path = set_folder(root, name)
        info, labels = self.path / f"{name}_info.npz", self.path / f"{name}_labels.npz"
        self.factor_space = finger_space(read_sizes(info))
        self.classes = label_classes(_npz(labels, "labels"), self.factor_space, labels)
        self.n = len(self.classes)
        if self.n == 0:
            raise FingerDataError(f"{labels}: labels: expected at least one row; got none")
        self.image_shape = (IMAGE_SHAPE[2], *IMAGE_SHAPE[:2])
        if name == REAL:
            self.images_file = self.path / f"{name}_images.npz"
            self.key = "images"
            self._real_rows()
        else:
            self.images_file = self.path / f"{name}_images.tar"
            self.key = "png"
            offsets, lengths = png_table(self.images_file, self.n)
            self._rows = TarRows(str(self.images_file), offsets, lengths)
        files = (info, labels, self.images_file)
        self.identity = {"file": f"{ROOT}/{name}",
                         "files": {f.name: {"bytes": f.stat().st_size, "mtime_ns": f.stat().st_mtime_ns}
                                   for f in files}}

    def _real_rows(self) -> None:
        """Check the real images' npz from its array header (not its pixels)."""
        if not self.images_file.is_file():
            raise FileNotFoundError(f"{self.images_file}: no such file (the real images: key 'images', "
                                    "(N, 128, 128, 3) uint8; docs/datasets.md)")
        rows = NpzRows(str(self.images_file))
        if rows.shape[1:] != IMAGE_SHAPE or rows.dtype != np.uint8:
            raise FingerDataError(f"{self.images_file}: images: expected uint8 (N, 128, 128, 3); got "
                                  f"{rows.dtype} {rows.shape}")
        if rows.shape[0] != self.n:
            raise FingerDataError(f"{self.images_file}: images: expected {self.n:,} images (one per row "
                                  f"of {self.name}_labels.npz); got {rows.shape[0]:,}")
        self._rows = rows

    def rows(self):
        """A small picklable reader of the set's image rows: what a Ray Data read task carries."""
        return self._rows

    def shards(self, start: int, step: int) -> list[tuple[int, int]]:
        return [(first, min(step, self.n - first)) for first in range(start, self.n, step)]

    def pieces(self, start: int = 0, step: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, images (n, 3, 128, 128) uint8) from ``start`` to the end, ``step`` at a time."""
        from data_pipeline import prepared

        step = step or prepared.rows_per_block(self.image_shape)
        for first, piece in self._rows.pieces(self.shards(start, step)):
            yield first, np.ascontiguousarray(piece.transpose(0, 3, 1, 2))


def is_finger(dataset) -> bool:
    """Whether ``dataset`` names a set of the robot-finger layout."""
    return str(dataset).lower() in SETS


def load_finger(root, name: str = "finger") -> GroundTruthDataset:
    """Set ``name`` as a :class:`~data_pipeline.datasets.GroundTruthDataset` in memory (images
    (N, 3, 128, 128) uint8): for the small sets (the real one, a fixture); a sweep reads the
    prepared layout instead (``python -m data_pipeline.prepare finger --from-file ROOT``)."""
    source = FingerSet(root, name)
    images = np.empty((source.n, *source.image_shape), dtype=np.uint8)
    for first, piece in source.pieces():
        images[first:first + len(piece)] = piece
    return GroundTruthDataset(name, images, source.classes, source.factor_space)
