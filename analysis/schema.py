"""The results schema: one Arrow schema for each results table, defined once.

``trials.parquet`` holds one row per planned model: its status (finished, failed or stopped), every
setting it ran with, what ran it, and its final metrics. ``history.parquet`` holds one row per
(trial, report): the step and the loss terms. Everything that writes or reads results goes through
these schemas, so pandas sees the same dtypes however a file is read (``pd.read_parquet``,
``pyarrow``, ``analysis.load_trials``):

- the columns that name a group (``GROUP``: dataset, split, objective, status, device…) are Arrow
  dictionaries, so pandas reads them as categoricals;
- integers are ``Int64`` and flags ``boolean`` (pandas' nullable dtypes: the schema's pandas
  metadata says so, so a file without nulls and one with them read alike);
- each field's metadata gives its ``unit`` where it has one, and ``null``: what a null means where a
  finished model may have one (a setting that does not apply to it). A setting without ``null``
  metadata is never null for a finished model.

Where and how the files are stored is ``analysis/storage.py``'s business.
"""

from __future__ import annotations

import math
from dataclasses import fields

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from analysis.metrics.registry import metric_columns
from analysis.metrics.registry import setting_types as evaluation_setting_types
from data_pipeline.config import DataConfig
from data_pipeline.spaces import DATASETS, STORED_DATASETS, factor_space
from models.config import SETTINGS as MODEL_DECLARATIONS
from models.registry import LOSS_TERMS as OBJECTIVE_LOSS_TERMS

# A column whose few distinct values name groups: an Arrow dictionary, a categorical in pandas.
GROUP = pa.dictionary(pa.int32(), pa.string())
STATUSES = ("finished", "failed", "stopped")  # finished; failed with its error; stopped by ASHA


def schema_field(name: str, kind: pa.DataType, *, unit: str | None = None,
                 null: str | None = None) -> pa.Field:
    """A results column; ``unit`` and ``null`` (what a null means) go in its metadata."""
    metadata = {k: v for k, v in (("unit", unit), ("null", null)) if v is not None}
    return pa.field(name, kind, metadata=metadata or None)


# -- the settings: every field of the trial's ModelConfig, DataConfig and EvaluationConfig -----------

# (name, declared type) of each setting: the run's own two (sweeps.trials' RUN_KEYS), every field of
# data_pipeline.config's DataConfig and of models.ModelConfig (each model setting's declaration in
# models/config.py gives its unit and what its null means), and the trial settings of analysis'
# EvaluationConfig (analysis/metrics/registry.py).
RUN_SETTINGS = {"preset": "str", "scale": "str"}
DATA_SETTINGS = {f.name: f.type for f in fields(DataConfig)}
EVALUATION_SETTINGS = evaluation_setting_types()
MODEL_SETTINGS = {name: setting.type for name, setting in MODEL_DECLARATIONS.items()}

# Where a finished model's setting may be null, what that means; every other setting is filled
# with its effective value (defaults included; a None that stands for a default is resolved).
SETTING_NULLS = {
    **{name: setting.null for name, setting in MODEL_DECLARATIONS.items() if setting.null},
    "transfer_factor": "no transfer scores computed",
    "ood2_a_dataset": "no OOD2-A set (D21's held-out colours)",
    "ood2_b_dataset": "no OOD2-B set (D21's real images)",
}
UNITS = {
    **{name: setting.unit for name, setting in MODEL_DECLARATIONS.items() if setting.unit},
    "report_every": "steps", "n_images": "images", "n_nll": "images", "n_metric": "images",
    "test_nll_images": "images",
    "trained_steps": "steps", "train_nll": "nats", "test_nll": "nats", "train_seconds": "s",
    "eval_seconds": "s", "images_per_second": "images/s",
}


def setting_type(declared: str) -> pa.DataType:
    """A setting's column type from its declared Python type: a name is a group, a whole number
    int64, a number float64, a flag bool; a sequence (``lr_milestones``, ``metrics``) is its JSON
    text, so that it groups and compares like any other value."""
    kind = declared.replace(" | None", "")
    if kind.startswith("tuple"):
        return pa.string()
    return {"str": GROUP, "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}[kind]


SETTINGS = {**RUN_SETTINGS, **DATA_SETTINGS, **MODEL_SETTINGS, **EVALUATION_SETTINGS}
SETTING_FIELDS = [schema_field(name, setting_type(declared), unit=UNITS.get(name),
                               null=SETTING_NULLS.get(name)) for name, declared in SETTINGS.items()]
JSON_SETTINGS = tuple(name for name, declared in SETTINGS.items() if declared.startswith("tuple"))

# What a row is: which model, its status, and the whole settings as JSON.
CONFIG_FIELDS = [
    schema_field("experiment", GROUP),
    schema_field("trial_key", pa.string()),
    # finished, failed (``error`` says why) or stopped (early, by ASHA); "finished" in files written
    # before the column, which held finished models only
    schema_field("status", GROUP),
    schema_field("error", pa.string(), null="the model did not fail"),
    # Ray Tune's id of the trial that trained the model (a pack's members share one), and the
    # model's TensorBoard folder relative to the experiment folder; null in older files.
    schema_field("trial_id", pa.string()),
    schema_field("tensorboard_dir", pa.string()),
    *SETTING_FIELDS,
    # Every setting above as one JSON object (with the trial key), so that no setting is ever lost.
    schema_field("config", pa.string()),
]

# What ran the model: null in files written before these columns. A model that did not finish
# carries the driver's software versions.
PROVENANCE_FIELDS = [
    # The dataset the trial read: where (a prepared folder or URI, a real file's path, or
    # generator:<dataset>) and the content id that names its bytes (data_pipeline.node_cache).
    schema_field("data_uri", pa.string(), null="written before the column, or the model did not finish"),
    schema_field("data_content_id", GROUP, null="written before the column, or the model did not finish"),
    schema_field("disgen_version", GROUP),
    schema_field("git_commit", GROUP, null="not run from a git checkout"),  # of disgen's own checkout
    schema_field("git_dirty", pa.bool_(), null="not run from a git checkout"),  # uncommitted changes there
    schema_field("python_version", GROUP),
    schema_field("torch_version", GROUP),
    schema_field("ray_version", GROUP),
    schema_field("node_id", GROUP),  # the Ray node that trained the model
    schema_field("device", GROUP),  # cpu, cuda or mps
    schema_field("device_name", GROUP, null="not a CUDA device"),  # e.g. NVIDIA H100 80GB HBM3
]

# The readout columns (analysis.metrics.factor_readout): for every factor of every registered dataset
# (data_pipeline.spaces, the generated ones and then D21's robot finger), in registry order,
# accuracy_<factor> and chance_<factor> where it is
# categorical, r2_<factor> where it is ordinal or circular.
READOUT_COLUMNS = tuple(dict.fromkeys(
    column for space in map(factor_space, DATASETS + STORED_DATASETS)
    for name, kind in zip(space.names, space.kinds)
    for column in ((f"accuracy_{name}", f"chance_{name}") if kind == "categorical" else (f"r2_{name}",))))

# A metric column's type, from its kind in the registry (analysis.metrics.registry.Column).
METRIC_KINDS = {"float": pa.float64(), "int": pa.int64(), "bool": pa.bool_(), "group": GROUP,
                "text": pa.string()}

# The final metrics of a trial: what came out. NaN/null where a metric was not computed, and in
# files written before its column.
METRIC_FIELDS = [
    pa.field("train_nll", pa.float64()),  # mean NLL per training image under nll_likelihood, nats
    pa.field("test_nll", pa.float64()),  # the same on the held-out condition's test images
    pa.field("n_train_images", pa.int64()),  # the trial's training images (its subset's rows)
    # The held-out pool test_nll's images were drawn from: the combinations of the whole factor grid
    # that the split holds out (modifiers included) where the dataset can produce any grid point (a
    # generator, or a file holding the whole grid), else the held-out rows of the trial's own data (a
    # user's labelled data). Before test_nll_images existed: always the trial's held-out rows.
    pa.field("n_test_images", pa.int64()),
    # the held-out images test_nll averages over: min(n_nll, n_test_images), fewer where a split holds
    # out fewer combinations than n_nll (and for the composition network, the targets it could
    # compose); null in files written before the column
    pa.field("test_nll_images", pa.int64()),
    pa.field("nll_likelihood", GROUP),  # the likelihood of train_nll/test_nll: bernoulli or gaussian
    # The in-distribution control (data_pipeline.in_distribution, docs/data.md): the mean NLL per image,
    # as test_nll, on in_distribution_nll_images images of *training* combinations the model never
    # trained on: grid points outside the trial's subset, or the training rows held back from it where
    # it trains on the whole training part (in_distribution_source says which); null (NaN) where none
    # could be had, and in files written before the columns
    schema_field("in_distribution_nll", pa.float64(), unit="nats", null="no in-distribution image"),
    schema_field("in_distribution_nll_images", pa.int64(), unit="images", null="written before the column"),
    schema_field("in_distribution_source", GROUP, null="written before the column"),
    # every registered metric's columns (analysis.metrics.registry.METRICS), its unit and what a
    # null means in their metadata; the OOD1 factor of the transfer scores is the setting
    # transfer_factor, filled as evaluated
    *[schema_field(column.name, METRIC_KINDS[column.kind], unit=column.unit, null=column.null)
      for column in metric_columns()],
    # the samples the metrics used: DCI/SAP/modularity fit on metric_n_train training images and
    # test on metric_n_test drawn independently (MIG and D-score: the first)
    pa.field("metric_n_train", pa.int64()),
    pa.field("metric_n_test", pa.int64()),
    # The readout per factor on held-in training images (docs/analysis.md, "Readout per factor"),
    # scored on training images the readout did not fit: accuracy_<factor> and chance_<factor> (1 /
    # its number of values on the training images) for a categorical factor, r2_<factor> for an
    # ordinal or circular one; null where the row's dataset has no such factor, and in files
    # written before.
    *[pa.field(column, pa.float64()) for column in READOUT_COLUMNS],
    pa.field("readout_estimator", GROUP),  # random_forest (a VAE's codes), decoder_likelihood, or none
    pa.field("readout_n_train", pa.int64()),  # training-image codes the readout was fitted on
    pa.field("readout_n_test", pa.int64()),  # other training images it was scored on
    # every factor of the row's dataset, names outside READOUT_COLUMNS too (a labelled dataset's):
    # JSON {factor: {"kind": k, "score": s, "chance": c}}, null where NaN
    pa.field("factor_readout", pa.string()),
    pa.field("train_seconds", pa.float64()),
    pa.field("eval_seconds", pa.float64()),
    # the step the model reached: its last step if it finished, where it stopped or failed if not
    pa.field("trained_steps", pa.int64()),
    # When the model's training started and ended (a pack's members share their pack's; after a
    # restore, the restored run's) and when its evaluation started and ended: in its trial, or in
    # the CPU-only task that evaluated it while its GPU trained the next (sweeps/evaluation.py).
    # Null in files written before the columns existed.
    pa.field("train_started_at", pa.timestamp("ms", tz="UTC")),
    pa.field("train_ended_at", pa.timestamp("ms", tz="UTC")),
    pa.field("eval_started_at", pa.timestamp("ms", tz="UTC")),
    pa.field("eval_ended_at", pa.timestamp("ms", tz="UTC")),
    pa.field("finished_at", pa.timestamp("ms", tz="UTC")),  # when the row was written (to the second)
]

# Loss terms an objective may report, from the objectives' own lists (models.registry), in the
# registry's order; a trial fills the ones its objective has.
LOSS_TERMS = ["loss", *dict.fromkeys(term for terms in OBJECTIVE_LOSS_TERMS.values() for term in terms)]

HISTORY_FIELDS = [
    pa.field("experiment", GROUP),
    pa.field("trial_key", pa.string()),
    pa.field("step", pa.int64()),
    *[pa.field(term, pa.float64()) for term in LOSS_TERMS],
    pa.field("images_per_second", pa.float64()),
]


def _pandas_dtype(kind: pa.DataType):
    """The pandas dtype a column of ``kind`` reads as: nullable integers and flags, categories."""
    if pa.types.is_dictionary(kind):
        return "category"
    if pa.types.is_integer(kind):
        return "Int64"
    if pa.types.is_boolean(kind):
        return "boolean"
    return None  # pandas' own (float64, its string dtype, datetime64)


def results_schema(columns: list[pa.Field]) -> pa.Schema:
    """A schema of ``columns``, each with its unit, and with pandas metadata that makes every
    reader of the file (``pd.read_parquet`` included) use the dtypes of ``_pandas_dtype``."""
    columns = [c if c.name not in UNITS or (c.metadata or {}).get(b"unit") else
               c.with_metadata({**(c.metadata or {}), b"unit": UNITS[c.name].encode()}) for c in columns]
    empty = pd.DataFrame({c.name: pd.Series([], dtype=_pandas_dtype(c.type) or object) for c in columns})
    metadata = pa.Schema.from_pandas(empty, preserve_index=False).metadata
    return pa.schema(columns, metadata=metadata)


TRIALS_SCHEMA = results_schema(CONFIG_FIELDS + PROVENANCE_FIELDS + METRIC_FIELDS)
HISTORY_SCHEMA = results_schema(HISTORY_FIELDS)
# The group columns of the trials table, categoricals in pandas.
GROUP_COLUMNS = [f.name for f in TRIALS_SCHEMA if pa.types.is_dictionary(f.type)]

TRIALS_FILE = "trials.parquet"
HISTORY_FILE = "history.parquet"
# The columns that identify a row, for de-duplication.
KEYS = {TRIALS_FILE: ["trial_key"], HISTORY_FILE: ["trial_key", "step"]}
SCHEMAS = {TRIALS_FILE: TRIALS_SCHEMA, HISTORY_FILE: HISTORY_SCHEMA}


def _flag(value):
    """A flag as a bool: older results and the metrics give 1.0/0.0; NaN is no value."""
    if value is None or isinstance(value, bool):
        return value
    return None if isinstance(value, float) and math.isnan(value) else bool(value)


def to_table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """Rows (dicts) → an Arrow table of ``schema``. Missing columns become null; a key that the
    schema lacks is an error, so nothing is silently dropped. A flag given as 1.0/0.0 is stored as
    a boolean."""
    names = set(schema.names)
    flags = [f.name for f in schema if pa.types.is_boolean(f.type)]
    for row in rows:
        if not names.issuperset(row):
            raise KeyError(f"columns not in the results schema: {sorted(set(row) - names)}")
    rows = [{**row, **{name: _flag(row[name]) for name in flags if name in row}} for row in rows]
    return pa.Table.from_pylist(rows, schema=schema)


def conform(table: pa.Table, schema: pa.Schema, where: str = "results") -> pa.Table:
    """A table read from a results file, cast to ``schema``. Columns the file lacks are filled
    with nulls (files written before a nullable column was added stay readable and resumable), a
    missing ``status`` with "finished" (older files held finished models only); flags stored as
    1.0/0.0 become booleans (NaN: null); columns the schema lacks are dropped."""
    if table.schema.equals(schema):  # as written by to_table: nothing to do
        return table
    for column in schema:
        if column.name not in table.column_names:
            if not column.nullable:  # pragma: no cover - every field is nullable today
                raise KeyError(f"{where}: column {column.name!r} is missing")
            fill = (pa.array(["finished"] * table.num_rows, column.type) if column.name == "status"
                    else pa.nulls(table.num_rows, column.type))
            table = table.append_column(column, fill)
        elif pa.types.is_boolean(column.type) and pa.types.is_floating(table.schema.field(column.name).type):
            values = table.column(column.name)
            flags = pc.if_else(pc.is_nan(values), pa.scalar(None, values.type), values)
            table = table.set_column(table.schema.get_field_index(column.name), column.name, flags)
    return table.select(schema.names).cast(schema)


def sorted_groups(table: pa.Table) -> pa.Table:
    """``table`` with each group column (dictionary) in one chunk whose dictionary is its values in
    sorted order, so that pandas' categories sort as the values do, however many files or parts
    the table was read from. Results files are written this way."""
    for index, column in enumerate(table.schema):
        if pa.types.is_dictionary(column.type):
            values = table.column(index).cast(pa.string()).combine_chunks()
            unique = pc.unique(values).drop_null()
            dictionary = unique.take(pc.sort_indices(unique))
            indices = pc.index_in(values, value_set=dictionary).cast(column.type.index_type)
            array = pa.DictionaryArray.from_arrays(indices, dictionary)
            table = table.set_column(index, column, array)
    return table


def to_pandas(table: pa.Table, schema: pa.Schema) -> pd.DataFrame:
    """A results table (of ``schema``) as pandas, with the dtypes ``pd.read_parquet`` gives its
    file: integers ``Int64``, flags ``boolean``, group columns categoricals (their categories
    sorted)."""
    return sorted_groups(conform(table, schema)).replace_schema_metadata(schema.metadata).to_pandas()
