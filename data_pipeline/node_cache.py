"""A node's cache of datasets: what a trial is handed (a :class:`DatasetReference`) made into
memory-mapped images, once per node.

A trial never receives images. It receives a reference: which dataset, where its bytes are (a
prepared folder or URI, a real file, or disgen's generator) and the **content id** that names
them. :func:`open_reference` materialises the reference into this node's cache folder, once,
then memory-maps it, so every trial process on the node reads one copy of the images (the page
cache's), and none travels through Ray's object store:

- **prepared** (``DIR/<dataset>/`` as ``python -m data_pipeline.prepare`` wrote it, locally or at
  ``s3://…``): its files are copied, each checked against the manifest's sha256 on the way;
- **file** (a real file from ``--data-dir``): converted into the prepared layout
  (:func:`data_pipeline.conversion.convert`);
- **procedural**: rendered by the generator, a block at a time, into the same layout.

The cache folder is ``$DISGEN_CACHE``, else ``$XDG_CACHE_HOME/disgen``, else ``~/.cache/disgen``
(on a cluster whose home folders are shared, point ``DISGEN_CACHE`` at a local disk). An entry
``<dataset>-<content id>/`` is a prepared folder. It is built under an exclusive file lock
(``fcntl``) in a temporary folder, verified against its manifest, and renamed into place, so a
reader sees a whole entry or none, and processes that start together wait for the one that
builds it. Each build appends one line to ``materialisations.jsonl`` in the cache folder (and
prints one), so a test or an operator can count them.

**The cache is bounded.** Its entries (and the builds in progress, by the size they will reach) may
take at most ``$DISGEN_CACHE_LIMIT`` of the disk: a size (``200G``, ``500M``, ``1.5T``, ``0``; units
of 1024 bytes) or a share of the file system the cache is on (``80%``); :data:`DEFAULT_LIMIT` (half
the disk) without it, and never more than the disk has free. A build that would pass the limit first
evicts whole entries that no process holds, the least recently used first (each use stamps its
entry's modification time), each renamed out of sight (``.evicted-…``) before it is deleted, so a
reader sees a whole entry or none; each eviction appends one line to ``evictions.jsonl``. A process
**holds** an entry from :func:`materialise` until it lets it go: a lease file
``.holders/<entry>/<host>.<pid>`` (with the process's start time, so a reused pid is no holder) that
:func:`open_reference` removes when the dataset's memory maps are freed, and that a process which
died leaves stale (ignored, and cleared). On a cache folder shared between machines another host's
process cannot be checked, so a lease has a time to live: its process renews it (touches the file)
every :data:`LEASE_TTL_S` / 3 seconds from a thread of its own while it holds it, and another host's
lease not renewed for :data:`LEASE_TTL_S` seconds, by the cache file system's own clock (a file
written beside it now), is stale: a dead host's datasets can be evicted. Leases, reservations and
evictions happen under one short cache-wide lock (``.cache.lock``). A dataset that cannot fit even
once every unheld entry is gone, or a disk that fills up while an entry is built (``ENOSPC``; the
partial build is deleted), raises :class:`NodeCacheFull`, which names the size needed, the limit,
the entries held and how to raise the limit; a trial reports it as its models' error rather than
crashing (``sweeps/trainable.py``), so Tune does not retry it. Plain Python and numpy; no Ray.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import threading
import time
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from data_pipeline import prepared
from data_pipeline.datasets import (
    GENERATOR_VERSIONS,
    GroundTruthDataset,
    factor_space,
    grid_draw,
    render_stored,
)
from data_pipeline.spaces import canonical_name

LOG = "materialisations.jsonl"
EVICTIONS = "evictions.jsonl"
KINDS = ("procedural", "prepared", "file")
LIMIT_ENV = "DISGEN_CACHE_LIMIT"
DEFAULT_LIMIT = "50%"  # of the file system the cache is on
INDEX_LOCK, HOLDERS = ".cache.lock", ".holders"
LEASE_TTL_S = 600.0  # another host's lease not renewed for this long holds nothing
MANIFEST_SLACK = 1 << 16  # the manifest and .npy headers, beyond the images' and classes' bytes


@dataclass(frozen=True)
class DatasetReference:
    """Where a dataset's bytes are and the content id that names them: what a trial is handed.

    ``kind`` is ``prepared`` (``uri``: the prepared folder; ``content_id``: its manifest's, the
    sha256 of its bytes), ``file`` (``uri``: the real file's path; ``content_id``: a hash of the
    file's name, size and modification time, since hashing a multi-GB file would read it whole)
    or ``procedural`` (``uri``: ``generator:<dataset>``; ``content_id``: a hash of the generator's
    version and the grid points drawn, ``n_images`` and ``seed``, which fix the bytes)."""

    kind: str
    dataset: str
    uri: str
    content_id: str
    n_images: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}; got {self.kind!r}")

    @property
    def entry(self) -> str:
        """This reference's folder name in a node cache."""
        return f"{self.dataset}-{self.content_id[:24]}"

    def to_dict(self) -> dict:
        return asdict(self)


def _hash(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def procedural_reference(dataset: str, n_images: int | None, seed: int) -> DatasetReference:
    """The grid points a generator renders for (``n_images``, ``seed``); computed, not rendered."""
    dataset = canonical_name(dataset)
    index = grid_draw(factor_space(dataset), n_images, seed)
    if len(index) == factor_space(dataset).n_images:  # the whole grid, whatever was asked
        n_images, seed = None, 0
    content = {"generator": dataset, "version": GENERATOR_VERSIONS[dataset],
               "grid_index": hashlib.sha256(index.tobytes()).hexdigest()}
    return DatasetReference("procedural", dataset, f"generator:{dataset}", _hash(content), n_images, seed)


def prepared_reference(uri: str, manifest: dict | None = None) -> DatasetReference:
    """A prepared folder (local or a URI), named by its manifest's content id."""
    uri = prepared.normalise(uri)
    manifest = manifest or prepared.read_manifest(uri)
    return DatasetReference("prepared", manifest["dataset"], uri, manifest["content_id"])


def file_reference(dataset: str, path, identity: dict) -> DatasetReference:
    """A real file (``identity``: its name, bytes and modification time, from
    :class:`~data_pipeline.conversion.RealFile`)."""
    content = {"dataset": dataset, **identity}
    return DatasetReference("file", dataset, os.path.abspath(path), _hash(content))


def cache_root(cache_dir=None) -> Path:
    """The node's cache folder: ``cache_dir``, else ``$DISGEN_CACHE``, else
    ``$XDG_CACHE_HOME/disgen``, else ``~/.cache/disgen``."""
    if cache_dir is not None:
        return Path(cache_dir)
    if os.environ.get("DISGEN_CACHE"):
        return Path(os.environ["DISGEN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "disgen"


def materialisations(cache_dir=None) -> list[dict]:
    """The log of this cache's builds, one dict per materialisation, oldest first."""
    path = cache_root(cache_dir) / LOG
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _render(reference: DatasetReference, out: Path) -> dict:
    """Render a procedural reference into ``out``, a block at a time; its manifest."""
    started = time.perf_counter()
    name, space = reference.dataset, factor_space(reference.dataset)
    index = grid_draw(space, reference.n_images, reference.seed)
    image_shape = render_stored(name, space.classes_of(index[:1])).shape[1:]
    step = prepared.rows_per_block(image_shape)
    render = lambda rows: render_stored(name, space.classes_of(rows))  # noqa: E731
    blocks = [prepared.write_block(out, first, render(index[first:first + step]))
              for first in range(0, len(index), step)]
    classes = prepared.write_classes(out, space.classes_of(index))
    source = {"kind": "procedural", "generator_version": GENERATOR_VERSIONS[name],
              "n_images": reference.n_images, "seed": reference.seed}
    return prepared.write_manifest(out, name, space, image_shape, blocks, classes, source, "node cache",
                                   time.perf_counter() - started)


def _copy(reference: DatasetReference, out: Path) -> dict:
    """Copy a prepared folder into ``out``, every file checked against its manifest."""
    manifest = prepared.read_manifest(reference.uri)
    if manifest["content_id"] != reference.content_id:
        raise ValueError(f"{reference.uri}: its content id is {manifest['content_id'][:16]}…, not the "
                         f"{reference.content_id[:16]}… the sweep was planned with: the prepared data "
                         "changed since; start a new experiment (--name) for the new data")
    out.mkdir(parents=True, exist_ok=True)
    for entry in [manifest["classes"], *manifest["blocks"]]:
        prepared.copy_verified(reference.uri, entry["file"], entry["sha256"], out / entry["file"])
    (out / prepared.MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def _convert(reference: DatasetReference, out: Path) -> dict:
    from data_pipeline.conversion import RealFile, convert

    source = RealFile(reference.uri, reference.dataset)
    if file_reference(reference.dataset, reference.uri, source.identity).content_id != reference.content_id:
        raise ValueError(f"{reference.uri}: the file changed (size or modification time) since the sweep "
                         "was planned; start a new experiment (--name) for the new file")
    return convert(reference.uri, out, dataset=reference.dataset, progress=False)


BUILDERS = {"procedural": _render, "prepared": _copy, "file": _convert}


class NodeCacheFull(RuntimeError):
    """A dataset that this node's cache cannot hold: bigger than the limit once every entry no
    process holds is evicted, or the disk filled up while it was built. Its message names the size
    needed, the limit, the entries held (and by which processes) and how to raise the limit. Not
    retried: the same node would fail the same way (``sweeps/trainable.py`` reports it as the
    trial's models' error)."""

    def __init__(self, message: str, needed: int = 0, limit: int = 0, held: tuple = ()):
        super().__init__(message)
        self.needed, self.limit, self.held = needed, limit, tuple(held)

    def __reduce__(self):  # crosses process boundaries (Ray) with its fields
        return (type(self), (str(self), self.needed, self.limit, self.held))


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def cache_limit(root, limit=None) -> tuple[int, str]:
    """The cache's limit in bytes, and where it came from: ``limit`` (bytes as an int, or text as
    ``$DISGEN_CACHE_LIMIT`` takes it), else ``$DISGEN_CACHE_LIMIT``, else :data:`DEFAULT_LIMIT`.
    Text is a size (``200G``, ``500MiB``, ``1.5T``, ``123456``: units of 1024 bytes) or a share of
    the file system that holds ``root`` (``80%``)."""
    if isinstance(limit, int):
        return limit, f"{limit:,} bytes"
    source = "the limit given" if limit is not None else f"${LIMIT_ENV}"
    text = limit if limit is not None else os.environ.get(LIMIT_ENV)
    if not text:
        text, source = DEFAULT_LIMIT, "the default"
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(%|[kmgt]?(?:i?b)?)\s*", str(text), re.IGNORECASE)
    if not match:
        raise ValueError(f"{LIMIT_ENV}={text!r}: expected a size (200G, 500M, 1.5T, bytes) or a share of "
                         "the disk (80%)")
    number, unit = float(match.group(1)), match.group(2).lower()
    if unit == "%":
        total = shutil.disk_usage(root).total
        return int(total * min(number, 100.0) / 100), f"{text} of the {_size(total)} disk ({source})"
    return int(number * _UNITS[unit[:1]]), f"{text} ({source})"


def _size(n: float) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} bytes"


def expected_bytes(reference: DatasetReference) -> int:
    """What ``reference``'s entry will take on disk, read without building it (a prepared folder's
    manifest; the generator's grid points and image shape; a real file's array header)."""
    if reference.kind == "prepared":
        manifest = prepared.read_manifest(reference.uri)
        return sum(b["bytes"] for b in manifest["blocks"]) + manifest["classes"]["bytes"] + MANIFEST_SLACK
    if reference.kind == "procedural":
        space = factor_space(reference.dataset)
        index = grid_draw(space, reference.n_images, reference.seed)
        shape = render_stored(reference.dataset, space.classes_of(index[:1])).shape[1:]
        n = len(index)
    else:
        from data_pipeline.conversion import RealFile

        source = RealFile(reference.uri, reference.dataset)
        space, n, shape = source.factor_space, source.n, source.image_shape
    per_class = prepared.compact_classes(np.asarray([max(space.sizes) - 1])).dtype.itemsize
    return n * int(np.prod(shape)) + n * len(space.sizes) * per_class + MANIFEST_SLACK


# -- holders: one lease file per process and entry ------------------------------------------------

_HOLDS: dict[tuple, int] = {}  # (pid, root, entry) → how many of this process's datasets use it
_HOLDS_LOCK = threading.Lock()


def _process_start(pid: int) -> str | None:
    """A process's start time (Linux: /proc's clock ticks since boot), which tells a reused pid."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _lease_alive(lease: dict, age: float | None = None) -> bool:
    """Whether the process a lease names still runs: on this host, by its pid and start time; from
    another host (a cache folder shared between machines), while it was renewed less than
    :data:`LEASE_TTL_S` seconds ago (``age``, by the cache file system's clock; None: unknown)."""
    if lease.get("host") != socket.gethostname():
        return age is None or age <= LEASE_TTL_S
    pid = int(lease.get("pid", 0))
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    started = _process_start(pid)
    return not (lease.get("started") and started and started != lease["started"])


def _lease_path(root: Path, entry: str, pid: int | None = None) -> Path:
    return root / HOLDERS / entry / f"{socket.gethostname()}.{pid or os.getpid()}"


def _file_system_now(folder: Path) -> float:
    """The clock of the file system ``folder`` is on: the modification time of a file written now."""
    probe = folder / f".clock-{socket.gethostname()}.{os.getpid()}.{threading.get_ident()}"
    probe.write_bytes(b"")
    try:
        return probe.stat().st_mtime
    finally:
        probe.unlink(missing_ok=True)


def holders(root, entry: str) -> list[dict]:
    """The live leases on ``entry`` (``pid``, ``host``, ``started``, ``at``); stale ones are removed."""
    folder, live, now = Path(root) / HOLDERS / entry, [], None
    if not folder.is_dir():
        return live
    for path in folder.iterdir():
        if path.name.startswith(".clock-"):
            continue
        try:
            lease = json.loads(path.read_text())
        except (OSError, ValueError):
            lease = {}
        age = None
        if lease.get("host") != socket.gethostname():
            now = _file_system_now(folder) if now is None else now
            with contextlib.suppress(OSError):
                age = now - path.stat().st_mtime
        if _lease_alive(lease, age):
            live.append(lease)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return live


def _hold(root: Path, entry: str) -> None:
    """This process holds ``entry`` (one more use); its last use is now. Under the index lock."""
    key = (os.getpid(), str(root), entry)
    with _HOLDS_LOCK:
        _HOLDS[key] = _HOLDS.get(key, 0) + 1
        path = _lease_path(root, entry)
        path.parent.mkdir(parents=True, exist_ok=True)
        lease = {"pid": os.getpid(), "host": socket.gethostname(), "started": _process_start(os.getpid()),
                 "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
        path.write_text(json.dumps(lease))
        _start_renewing()
    os.utime(root / entry)  # the least recently used entry is evicted first


_RENEWER: dict[int, threading.Thread] = {}  # pid → the thread that renews its leases


def renew_leases() -> int:
    """Touch every lease this process holds (its time to live starts again); how many."""
    with _HOLDS_LOCK:
        held = [(Path(root), entry) for (pid, root, entry) in _HOLDS if pid == os.getpid()]
    renewed = 0
    for root, entry in held:
        with contextlib.suppress(OSError):
            os.utime(_lease_path(root, entry))
            renewed += 1
    return renewed


def _start_renewing() -> None:
    """This process's lease renewer, started once (a forked child starts its own). Under _HOLDS_LOCK."""
    if os.getpid() in _RENEWER:
        return

    def renewing():
        while True:
            time.sleep(LEASE_TTL_S / 3)
            renew_leases()

    thread = threading.Thread(target=renewing, name="disgen-cache-leases", daemon=True)
    _RENEWER[os.getpid()] = thread
    thread.start()


def release(root, entry: str, pid: int | None = None) -> None:
    """One use of ``entry`` by this process ends; its lease goes with the last one. (A finalizer
    inherited by a forked child, ``pid`` being its parent's, does nothing.)"""
    if pid is not None and pid != os.getpid():
        return
    key = (os.getpid(), str(root), entry)
    with _HOLDS_LOCK:
        count = _HOLDS.get(key, 0) - 1
        if count > 0:
            _HOLDS[key] = count
            return
        _HOLDS.pop(key, None)
        with contextlib.suppress(OSError):
            _lease_path(Path(root), entry).unlink()


# -- the cache's contents, limit and evictions -----------------------------------------------------


@contextlib.contextmanager
def _index(root: Path):
    """The cache-wide lock: leases, reservations and evictions (short; never held while building)."""
    with open(root / INDEX_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _folder_bytes(folder: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _whole(folder: Path) -> bool:
    return (folder / prepared.MANIFEST).is_file()


def _building(root: Path, entry: str) -> bool:
    """Whether a process builds ``entry`` now (it holds the entry's build lock)."""
    path = root / f"{entry}.lock"
    if not path.exists():
        return False
    with open(path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False


def _reservation(root: Path, entry: str) -> Path:
    return root / f".{entry}.reserved"


def _usage(root: Path, entry_being_built: str) -> tuple[list[dict], int, int]:
    """(the whole entries: name, bytes, last use, holders; the bytes the cache takes, builds in
    progress counted at the size they will reach; the bytes those builds have yet to write).
    Leftovers of processes that died (a half-built or half-evicted folder, a reservation) are
    deleted on the way."""
    entries, used, unwritten = [], 0, 0
    for path in sorted(root.iterdir()):
        name = path.name
        if name.startswith(".evicted-"):
            shutil.rmtree(path, ignore_errors=True)  # under the index lock: its evictor died
        elif name.endswith(".reserved") and name.startswith("."):
            entry = name[1:-len(".reserved")]
            if entry == entry_being_built:
                continue
            written = sum(_folder_bytes(p) for p in root.glob(f".{entry}.tmp-*"))
            if not _building(root, entry):
                path.unlink(missing_ok=True)
                continue
            try:
                reserved = int(json.loads(path.read_text())["bytes"])
            except (OSError, ValueError, KeyError):
                reserved = written
            used += max(reserved, written)
            unwritten += max(0, reserved - written)
        elif ".tmp-" in name and name.startswith("."):
            entry = name[1:].split(".tmp-")[0]
            if entry == entry_being_built:
                continue
            if not _building(root, entry):
                shutil.rmtree(path, ignore_errors=True)  # a build that died
        elif path.is_dir() and not name.startswith(".") and _whole(path):
            size = _folder_bytes(path)
            entries.append({"entry": name, "bytes": size, "last_used": path.stat().st_mtime,
                            "holders": holders(root, name)})
            used += size
    return entries, used, unwritten


def _evict(root: Path, entry: dict) -> None:
    """Rename the entry out of sight (a reader sees it whole or not at all), then delete it."""
    gone = root / f".evicted-{entry['entry']}-{os.getpid()}-{time.time_ns()}"
    os.rename(root / entry["entry"], gone)
    shutil.rmtree(root / HOLDERS / entry["entry"], ignore_errors=True)
    shutil.rmtree(gone, ignore_errors=True)
    record = {"at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "host": socket.gethostname(), "pid": os.getpid(), "entry": entry["entry"],
              "bytes": entry["bytes"], "last_used": dt.datetime.fromtimestamp(
                  entry["last_used"], dt.timezone.utc).isoformat(timespec="seconds")}
    with open(root / EVICTIONS, "a") as log:
        log.write(json.dumps(record) + "\n")
    print(f"disgen: evicted {entry['entry']} ({_size(entry['bytes'])}, unused since {record['last_used']}) "
          f"from the node cache {root}", flush=True)


def evictions(cache_dir=None) -> list[dict]:
    """The log of this cache's evictions, one dict per evicted entry, oldest first."""
    path = cache_root(cache_dir) / EVICTIONS
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _how_to_raise(root: Path) -> str:
    return (f"raise the limit with {LIMIT_ENV} on the nodes (a size such as {LIMIT_ENV}=200G, or a share of "
            f"the disk such as {LIMIT_ENV}=80%; the default is {DEFAULT_LIMIT}), point DISGEN_CACHE at a "
            f"bigger disk (now {root}), give the nodes bigger disks, or run fewer datasets per node at once")


def _held_text(entries: list[dict]) -> str:
    held = [e for e in entries if e["holders"]]
    if not held:
        return "no entry is held by a running process"
    return (f"{_size(sum(e['bytes'] for e in held))} of it held by running processes: " + ", ".join(
        f"{e['entry']} ({_size(e['bytes'])}, pid {' '.join(str(h.get('pid')) for h in e['holders'])})"
        for e in held))


def _make_room(root: Path, reference: DatasetReference, needed: int, limit) -> list[str]:
    """Evict unheld entries, least recently used first, until ``needed`` more bytes fit under the
    limit and on the disk, then reserve them (``.<entry>.reserved``); the entries evicted.
    :class:`NodeCacheFull` (evicting nothing) if they cannot fit."""
    with _index(root):
        limit_bytes, limit_text = cache_limit(root, limit)
        entries, used, unwritten = _usage(root, reference.entry)
        free = shutil.disk_usage(root).free - unwritten

        def fits(freed: int) -> bool:
            return used - freed + needed <= limit_bytes and needed <= free + freed

        unheld = sorted((e for e in entries if not e["holders"]), key=lambda e: e["last_used"])
        if not fits(sum(e["bytes"] for e in unheld)):
            held = [e for e in entries if e["holders"]]  # evicting every other entry would not do
            raise NodeCacheFull(
                f"the node cache on {socket.gethostname()} cannot hold {reference.dataset} "
                f"({reference.entry}): it needs {_size(needed)}; the cache's limit is {_size(limit_bytes)} "
                f"({limit_text}); {_held_text(entries)}; the disk has {_size(max(0, free))} free; "
                f"{_how_to_raise(root)}",
                needed, limit_bytes, tuple((e["entry"], e["bytes"]) for e in held))
        evicted, freed = [], 0
        for entry in unheld:
            if fits(freed):
                break
            _evict(root, entry)
            evicted.append(entry["entry"])
            freed += entry["bytes"]
        _reservation(root, reference.entry).write_text(json.dumps({"bytes": needed, "pid": os.getpid()}))
    return evicted


def _disk_full(error: BaseException) -> bool:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        error = error.__cause__ or error.__context__
    return False


def materialise(reference: DatasetReference, cache_dir=None, limit=None) -> Path:
    """This node's prepared folder for ``reference``: built once (see the module docstring), then
    found; the calling process holds it (:func:`release` lets it go; :func:`open_reference` does,
    once the dataset is freed). ``limit``: the cache's limit (:func:`cache_limit`). Safe for any
    number of processes at once. :class:`NodeCacheFull` if it cannot fit."""
    root = cache_root(cache_dir)
    final = root / reference.entry
    root.mkdir(parents=True, exist_ok=True)
    with _index(root):
        if _whole(final):
            _hold(root, reference.entry)
            return final
    with open(root / f"{reference.entry}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        with _index(root):
            if _whole(final):  # built by another process while this one waited
                _hold(root, reference.entry)
                return final
        for stale in root.glob(f".{reference.entry}.tmp-*"):  # a build that died: nobody else holds it
            shutil.rmtree(stale, ignore_errors=True)
        needed = expected_bytes(reference)
        _make_room(root, reference, needed, limit)
        building = root / f".{reference.entry}.tmp-{os.getpid()}"
        started = time.perf_counter()
        try:
            building.mkdir()
            manifest = BUILDERS[reference.kind](reference, building)
            if reference.kind != "prepared":  # a copy was checked byte by byte on the way in
                prepared.verify(building)
            with _index(root):
                os.rename(building, final)
                _hold(root, reference.entry)
                _reservation(root, reference.entry).unlink(missing_ok=True)
        except BaseException as error:
            shutil.rmtree(building, ignore_errors=True)
            _reservation(root, reference.entry).unlink(missing_ok=True)
            if _disk_full(error):
                limit_bytes, limit_text = cache_limit(root, limit)
                with _index(root):
                    entries = _usage(root, reference.entry)[0]
                raise NodeCacheFull(
                    f"the disk of the node cache on {socket.gethostname()} filled up while "
                    f"{reference.dataset} ({reference.entry}, {_size(needed)}) was built into it ({error}); "
                    f"the partial copy was deleted. The cache's limit is {_size(limit_bytes)} "
                    f"({limit_text}), "
                    f"the disk has {_size(shutil.disk_usage(root).free)} free, and {_held_text(entries)}; "
                    f"something else fills the disk, or {_how_to_raise(root)}",
                    needed, limit_bytes, tuple((e["entry"], e["bytes"]) for e in entries if e["holders"]),
                ) from error
            raise
        seconds = time.perf_counter() - started
        size = sum(entry["bytes"] for entry in manifest["blocks"])
        record = {"at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                  "host": socket.gethostname(), "pid": os.getpid(), "kind": reference.kind,
                  "dataset": reference.dataset, "uri": reference.uri, "content_id": reference.content_id,
                  "n_images": manifest["n_images"], "bytes": size, "seconds": round(seconds, 3)}
        with open(root / LOG, "a") as log:
            log.write(json.dumps(record) + "\n")
        print(f"disgen: materialised {reference.kind} {reference.dataset} ({manifest['n_images']:,} images, "
              f"{size / 2**20:,.0f} MiB) into {final} in {seconds:.1f} s", flush=True)
    return final


def open_reference(reference: DatasetReference, n_images: int | None = None, seed: int = 0,
                   cache_dir=None, limit=None) -> GroundTruthDataset:
    """The dataset a trial trains on: ``reference`` materialised in this node's cache (once) and
    memory-mapped, then ``n_images`` rows chosen with ``seed`` as an index set
    (:func:`data_pipeline.subsets.subset_rows`). A procedural reference already holds just the
    grid points drawn for its own ``n_images`` and ``seed``. A subset keeps the stored data's
    ``observe`` wherever it has one (a generator renders any grid point, and a whole-grid file
    indexes any grid point from the same memory map), so its evaluation can draw held-out images
    and score pools from the whole grid. The process holds the cache entry (no eviction takes it)
    until the dataset's memory maps are freed; ``limit``: the cache's (:func:`cache_limit`)."""
    from data_pipeline.subsets import subset_rows

    folder = materialise(reference, cache_dir, limit)
    try:
        manifest = prepared.read_manifest(folder)
        data = prepared.open_dataset(folder, manifest)
    except BaseException:
        release(folder.parent, reference.entry)
        raise
    # the process holds the entry while any view of its memory maps lives (a subset's included)
    images = data.images
    anchor = images.blocks[0] if hasattr(images, "blocks") else images
    weakref.finalize(anchor, release, folder.parent, reference.entry, os.getpid())
    if reference.kind == "procedural":
        return data
    rows = subset_rows(data.name, data.classes, data.factor_space, n_images, seed)
    if rows is None:
        return data
    return data.subset(rows, observe=True)

