"""The results schema: one Arrow schema for each results table, defined once.

``trials.parquet`` holds one row per finished trial: its configuration and its final metrics.
``history.parquet`` holds one row per (trial, report): the step and the loss terms. Everything
that writes or reads results goes through these schemas, so pandas always sees the same dtypes.
"""

from __future__ import annotations

import os
import tempfile

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

# The configuration of a trial: what was run.
CONFIG_FIELDS = [
    pa.field("experiment", pa.string()),
    pa.field("trial_key", pa.string()),
    pa.field("preset", pa.string()),
    pa.field("scale", pa.string()),
    pa.field("dataset", pa.string()),
    pa.field("n_images", pa.int64()),
    pa.field("split", pa.string()),
    pa.field("condition", pa.string()),
    pa.field("architecture", pa.string()),
    pa.field("objective", pa.string()),
    pa.field("beta", pa.float64()),
    pa.field("latent_dim", pa.int64()),
    pa.field("lr", pa.float64()),
    pa.field("batch_size", pa.int64()),
    pa.field("steps", pa.int64()),
    pa.field("kl_warmup_steps", pa.int64()),
    pa.field("seed", pa.int64()),
]

# The final metrics of a trial: what came out.
METRIC_FIELDS = [
    pa.field("train_nll", pa.float64()),  # mean Bernoulli NLL per training image, nats
    pa.field("test_nll", pa.float64()),  # the same on the held-out condition's test images
    pa.field("dci_disentanglement", pa.float64()),  # Eastwood & Williams, standard GBT
    pa.field("dci_completeness", pa.float64()),
    pa.field("dci_informativeness", pa.float64()),  # GBT test accuracy, mean over factors
    pa.field("d_score", pa.float64()),  # Montero et al. 2021's Lasso D-score
    pa.field("n_train_images", pa.int64()),
    pa.field("n_test_images", pa.int64()),
    pa.field("train_seconds", pa.float64()),
    pa.field("eval_seconds", pa.float64()),
    pa.field("finished_at", pa.timestamp("s", tz="UTC")),
]

TRIALS_SCHEMA = pa.schema(CONFIG_FIELDS + METRIC_FIELDS)

# Loss terms an objective may report; a trial fills the ones its objective has.
LOSS_TERMS = ["loss", "reconstruction", "kl"]

HISTORY_SCHEMA = pa.schema(
    [
        pa.field("experiment", pa.string()),
        pa.field("trial_key", pa.string()),
        pa.field("step", pa.int64()),
        *[pa.field(term, pa.float64()) for term in LOSS_TERMS],
        pa.field("images_per_second", pa.float64()),
    ]
)

TRIALS_FILE = "trials.parquet"
HISTORY_FILE = "history.parquet"
# The columns that identify a row, for de-duplication.
KEYS = {TRIALS_FILE: ["trial_key"], HISTORY_FILE: ["trial_key", "step"]}
SCHEMAS = {TRIALS_FILE: TRIALS_SCHEMA, HISTORY_FILE: HISTORY_SCHEMA}


def to_table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """Rows (dicts) → an Arrow table of ``schema``. Missing columns become null; a key that the
    schema lacks is an error, so nothing is silently dropped."""
    names = set(schema.names)
    for row in rows:
        extra = set(row) - names
        if extra:
            raise KeyError(f"columns not in the results schema: {sorted(extra)}")
    columns = {name: [row.get(name) for row in rows] for name in schema.names}
    return pa.Table.from_pydict(columns, schema=schema)


def read_table(path: str, schema: pa.Schema) -> pa.Table:
    """Read a results file, cast to ``schema``; an empty table if the file does not exist."""
    if not os.path.exists(path):
        return schema.empty_table()
    return pq.read_table(path).select(schema.names).cast(schema)


def append_rows(directory: str, filename: str, rows: list[dict]) -> int:
    """Add rows to a results file, replacing rows with the same key, atomically.

    The file is rewritten to a temporary name and renamed over the old one, so a crash leaves
    either the old file or the new one, never a torn one. Returns the number of rows now stored.
    """
    schema, keys = SCHEMAS[filename], KEYS[filename]
    path = os.path.join(directory, filename)
    new = to_table(rows, schema)
    old = read_table(path, schema)
    if old.num_rows and new.num_rows:
        new_keys = set(zip(*(new.column(k).to_pylist() for k in keys)))
        old_keys = list(zip(*(old.column(k).to_pylist() for k in keys)))
        old = old.filter(pa.array([key not in new_keys for key in old_keys], pa.bool_()))
    table = pa.concat_tables([old, new])
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{filename}.", suffix=".tmp")
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return table.num_rows


def read_results(directory: str, filename: str = TRIALS_FILE) -> pd.DataFrame:
    """One experiment's results file as a DataFrame with the schema's dtypes."""
    table = read_table(os.path.join(directory, filename), SCHEMAS[filename])
    return table.to_pandas(types_mapper={pa.string(): pd.StringDtype()}.get)
