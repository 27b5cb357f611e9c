"""Results into pandas, wherever they live: a local folder, ``s3://bucket/prefix``, or any URI a
pyarrow file system understands (``gs://``, ``hdfs://``, ``file://``, ...), one experiment or
several at once.

Where the files are and how a running sweep's parts merge with them is ``analysis/storage.py``'s
business. The dtypes are fixed by the schema (``analysis/schema.py``), and are the ones
``pd.read_parquet`` gives the files: integer columns come back as pandas' nullable ``Int64`` (a
missing value is ``<NA>``, not a float NaN), flags as ``boolean``, floats as ``float64``, and the
columns that name a group (:data:`CATEGORICAL_COLUMNS`) as categoricals.

The trials table has a row for every planned model that ran, whatever became of it: its ``status``
says finished, failed (``error`` says why) or stopped (by ASHA). ``analysis.finished_models``
keeps the finished ones; every correlation, table, finding and figure of ``analysis`` uses only
those.
For S3-compatible servers other than AWS, set ``AWS_ENDPOINT_URL`` (and the usual ``AWS_*``
variables), as for the sweep itself.
"""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs

from analysis.schema import GROUP_COLUMNS, HISTORY_FILE, SCHEMAS, TRIALS_FILE
from analysis.schema import to_pandas as schema_to_pandas
from analysis.storage import experiment_name, join, read_bytes, read_table

ERRORS_FILE = "errors.jsonl"  # failed trials, one JSON object a line (sweeps/results.py)

# Columns whose few distinct values name groups (the schema's dictionary columns): categoricals, so
# that grouping and sorting are cheap and every value is listed once.
CATEGORICAL_COLUMNS = GROUP_COLUMNS


def load_trials(*experiments, filesystem: pafs.FileSystem | None = None) -> pd.DataFrame:
    """``trials.parquet`` of one or more experiments as one DataFrame: one row per planned model
    that ran, **finished or not**. Its ``status`` column says which: ``finished``, ``failed`` (the
    ``error`` column holds why) or ``stopped`` (early, by ASHA); a failed or stopped model has its
    settings but no metrics. ``analysis.finished_models(df)`` keeps the trained models alone.

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
    tables = []
    for experiment in experiments:
        try:
            table = read_table(experiment, filename, filesystem)  # the file, and a running sweep's parts
        except (OSError, pa.ArrowInvalid) as error:
            raise FileNotFoundError(f"{experiment}: cannot open ({error}); pass an experiment folder "
                                    "or a URI such as s3://bucket/prefix/experiment") from error
        if table is None:
            raise FileNotFoundError(
                f"{experiment}: no {filename}; pass an experiment directory such as "
                "./disgen_results/default (the folder that holds trials.parquet)"
            )
        tables.append(table)
    return schema_to_pandas(pa.concat_tables(tables), SCHEMAS[filename])
