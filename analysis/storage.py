"""Where an experiment lives, and how its results are stored there: a local folder or any URI a
pyarrow file system understands (``s3://bucket/prefix``, ``gs://``, ``hdfs://``, ``file://``).

Both sides use this module: the sweep (its trials write history, its driver commits rows and
compacts) and the analysis (which reads). Everything goes through pyarrow's file systems, the
layer Ray Tune uses for its own storage, so a local path and ``s3://`` behave alike. For an
S3-compatible server other than AWS, set ``AWS_ENDPOINT_URL`` (and the usual ``AWS_*`` keys).

The results of an experiment (the tables of ``analysis/schema.py``)::

    trials.parquet, history.parquet      the compacted tables, written at the end of each run
    results-parts/
      <part>.history.parquet             one finished Tune trial's loss history, written by the trial
      <part>.trials.parquet              its rows (one per model), written by the driver: the commit
      compacted-<...>.history.parquet    every ``COMPACT_EVERY`` commits, the driver folds the parts
      compacted-<...>.trials.parquet       committed since the last fold into one pair

Every file is written whole or not at all (``write_whole``: built in memory, written under a
temporary name, then renamed or, on an object store, copied into place), and each finished trial adds
one pair of parts, so a result costs the same for the thousandth trial as for the first. A history
file's rows are visible only for the trial keys its own trials file holds (``history.parquet`` ↔
``trials.parquet``, ``<part>.history.parquet`` ↔ ``<part>.trials.parquet``): a trial's history is
written before its row, and until the row lands no reader sees it. Readers merge the compacted
tables, the folded pairs and the parts not yet folded (each folded pair names the parts it holds),
and keep one row per key: a model's finished row where it has one (the first stored: the driver
stores no second), else its latest (failed or stopped). At the end of a run the driver compacts
everything into the two tables and deletes ``results-parts``; a crash at any point leaves files
that read the same.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from analysis.schema import (
    HISTORY_FILE,
    HISTORY_SCHEMA,
    KEYS,
    SCHEMAS,
    TRIALS_FILE,
    TRIALS_SCHEMA,
    conform,
    sorted_groups,
    to_pandas,
    to_table,
)
from data_pipeline import prepared

# Where a remote store is; passed on to Ray's workers. Never its credentials: a runtime
# environment is shown by the dashboard. On AWS, nodes get theirs from an instance profile
# (cluster/iam); a local Ray's workers inherit the driver's environment.
STORAGE_ENVIRONMENT = ("AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_REGION")

PARTS_DIR = "results-parts"
COMPACTED = "compacted-"  # the name of a folded pair of parts starts with it
FOLDED_PARTS = b"disgen.folded_parts"  # a folded trials file's metadata: the parts it holds (JSON)
COMPACT_EVERY = 100  # commits between two folds
_TABLES = {TRIALS_FILE: "trials", HISTORY_FILE: "history"}
_READ_THREADS = 16  # files read at once from an object store
_READ_ATTEMPTS = 5  # a reader that meets a file the driver has just compacted away lists again


# -- locations ----------------------------------------------------------------------------------------


def is_remote(location) -> bool:
    """Whether ``location`` is a URI (``s3://…``) rather than a local path."""
    return "://" in os.fspath(location)


def join(location, *parts: str) -> str:
    location = os.fspath(location)
    if is_remote(location):
        return "/".join([location.rstrip("/"), *parts])
    return os.path.join(location, *parts)


def normalise(location) -> str:
    """A local path made absolute; a URI unchanged (without a trailing slash)."""
    location = os.fspath(location)
    return location.rstrip("/") if is_remote(location) else os.path.abspath(os.path.expanduser(location))


def experiment_name(location) -> str:
    """An experiment's name: the last part of its folder or URI."""
    return os.path.basename(os.path.normpath(os.fspath(location).split("://")[-1]))


_S3_FILESYSTEMS: dict[tuple, pafs.FileSystem] = {}


def resolve(location, filesystem: pafs.FileSystem | None = None) -> tuple[pafs.FileSystem, str]:
    """(file system, path inside it) of a local path or URI; with ``filesystem``, ``location`` is
    a path inside it. An ``s3://`` file system is made once per bucket and ``AWS_*`` environment
    (:func:`s3_filesystem`)."""
    location = os.fspath(location)
    if filesystem is not None:
        return filesystem, location.rstrip("/") if location != "/" else location
    if not is_remote(location):
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(location))
    if not location.startswith("s3://") or "?" in location:
        return pafs.FileSystem.from_uri(location)
    inner = location[len("s3://"):].rstrip("/")
    bucket = inner.split("/", 1)[0]
    key = (bucket, tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))))
    if key not in _S3_FILESYSTEMS:
        _S3_FILESYSTEMS[key] = s3_filesystem(bucket)
    return _S3_FILESYSTEMS[key], inner


def s3_filesystem(bucket: str) -> pafs.S3FileSystem:
    """pyarrow's S3 file system for ``bucket``, as ``from_uri`` makes it from this process's
    ``AWS_*`` environment (the bucket's region, ``AWS_ENDPOINT_URL``; no keys of its own, so one
    pickled to a worker signs with the worker's), which writes a small file with one PUT
    (``allow_delayed_open``) and writes a folder's empty ``…/`` key only where there is none
    (``check_directory_existence_before_creation``, which ``from_uri`` does not take): pyarrow
    otherwise writes every folder key on a path again at each upload into it, each a new object
    version on a versioned bucket (benchmarks/README.md, "Object versions outside `checkpoints/`")."""
    made, _ = pafs.FileSystem.from_uri(f"s3://{bucket}?allow_delayed_open=true")
    options = made.__reduce__()[1][0]  # the options from_uri resolved, as pickling carries them
    return pafs.S3FileSystem(**{**options, "check_directory_existence_before_creation": True})


def exists(location, filesystem: pafs.FileSystem | None = None) -> bool:
    fs, inner = resolve(location, filesystem)
    return fs.get_file_info(inner).type != pafs.FileType.NotFound


def list_names(location) -> list[str]:
    """Names directly inside a folder (empty if it does not exist)."""
    fs, inner = resolve(location)
    if fs.get_file_info(inner).type == pafs.FileType.NotFound:
        return []
    return [os.path.basename(info.path) for info in fs.get_file_info(pafs.FileSelector(inner))]


def read_bytes(location, filesystem: pafs.FileSystem | None = None) -> bytes | None:
    """The content of a file, or None if there is none."""
    fs, inner = resolve(location, filesystem)
    if fs.get_file_info(inner).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(inner) as stream:
        return stream.read()


def check_writable(location) -> None:
    """Create ``location`` and write and delete a probe file there; raise OSError if that fails."""
    fs, inner = resolve(location)
    fs.create_dir(inner, recursive=True)
    probe = f"{inner}/.disgen-write-test-{uuid.uuid4().hex}"
    with fs.open_output_stream(probe) as stream:
        stream.write(b"ok")
    fs.delete_file(probe)


def retention_warning(location: str, checkpoints_prefix: str) -> str | None:
    """Where ``location`` is on S3 and its bucket lacks what ``cluster/iam/create_bucket.py`` gives
    it (versioning on, so a deleted results file can be brought back; earlier versions expiring,
    everywhere and sooner under ``checkpoints_prefix``, so storage stays bounded): what is missing,
    as one warning; None where nothing is, or elsewhere than S3."""
    if not location.startswith("s3://") or (client := _s3_client()) is None:
        return None
    from botocore.exceptions import BotoCoreError, ClientError

    bucket = location[len("s3://"):].split("/", 1)[0]
    try:
        versioning = client.get_bucket_versioning(Bucket=bucket).get("Status")
        try:
            rules = client.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "NoSuchLifecycleConfiguration":
                raise
            rules = []
    except (BotoCoreError, ClientError) as error:
        return f"could not read the versioning and lifecycle rules of the bucket {bucket} ({error})"

    def expires_under(prefix: str) -> bool:  # a rule of its own where ``prefix`` is not the whole bucket
        for rule in rules:
            scope = (rule.get("Filter") or {}).get("Prefix", rule.get("Prefix", ""))
            if rule.get("Status") == "Enabled" and "NoncurrentVersionExpiration" in rule \
                    and prefix.startswith(scope) and bool(scope) == bool(prefix):
                return True
        return False

    missing = []
    if versioning != "Enabled":
        missing.append("versioning is off (a results file deleted by mistake cannot be brought back)")
    elif not expires_under(""):
        missing.append("earlier versions never expire (every rewritten file is kept forever)")
    elif not expires_under(checkpoints_prefix):
        missing.append(f"no rule of its own expires the rotated checkpoints' earlier versions under "
                       f"{checkpoints_prefix} (a new version every few minutes per trial)")
    if not missing:
        return None
    return (f"the bucket {bucket} lacks disgen's storage rules: {'; '.join(missing)}. Put them in place "
            f"with: python cluster/iam/create_bucket.py --bucket {bucket} (docs/cluster.md)")


def worker_environment() -> dict[str, str]:
    """The storage-related environment of this process, to hand to Ray's workers."""
    return {name: os.environ[name] for name in STORAGE_ENVIRONMENT if name in os.environ}


def download_if_exists(source: str, local_path: str) -> bool:
    """Copy ``source`` (a path or URI) to a local file; False if there is nothing there."""
    fs, inner = resolve(source)
    if fs.get_file_info(inner).type == pafs.FileType.NotFound:
        return False
    pafs.copy_files(inner, local_path, source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())
    return True


def upload(local_path: str, destination: str) -> None:
    fs, inner = resolve(destination)
    pafs.copy_files(local_path, inner, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)


# -- writing results ----------------------------------------------------------------------------------


def new_part() -> str:
    """A new part's name: the UTC time, then a random suffix (names sort oldest first)."""
    return f"{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%dT%H%M%S%fZ')}-{uuid.uuid4().hex[:8]}"


def write_whole(fs: pafs.FileSystem, path: str, content) -> None:
    """Write the file ``path`` of ``fs`` whole or not at all: a reader sees the old file (or none)
    or the new one, never a part, whatever is raised meanwhile. ``content``: bytes, or a function
    that writes to a binary stream, run to the end in memory before anything is opened. Then
    ``data_pipeline.prepared.write_whole``: a temporary file beside ``path`` renamed over it
    (locally ``os.replace``; on an object store a server-side copy), deleted on failure."""
    if callable(content):
        buffer = pa.BufferOutputStream()
        content(buffer)
        content = buffer.getvalue().to_pybytes()
    prepared.write_whole(fs, path, content)


def _put(fs: pafs.FileSystem, table: pa.Table, path: str) -> None:
    """Write one table whole (``write_whole``). Group columns are written with sorted dictionaries
    (``sorted_groups``), so that pandas' categories read from it sort as their values."""
    table = sorted_groups(table)
    write_whole(fs, path, lambda stream: pq.write_table(table, stream))


def _part_path(inner: str, part: str, filename: str) -> str:
    return f"{inner}/{PARTS_DIR}/{part}.{filename}"


def _write_part(experiment, part: str, filename: str, table: pa.Table) -> None:
    fs, inner = resolve(experiment)
    if isinstance(fs, pafs.LocalFileSystem):  # an object store has no folders to make
        os.makedirs(f"{inner}/{PARTS_DIR}", exist_ok=True)
    _put(fs, table, _part_path(inner, part, filename))


def write_history_part(experiment, part: str, rows: list[dict]) -> None:
    """A finished trial's loss history (``history.parquet`` rows of its models) as the part
    ``part``: the trial writes it before its final report. No reader sees it until the trials
    part of the same name lands."""
    _write_part(experiment, part, HISTORY_FILE, to_table(rows, HISTORY_SCHEMA))


def write_trials_part(experiment, part: str, rows: list[dict]) -> None:
    """The trials rows of a finished trial as the part ``part``: the commit, which makes them and
    the history part of the same name visible."""
    _write_part(experiment, part, TRIALS_FILE, to_table(rows, TRIALS_SCHEMA))


def write_results(experiment, trials: list[dict], history: list[dict] = ()) -> str:
    """Rows added to an experiment's results as one new part: the history, then the trials rows
    (the commit); a trials row without a ``status`` is a finished model's. A row replaces an
    earlier one with the same key. Returns the part's name."""
    part = new_part()
    trials = [{"status": "finished", **row} for row in trials]
    trials_table = to_table(trials, TRIALS_SCHEMA)  # checked before anything is written
    history_table = to_table(list(history), HISTORY_SCHEMA)
    if history_table.num_rows:
        _write_part(experiment, part, HISTORY_FILE, history_table)
    _write_part(experiment, part, TRIALS_FILE, trials_table)
    return part


# -- reading results ----------------------------------------------------------------------------------


@dataclass
class _Pair:
    """A trials file and the history file beside it: the compacted tables (``name`` empty), a
    folded pair or a part. ``trials`` is read; ``history`` only when history is wanted."""

    name: str
    trials_path: str | None = None
    history_path: str | None = None
    trials: pa.Table | None = None
    folded: list[str] = field(default_factory=list)  # the parts a folded pair holds


def _listing(fs: pafs.FileSystem, inner: str) -> tuple[_Pair, list[_Pair], list[_Pair]]:
    """(the compacted tables, the folded pairs, the parts) as they are now, oldest first."""
    main = _Pair("")
    infos = fs.get_file_info([f"{inner}/{TRIALS_FILE}", f"{inner}/{HISTORY_FILE}"])
    if infos[0].type == pafs.FileType.File:
        main.trials_path = infos[0].path
    if infos[1].type == pafs.FileType.File:
        main.history_path = infos[1].path
    pairs: dict[str, _Pair] = {}
    selector = pafs.FileSelector(f"{inner}/{PARTS_DIR}", allow_not_found=True)
    for info in fs.get_file_info(selector):
        base = info.base_name
        for filename, table in _TABLES.items():
            if info.type == pafs.FileType.File and base.endswith("." + filename):
                pair = pairs.setdefault(base[:-len(filename) - 1], _Pair(base[:-len(filename) - 1]))
                setattr(pair, f"{table}_path", info.path)
    ordered = [pairs[name] for name in sorted(pairs)]
    return (main, [p for p in ordered if p.name.startswith(COMPACTED)],
            [p for p in ordered if not p.name.startswith(COMPACTED)])


class TornRead(OSError):
    """A results file that did not read whole as one version (replaced while it was read): the
    read is made again (``_retrying``)."""


_s3_client = prepared.s3_client  # one client per endpoint, shared with the writes


def _whole(fs: pafs.FileSystem, path: str) -> bytes:
    """A remote file's bytes, all of one version. On S3 (with boto3): one ``GetObject`` of the
    whole object, whose answer is one version of it whatever replaces it meanwhile, checked against
    the length it announces. pyarrow's reads ask the size first, then read in ranges, each of
    which can come from another version where compaction replaces the file meanwhile: elsewhere
    the file's size and modification time are read before and after, and a read across a change
    is a ``TornRead``."""
    client = _s3_client() if fs.type_name == "s3" else None
    if client is None:
        before = fs.get_file_info(path)
        if before.type == pafs.FileType.NotFound:
            raise FileNotFoundError(path)
        with fs.open_input_stream(path) as stream:
            data = stream.read()
        after = fs.get_file_info(path)
        if (before.size, before.mtime) != (after.size, after.mtime) or len(data) != before.size:
            raise TornRead(f"{path} changed while it was read")
        return data
    bucket, key = path.split("/", 1)
    try:
        answer = client.get_object(Bucket=bucket, Key=key)
    except client.exceptions.NoSuchKey:
        raise FileNotFoundError(path) from None
    body = answer["Body"].read()
    if len(body) != answer["ContentLength"]:
        raise TornRead(f"{path}: {len(body)} of {answer['ContentLength']} bytes read")
    return body


def _read_file(fs: pafs.FileSystem, path: str, schema: pa.Schema) -> pa.Table:
    """One results file cast to ``schema``, with its metadata. A remote file is read whole, as one
    version (``_whole``); one that does not parse is a ``TornRead`` (read again)."""
    if isinstance(fs, pafs.LocalFileSystem):
        table = pq.ParquetFile(path).read()
    else:
        data = _whole(fs, path)
        try:
            table = pq.ParquetFile(pa.BufferReader(data)).read()
        except (pa.ArrowInvalid, OSError) as error:
            raise TornRead(f"{path} did not read whole ({error}); reading it again") from error
    return conform(table, schema, path).replace_schema_metadata(table.schema.metadata)


def _read_files(fs: pafs.FileSystem, paths: list[str], schema: pa.Schema, missing_ok=False) -> list:
    """Several files read at once (on an object store) or one after another (local); with
    ``missing_ok``, a file that is not there reads as None."""

    def read(path):
        try:
            return _read_file(fs, path, schema)
        except FileNotFoundError:
            if missing_ok:
                return None
            raise

    if isinstance(fs, pafs.LocalFileSystem) or len(paths) < 2:
        return [read(p) for p in paths]
    with ThreadPoolExecutor(min(_READ_THREADS, len(paths))) as pool:
        return list(pool.map(read, paths))


def _latest(table: pa.Table, keys: list[str]) -> pa.Table:
    """One row per key: the last one (rows come oldest first); in the trials table, a model's last
    finished row wherever it has one (a failed or stopped model's row gives way to the row of its
    finished run, never the other way)."""
    if table.num_rows < 2:
        return table
    order = np.arange(table.num_rows)
    if "status" in table.column_names:
        finished = pc.equal(table.column("status").cast(pa.string()), "finished").fill_null(False)
        order = order + table.num_rows * np.asarray(finished, dtype=np.int64)
    rows = table.select(keys).append_column("_row", pa.array(order))
    last = rows.group_by(keys, use_threads=False).aggregate([("_row", "max")]).column("_row_max")
    if len(last) == table.num_rows:
        return table
    return table.take(pa.array(np.sort(last.to_numpy() % table.num_rows)))


def _committed(fs: pafs.FileSystem, inner: str, listing=None) -> list[_Pair]:
    """The pairs whose rows readers see, oldest first, each with its trials table read: the
    compacted tables, the folded pairs, and the parts that no folded pair holds (of ``listing``,
    ``_listing``'s answer, where one is given)."""
    main, folded, parts = listing or _listing(fs, inner)
    first = [p for p in [main, *folded] if p.trials_path]
    for pair, table in zip(first, _read_files(fs, [p.trials_path for p in first], TRIALS_SCHEMA)):
        pair.trials = table
        pair.folded = json.loads((table.schema.metadata or {}).get(FOLDED_PARTS, b"[]"))
    held = {name for pair in first for name in pair.folded}
    rest = [p for p in parts if p.trials_path and p.name not in held]
    for pair, table in zip(rest, _read_files(fs, [p.trials_path for p in rest], TRIALS_SCHEMA)):
        pair.trials = table
    return first + rest


def _trials(pairs: list[_Pair]) -> pa.Table:
    tables = [p.trials.replace_schema_metadata(TRIALS_SCHEMA.metadata) for p in pairs]
    return _latest(pa.concat_tables([TRIALS_SCHEMA.empty_table(), *tables]), KEYS[TRIALS_FILE])


def _statuses(table: pa.Table) -> dict[str, str]:
    """Each model's status in a trials table, as readers see it: ``finished`` where it has a
    finished row, else its latest row's (failed or stopped)."""
    statuses: dict[str, str] = {}
    for key, status in zip(table.column("trial_key").to_pylist(),
                           table.column("status").cast(pa.string()).to_pylist()):
        if statuses.get(key) != "finished":
            statuses[key] = status
    return statuses


def _history(fs: pafs.FileSystem, pairs: list[_Pair], missing_ok=False) -> pa.Table:
    """The history rows of ``pairs`` that their own trials files hold, one per (trial, step)."""
    with_history = [p for p in pairs if p.history_path]
    tables = [HISTORY_SCHEMA.empty_table()]
    for pair, table in zip(with_history, _read_files(fs, [p.history_path for p in with_history],
                                                      HISTORY_SCHEMA, missing_ok)):
        if table is not None:
            keys = pair.trials.column("trial_key")
            tables.append(table.replace_schema_metadata(HISTORY_SCHEMA.metadata).filter(
                pc.is_in(table.column("trial_key"), value_set=keys)))
    return _latest(pa.concat_tables(tables), KEYS[HISTORY_FILE])


def _retrying(read):
    """Run ``read`` again where a file it listed was compacted away meanwhile, or did not read
    whole as one version (``TornRead``)."""
    for attempt in range(_READ_ATTEMPTS):
        try:
            return read()
        except (FileNotFoundError, TornRead):
            if attempt == _READ_ATTEMPTS - 1:
                raise


def read_table(experiment, filename: str = TRIALS_FILE,
               filesystem: pafs.FileSystem | None = None) -> pa.Table | None:
    """One results table of an experiment as Arrow, one row per key: the compacted table, the
    folded pairs and the parts merged (history only for trials that have their row); None when the
    experiment has no such file at all."""
    fs, inner = resolve(experiment, filesystem)

    def read():
        pairs = _committed(fs, inner)
        if not pairs:
            return None
        if filename == TRIALS_FILE:
            return _trials(pairs)
        if filename == HISTORY_FILE:
            return _history(fs, pairs) if any(p.history_path for p in pairs) else None
        raise ValueError(f"{filename!r}: not a results table; use {TRIALS_FILE} or {HISTORY_FILE}")

    return _retrying(read)


def read_results(experiment, filename: str = TRIALS_FILE) -> pd.DataFrame:
    """One results table of an experiment as a DataFrame with the schema's dtypes (empty, with
    every column, where there are no results yet). Both sweeps and analysis read this way."""
    table = read_table(experiment, filename)
    schema = SCHEMAS[filename]
    return to_pandas(schema.empty_table() if table is None else table, schema)


def has_results(experiment) -> bool:
    """Whether an experiment has compacted results or parts."""
    fs, inner = resolve(experiment)
    main, folded, parts = _listing(fs, inner)
    return bool(main.trials_path or folded or parts)


# -- compaction -----------------------------------------------------------------------------------------


def compact(experiment, stale: Sequence[str] = ()) -> int:
    """Fold the committed parts into ``history.parquet`` and ``trials.parquet`` (in that order),
    then delete the files folded, and no other part: a part committed after the listing (another
    driver's, one that has not noticed it lost the lease) stays, and readers merge it as before.
    ``stale``: parts that no trials file commits, to delete too (``ResultsStore`` passes those that
    were there before its run began: a killed run's). A crash at any point leaves files that read
    the same. Returns the files deleted."""
    fs, inner = resolve(experiment)
    listing = _listing(fs, inner)
    pairs = _committed(fs, inner, listing)
    if len(pairs) > 1 or (pairs and pairs[0].name):  # anything beyond the compacted tables
        history = _history(fs, pairs)
        trials = _trials(pairs)
        _put(fs, history, f"{inner}/{HISTORY_FILE}")
        _put(fs, trials, f"{inner}/{TRIALS_FILE}")
    folded = {p.name for p in pairs if p.name} | {name for pair in pairs for name in pair.folded}
    _, folded_pairs, parts = listing
    listed = [(p.name, path) for p in folded_pairs + parts for path in (p.trials_path, p.history_path)]
    stale = set(stale)
    deleted = [path for name, path in listed if path and (name in folded or path in stale)]
    marker = [f"{inner}/{PARTS_DIR}/"] if fs.type_name == "s3" else []  # a folder's empty object, if any
    _delete(fs, deleted + marker)
    if isinstance(fs, pafs.LocalFileSystem):  # an object store has no folders
        with contextlib.suppress(OSError):  # not empty: a part committed since the listing
            os.rmdir(f"{inner}/{PARTS_DIR}")
    for info in fs.get_file_info(pafs.FileSelector(inner)):  # what a killed write left (write_whole)
        if info.type == pafs.FileType.File and info.base_name.startswith(".") \
                and info.base_name.endswith(prepared.TEMPORARY):
            fs.delete_file(info.path)
    return len(deleted)


def _delete(fs: pafs.FileSystem, paths: list[str]) -> None:
    """Delete files; one already gone is no error. On S3 with boto3, ``DeleteObject`` sixteen at a
    time (pyarrow's ``delete_file`` writes a folder marker after each delete; moto 5.2 judges a
    batch ``DeleteObjects`` by another action than the ``s3:DeleteObject`` that AWS checks)."""
    client = _s3_client() if fs.type_name == "s3" else None
    if client is None:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                fs.delete_file(path)
        return
    from botocore.exceptions import BotoCoreError, ClientError

    def delete(path: str) -> None:
        bucket, key = path.split("/", 1)
        try:
            client.delete_object(Bucket=bucket, Key=key)
        except (BotoCoreError, ClientError) as error:
            raise OSError(f"s3://{path}: not deleted: {error}") from error

    with ThreadPoolExecutor(_READ_THREADS) as pool:
        list(pool.map(delete, paths))


def uncommitted_parts(experiment) -> list[str]:
    """The paths of the parts that no trials file commits now: history a trial wrote before its
    trials row was committed (or never will be: its run was killed)."""
    fs, inner = resolve(experiment)
    _, _, parts = _listing(fs, inner)
    return [p.history_path for p in parts if p.history_path and not p.trials_path]


class ResultsStore:
    """An experiment's results as the one process that commits them (a sweep's driver) keeps them:
    each stored model's status (``statuses``: finished, failed or stopped) and the keys of the
    finished ones (``keys``), read once when opened, and the parts committed since the last fold.
    ``commit`` writes a finished trial's trials part; every ``compact_every`` commits, ``fold``
    turns those parts into one folded pair, so readers merge a bounded number of files and no
    commit rewrites what earlier ones wrote. ``compact`` ends a run."""

    def __init__(self, experiment, compact_every: int = COMPACT_EVERY, fence=None):
        self.experiment = normalise(experiment)
        self.compact_every = compact_every
        # called before each write (``fence()``) and before compaction (``fence(destructive=True)``):
        # it raises where this process may no longer write (the driver lock's ``fence``)
        self.fence = fence or (lambda destructive=False: None)
        self.fs, self.inner = resolve(self.experiment)
        pairs = _retrying(lambda: _committed(self.fs, self.inner))
        self.statuses: dict[str, str] = _statuses(_trials(pairs)) if pairs else {}
        self.keys: set[str] = {key for key, status in self.statuses.items() if status == "finished"}
        # committed parts that no folded pair holds yet (a previous run's, then this one's)
        self.unfolded = [_Pair(p.name, p.trials_path, p.history_path, p.trials)
                         for p in pairs if p.name and not p.name.startswith(COMPACTED)]
        # history parts no trials file committed when this run began: a killed run's, deleted at
        # compaction (a part written since may be a trial's of this run whose commit is on its way)
        self.stale = uncommitted_parts(self.experiment)

    def commit(self, part: str, rows: list[dict]) -> list[dict]:
        """Store trials rows as the part ``part`` (whose history part, if any, the trial wrote).
        A model whose finished row is stored keeps it: any new row of it is dropped. A failed or
        stopped model's row is replaced by its next one (readers keep a model's finished row, else
        its latest). Returns the rows stored."""
        rows = [row for row in rows if row["trial_key"] not in self.keys]
        if not rows:
            return []
        table = to_table(rows, TRIALS_SCHEMA)
        self.fence()
        _write_part(self.experiment, part, TRIALS_FILE, table)
        self.keys.update(row["trial_key"] for row in rows if row.get("status") == "finished")
        self.statuses.update({row["trial_key"]: row.get("status") for row in rows})
        self.unfolded.append(_Pair(part, _part_path(self.inner, part, TRIALS_FILE),
                                   _part_path(self.inner, part, HISTORY_FILE), table))
        if len(self.unfolded) >= self.compact_every:
            self.fold()
        return rows

    def fold(self) -> int:
        """The parts committed since the last fold, as one folded pair: their history (what their
        trials files commit), then their trials rows, which name the parts they hold. The parts
        stay until ``compact``; readers skip them. Returns the parts folded."""
        if not self.unfolded:
            return 0
        self.fence()
        history = _history(self.fs, self.unfolded, missing_ok=True)  # a trial without history wrote none
        names = [p.name for p in self.unfolded]
        trials = _trials(self.unfolded).replace_schema_metadata(
            {**TRIALS_SCHEMA.metadata, FOLDED_PARTS: json.dumps(names).encode()})
        name = COMPACTED + new_part()
        _write_part(self.experiment, name, HISTORY_FILE, history)
        _write_part(self.experiment, name, TRIALS_FILE, trials)
        self.unfolded = []
        return len(names)

    def compact(self) -> int:
        """Everything into ``trials.parquet`` and ``history.parquet`` (see ``compact``), and the
        history parts that were left uncommitted before this run began deleted."""
        self.fence(destructive=True)
        self.unfolded = []
        deleted, self.stale = compact(self.experiment, self.stale), []
        return deleted
