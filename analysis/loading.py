"""Results into pandas, wherever they live: a local folder, ``s3://bucket/prefix`` or any URI a pyarrow
file system understands, one experiment or several at once (docs/analysis.md, "How results are stored").

The dtypes are the schema's (``analysis/schema.py``): integers as nullable ``Int64``, flags as
``boolean``, the columns that name a group as categoricals. The trials table has a row for every
model that ran; its ``status`` says finished, failed or stopped, and ``analysis`` counts the
finished ones only. For S3-compatible servers other than AWS, set ``AWS_ENDPOINT_URL``.
"""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs

from analysis.schema import HISTORY_FILE, SCHEMAS, TRIALS_FILE
from analysis.schema import to_pandas as schema_to_pandas
from analysis.storage import experiment_name, join, read_bytes, read_table, resolve

ERRORS_FILE = "errors.jsonl"  # failed trials, one JSON object a line (written before errors-parts/)
# the failed trials as the driver writes them now: one new file a record, never a file rewritten
# (sweeps/results.py), so no read-modify-write on an object store can lose a line
ERRORS_PARTS = "errors-parts"


def _error_files(experiment, filesystem) -> list[str]:
    """``errors.jsonl`` (an experiment from before the parts), then the parts, oldest first."""
    fs, inner = resolve(join(experiment, ERRORS_PARTS), filesystem)
    parts = sorted(info.base_name for info in fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
                   if info.type == pafs.FileType.File and info.base_name.endswith(".jsonl"))
    return [join(experiment, ERRORS_FILE), *(join(experiment, ERRORS_PARTS, name) for name in parts)]


def load_trials(*experiments, filesystem: pafs.FileSystem | None = None) -> pd.DataFrame:
    """``trials.parquet`` of one or more experiments (folders or URIs) as one DataFrame: a row per
    model that ran, **finished or not** (``status``; ``analysis.finished_models(df)`` keeps the
    trained ones). An experiment without results is an error that names it."""
    return _load(experiments, TRIALS_FILE, filesystem)


def load_history(*experiments, filesystem: pafs.FileSystem | None = None) -> pd.DataFrame:
    """``history.parquet`` of one or more experiments: one row per (trial, report), the step and
    the loss terms."""
    return _load(experiments, HISTORY_FILE, filesystem)


def load_errors(*experiments, filesystem: pafs.FileSystem | None = None) -> pd.DataFrame:
    """The failed trials (``errors-parts/``, and ``errors.jsonl`` of an older experiment) of the
    experiments: trial_key, trial_id, error and experiment; empty where nothing failed."""
    rows = []
    for experiment in experiments:
        data = b"\n".join(read_bytes(path, filesystem) or b""
                          for path in _error_files(experiment, filesystem))
        for line in data.decode("utf-8", "replace").splitlines():
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
            raise FileNotFoundError(f"{experiment}: no {filename}; pass an experiment directory such as "
                                    "./disgen_results/default (the folder that holds trials.parquet)")
        tables.append(table)
    return schema_to_pandas(pa.concat_tables(tables), SCHEMAS[filename])
