"""Results into pandas, wherever they live: a local folder, ``s3://bucket/prefix``, or any URI a
pyarrow file system understands (``gs://``, ``hdfs://``, ``file://``, ...), one experiment or
several at once.

The dtypes are fixed by the schema (``analysis/schema.py``): integer columns come back as
pandas' nullable ``Int64`` (a trial without a seed is ``<NA>``, not a float NaN), floats as
``float64``, and the columns that name a group (:data:`CATEGORICAL_COLUMNS`) as categoricals.
For S3-compatible servers other than AWS, set ``AWS_ENDPOINT_URL`` (and the usual ``AWS_*``
variables), as for the sweep itself.
"""

from __future__ import annotations

import json
import os

import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs

from analysis.schema import HISTORY_FILE, SCHEMAS, TRIALS_FILE, conform, merged_table

ERRORS_FILE = "errors.jsonl"  # failed trials, one JSON object a line (sweeps/results.py)

# Columns whose few distinct values name groups: categoricals, so that grouping and sorting are
# cheap and every value is listed once.
CATEGORICAL_COLUMNS = ["experiment", "preset", "scale", "dataset", "data_source", "split", "condition",
                       "architecture", "task", "objective", "pair_divergence", "device", "node_id"]


def is_uri(location: str) -> bool:
    return "://" in str(location)


def resolve(location, filesystem: pafs.FileSystem | None = None) -> tuple[pafs.FileSystem, str]:
    """(file system, path inside it) of a local folder or a URI (``s3://…``, ``gs://…``, ...)."""
    location = os.fspath(location)
    if filesystem is not None:
        return filesystem, location
    if is_uri(location):
        return pafs.FileSystem.from_uri(location)
    return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(location))


def join(location, *parts: str) -> str:
    location = os.fspath(location)
    return "/".join([location.rstrip("/"), *parts]) if is_uri(location) else os.path.join(location, *parts)


def exists(location, filesystem: pafs.FileSystem | None = None) -> bool:
    fs, inner = resolve(location, filesystem)
    return fs.get_file_info(inner).type != pafs.FileType.NotFound


def read_bytes(location, filesystem: pafs.FileSystem | None = None) -> bytes | None:
    """The content of a file, or None if there is none."""
    fs, inner = resolve(location, filesystem)
    if fs.get_file_info(inner).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(inner) as stream:
        return stream.read()


def experiment_name(location) -> str:
    return os.path.basename(os.path.normpath(os.fspath(location).split("://")[-1]))


def load_trials(*experiments, filesystem: pafs.FileSystem | None = None) -> pd.DataFrame:
    """``trials.parquet`` of one or more experiments as one DataFrame (one row per trained model).

    Each experiment is a folder or a URI such as ``s3://bucket/disgen/dittadi2021-full``. An
    experiment without results is an error that names it.
    """
    return _load(experiments, TRIALS_FILE, filesystem)


def load_history(*experiments, filesystem: pafs.FileSystem | None = None) -> pd.DataFrame:
    """``history.parquet`` of one or more experiments: one row per (trial, report), the step and
    the loss terms."""
    return _load(experiments, HISTORY_FILE, filesystem)


def load_errors(*experiments, filesystem: pafs.FileSystem | None = None) -> pd.DataFrame:
    """The failed trials (``errors.jsonl``) of the experiments: trial_key, trial_id, error and
    experiment; empty where nothing failed."""
    rows = []
    for experiment in experiments:
        data = read_bytes(join(experiment, ERRORS_FILE), filesystem)
        for line in (data or b"").decode("utf-8", "replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line of a crashed driver
            rows.append({"experiment": experiment_name(experiment), "trial_key": record.get("trial_key"),
                         "trial_id": record.get("trial_id"),
                         "error": record.get("error") or record.get("error_file") or "failed"})
    frame = pd.DataFrame(rows, columns=["experiment", "trial_key", "trial_id", "error"])
    return frame.drop_duplicates("trial_key", keep="last").reset_index(drop=True)


def _load(experiments, filename: str, filesystem) -> pd.DataFrame:
    if not experiments:
        raise ValueError("pass at least one experiment folder or URI, e.g. ./disgen_results/default")
    schema, tables = SCHEMAS[filename], []
    for experiment in experiments:
        try:
            fs, inner = resolve(experiment, filesystem)
            table = merged_table(fs, inner.rstrip("/"), filename)  # the file, and a running sweep's parts
        except (OSError, pa.ArrowInvalid) as error:
            raise FileNotFoundError(f"{experiment}: cannot open ({error}); pass an experiment folder "
                                    "or a URI such as s3://bucket/prefix/experiment") from error
        if table is None:
            raise FileNotFoundError(
                f"{experiment}: no {filename}; pass an experiment directory such as "
                "./disgen_results/default (the folder that holds trials.parquet)"
            )
        tables.append(conform(table, schema, join(experiment, filename)))
    return to_pandas(pa.concat_tables(tables))


def to_pandas(table: pa.Table) -> pd.DataFrame:
    """An Arrow results table as pandas with nullable integers and categorical group columns."""
    mapping = {pa.int64(): pd.Int64Dtype(), pa.string(): pd.StringDtype()}
    df = table.to_pandas(types_mapper=mapping.get)
    for column in CATEGORICAL_COLUMNS:
        if column in df.columns:
            df[column] = df[column].astype("category")
    return df
