"""Where each real dataset file comes from, and the checksums a download must match: one table.

The URLs and checksums come from the dataset repositories (DeepMind's dSprites and 3D Shapes,
MPI3D of Gondal et al. 2019) and from nmichlo/disent's dataset table, which records the MD5 of each
whole file ("full" hash). A row may list more than one address: ``urls`` are tried in order. The
MPI3D maintainers moved their files in 2024 from the ``disentanglement_dataset`` bucket to
``mpi3d_disentanglement_dataset/data/`` (rr-learning/disentanglement_dataset, issue 4); the new
address comes first and the old one stays as a second mirror. The checksums name the bytes, not the
address, so every mirror is held to the same ones. The dSprites npz has no
published MD5 that its repository vouches for, so it is checked by its git blob SHA-1, the id
GitHub lists for the file: the SHA-1 of ``b"blob <size>\\0" + bytes``.

``checksums`` are enforced by ``python -m data_pipeline.download``: a download must match every
one. ``reported`` are third-party figures (docs/data.md lists them) that the loaders compare a
user's file against, warning on a mismatch and never refusing it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

ALGORITHMS = ("md5", "sha1", "sha256", "git-blob-sha1")
_HEX_LENGTHS = {"md5": 32, "sha1": 40, "git-blob-sha1": 40, "sha256": 64}


@dataclass(frozen=True)
class Source:
    name: str  # what the user types: python -m data_pipeline.download NAME
    filename: str  # the published name, which the loaders look for
    url: str  # where the file is fetched from first
    checksums: tuple[tuple[str, str], ...]  # (algorithm, hex digest): a download must match all
    reported: tuple[tuple[str, str], ...] = ()  # third-party figures, not enforced
    dataset: str = ""  # disgen's dataset name (data_source real)
    mirrors: tuple[str, ...] = ()  # further addresses of the same bytes, tried in order after ``url``

    @property
    def urls(self) -> tuple[str, ...]:
        """Every address of the file, in the order a download tries them."""
        return (self.url, *self.mirrors)

    @property
    def all_checksums(self) -> list[tuple[str, str]]:
        return list(self.checksums) + list(self.reported)


_DSPRITES = "https://github.com/deepmind/dsprites-dataset/raw/master/"
_MPI3D = "https://storage.googleapis.com/mpi3d_disentanglement_dataset/data/"  # since 2024
_MPI3D_OLD = "https://storage.googleapis.com/disentanglement_dataset/Final_Dataset/"

SOURCES: dict[str, Source] = {s.name: s for s in (
    Source("dsprites", "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz",
           _DSPRITES + "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz",
           checksums=(("git-blob-sha1", "d98996d3f8ee1550e06b9d4ed78d0beb478910d5"),),
           reported=(("md5", "7da33b31b13a06f4b04a70402ce90c2e"),), dataset="dsprites"),
    Source("dsprites_hdf5", "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.hdf5",
           _DSPRITES + "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.hdf5",
           checksums=(("md5", "b331c4447a651c44bf5e8ae09022e230"),
                      ("git-blob-sha1", "3c8de5d40afa425dfd9de811d71248449aae238b")),
           reported=(("sha256", "729fa22e884c9c500e1f17415d580746b4c5894fbbb780a1319bbcfa39a745bb"),),
           dataset="dsprites"),
    Source("3dshapes", "3dshapes.h5", "https://storage.googleapis.com/3d-shapes/3dshapes.h5",
           checksums=(("md5", "099a2078d58cec4daad0702c55d06868"),),
           reported=(("sha256", "0a0f6ed98baff276a50f3a081a7434d788da63cb135a98189b2a5b5769be1785"),),
           dataset="shapes3d"),
    Source("mpi3d_toy", "mpi3d_toy.npz", _MPI3D + "mpi3d_toy.npz", mirrors=(_MPI3D_OLD + "mpi3d_toy.npz",),
           checksums=(("md5", "55889cb7c7dfc655d6e0277beee88868"),), dataset="mpi3d"),
    Source("mpi3d_realistic", "mpi3d_realistic.npz", _MPI3D + "mpi3d_realistic.npz",
           mirrors=(_MPI3D_OLD + "mpi3d_realistic.npz",),
           checksums=(("md5", "59a6225b88b635365f70c91b3e52f70f"),), dataset="mpi3d"),
    Source("mpi3d_real", "mpi3d_real.npz", _MPI3D + "mpi3d_real.npz",
           mirrors=(_MPI3D_OLD + "mpi3d_real.npz",),
           checksums=(("md5", "0f33f609918fb5c97996692f91129802"),), dataset="mpi3d"),
)}
ALIASES = {"shapes3d": "3dshapes", "dsprites_npz": "dsprites", "mpi3d": "mpi3d_toy"}


def source(name: str) -> Source:
    """The table row of ``name`` (or an alias); ValueError listing the names otherwise."""
    key = ALIASES.get(str(name).lower(), str(name).lower())
    if key not in SOURCES:
        raise ValueError(f"unknown dataset file {name!r}; expected one of {', '.join(SOURCES)}")
    return SOURCES[key]


def by_filename(filename: str) -> Source | None:
    """The table row whose published file name is ``filename``, if any."""
    return next((s for s in SOURCES.values() if s.filename == filename), None)


# The file ``python -m data_pipeline.download`` fetches for each dataset of data_source real.
DEFAULT_FILE = {"dsprites": "dsprites", "shapes3d": "3dshapes", "mpi3d": "mpi3d_toy",
                "mpi3d_toy": "mpi3d_toy", "mpi3d_realistic": "mpi3d_realistic", "mpi3d_real": "mpi3d_real"}


def download_hint(dataset: str, data_dir=None) -> str | None:
    """'download it with: <exact command>' for a dataset whose real file is missing, or None."""
    import os

    name = DEFAULT_FILE.get(str(dataset).lower())
    if name is None:
        return None
    folder = data_dir or os.environ.get("DISGEN_DATA")
    hint = f"download it with: python -m data_pipeline.download {name} --to {folder or 'data'}"
    return hint if folder else hint + " and pass --data-dir data"


def parse_checksum(text: str) -> tuple[str, str]:
    """``ALGO:HEX`` (or a bare hex digest, its algorithm told by its length: 32 md5, 64 sha256)."""
    algorithm, _, digest = str(text).strip().rpartition(":")
    digest = digest.lower()
    if not algorithm:
        algorithm = {32: "md5", 64: "sha256"}.get(len(digest), "")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"--sha {text!r}: expected ALGO:HEX with ALGO one of {', '.join(ALGORITHMS)} "
                         "(or a bare 32-digit md5 / 64-digit sha256)")
    if len(digest) != _HEX_LENGTHS[algorithm] or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"--sha {text!r}: a {algorithm} digest has {_HEX_LENGTHS[algorithm]} hex digits")
    return algorithm, digest


def file_checksum(path, algorithm: str, block: int = 4 << 20) -> str:
    """Hex digest of a file; ``git-blob-sha1`` hashes ``b"blob <size>\\0"`` first, as git does."""
    path = Path(path)
    if algorithm == "git-blob-sha1":
        digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    else:
        digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(block), b""):
            digest.update(chunk)
    return digest.hexdigest()


def mismatches(path, checksums) -> list[str]:
    """One line per checksum of ``path`` that differs: 'ALGO: expected X, found Y'."""
    lines = []
    for algorithm, expected in checksums:
        found = file_checksum(path, algorithm)
        if found != expected.lower():
            lines.append(f"{algorithm}: expected {expected}, found {found}")
    return lines
