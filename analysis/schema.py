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
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from models.registry import LOSS_TERMS as OBJECTIVE_LOSS_TERMS

# The configuration of a trial: what was run.
CONFIG_FIELDS = [
    pa.field("experiment", pa.string()),
    pa.field("trial_key", pa.string()),
    # Ray Tune's id of the trial that trained the model (a pack's members share one), and the
    # model's TensorBoard folder relative to the experiment folder; null in older files.
    pa.field("trial_id", pa.string()),
    pa.field("tensorboard_dir", pa.string()),
    pa.field("preset", pa.string()),
    pa.field("scale", pa.string()),
    pa.field("dataset", pa.string()),
    pa.field("n_images", pa.int64()),
    # procedural (rendered by disgen's generators) or real (the dataset's real file); null in
    # files written before the column existed, which were all procedural.
    pa.field("data_source", pa.string()),
    # The dataset the trial read: where (a prepared folder or URI, a real file's path, or
    # generator:<dataset>) and the content id that names its bytes (data_pipeline.node_cache);
    # null in files written before the columns existed.
    pa.field("data_uri", pa.string()),
    pa.field("data_content_id", pa.string()),
    pa.field("split", pa.string()),
    pa.field("condition", pa.string()),
    pa.field("architecture", pa.string()),
    # vae, ground_truth_decoder or composition; null in files from before the column (all vae)
    pa.field("task", pa.string()),
    pa.field("objective", pa.string()),
    pa.field("beta", pa.float64()),
    pa.field("latent_dim", pa.int64()),
    pa.field("lr", pa.float64()),
    pa.field("batch_size", pa.int64()),
    pa.field("steps", pa.int64()),
    pa.field("kl_warmup_steps", pa.int64()),
    pa.field("seed", pa.int64()),
    # Objective- and schedule-specific settings; null where a trial's model has no such setting.
    pa.field("gamma", pa.float64()),
    pa.field("epochs", pa.float64()),
    pa.field("lr_decay", pa.float64()),
    pa.field("grad_clip_norm", pa.float64()),
    pa.field("capacity_max", pa.float64()),
    pa.field("capacity_steps", pa.int64()),
    pa.field("mmd_weight", pa.float64()),
    pa.field("logvar_l1_weight", pa.float64()),
    pa.field("pair_divergence", pa.string()),
    pa.field("pair_factors_changed", pa.int64()),
    pa.field("input_noise_subpixel_std", pa.float64()),
    pa.field("input_noise_greyscale_std", pa.float64()),
    pa.field("image_size", pa.int64()),
    # The whole trial config as JSON, so that no setting is ever lost, whatever the grid held.
    pa.field("config", pa.string()),
]

# The final metrics of a trial: what came out.
METRIC_FIELDS = [
    pa.field("train_nll", pa.float64()),  # mean Bernoulli NLL per training image, nats
    pa.field("test_nll", pa.float64()),  # the same on the held-out condition's test images
    pa.field("dci_disentanglement", pa.float64()),  # Eastwood & Williams, standard GBT
    pa.field("dci_completeness", pa.float64()),
    pa.field("dci_informativeness", pa.float64()),  # GBT test accuracy, mean over factors
    pa.field("d_score", pa.float64()),  # Montero et al. 2021's Lasso D-score
    # Added by the analysis issue; all nullable, NaN/null where a metric was not computed.
    pa.field("mig", pa.float64()),  # mutual information gap, 20 bins (Chen et al.)
    pa.field("sap", pa.float64()),  # SAP, discrete factors, LinearSVC (Kumar et al.)
    pa.field("modularity", pa.float64()),  # Ridgeway & Mozer, on the 20-bin MI matrix
    pa.field("explicitness", pa.float64()),  # ROC-AUC of a logistic regression, test part
    pa.field("beta_vae_score", pa.float64()),  # eval accuracy; null unless a full factorial grid
    pa.field("factor_vae_score", pa.float64()),  # eval accuracy; null unless a full factorial grid
    # Dittadi et al. 2021 transfer: MAE on factors in [0, 1], lower is better
    *[pa.field(f"transfer_{regressor}_{scenario}", pa.float64())
      for regressor in ("gbt", "mlp") for scenario in ("ood1_a", "ood1_b", "ood1_c", "ood2")],
    # Montero et al. 2022: encoder vs decoder on the held-out images
    pa.field("encoder_error_train", pa.float64()),  # linear readout MAE, training images
    pa.field("encoder_error_test", pa.float64()),  # the same on held-out images
    pa.field("decoder_nll_train", pa.float64()),  # NLL decoding the codes images should have
    pa.field("decoder_nll_test", pa.float64()),
    pa.field("n_train_images", pa.int64()),
    pa.field("n_test_images", pa.int64()),
    # Added by issue 14 (fidelity); null in files written before.
    pa.field("nll_likelihood", pa.string()),  # the likelihood of train_nll/test_nll: bernoulli or gaussian
    pa.field("transfer_factor", pa.string()),  # the OOD1 factor of the transfer scores
    pa.field("encoder_fails", pa.float64()),  # 1.0/0.0: encoder_error_test > ratio·train + margin
    pa.field("decoder_fails", pa.float64()),  # the same rule for decoder_nll
    pa.field("diagnosis_ratio", pa.float64()),  # the rule's parameters (disgen's, not M22's)
    pa.field("diagnosis_encoder_margin", pa.float64()),
    pa.field("diagnosis_decoder_margin", pa.float64()),
    # the samples the metrics used: DCI/SAP/modularity fit on metric_n_train training images and
    # test on metric_n_test drawn independently (MIG and D-score: the first); the BetaVAE/FactorVAE
    # scores' batch, points, variance sample and pool (0: fresh draws), and what they were drawn from
    pa.field("metric_n_train", pa.int64()),
    pa.field("metric_n_test", pa.int64()),
    pa.field("score_batch_size", pa.int64()),
    pa.field("score_n_train", pa.int64()),
    pa.field("score_n_eval", pa.int64()),
    pa.field("score_n_variance", pa.int64()),
    pa.field("score_pool_size", pa.int64()),
    pa.field("score_sample", pa.string()),
    pa.field("node_id", pa.string()),  # the Ray node that trained the model
    pa.field("device", pa.string()),  # cpu, cuda or mps
    pa.field("train_seconds", pa.float64()),
    pa.field("eval_seconds", pa.float64()),
    pa.field("finished_at", pa.timestamp("s", tz="UTC")),
]

TRIALS_SCHEMA = pa.schema(CONFIG_FIELDS + METRIC_FIELDS)

# Loss terms an objective may report, from the objectives' own lists (models.registry), in the
# registry's order; a trial fills the ones its objective has.
LOSS_TERMS = ["loss", *dict.fromkeys(term for terms in OBJECTIVE_LOSS_TERMS.values() for term in terms)]

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


def conform(table: pa.Table, schema: pa.Schema, where: str = "results") -> pa.Table:
    """A table read from a results file, cast to ``schema``. Columns the file lacks are filled
    with nulls (files written before a nullable column was added stay readable and resumable);
    columns the schema lacks are dropped."""
    for field in schema:
        if field.name not in table.column_names:
            if not field.nullable:  # pragma: no cover - every field is nullable today
                raise KeyError(f"{where}: column {field.name!r} is missing")
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    return table.select(schema.names).cast(schema)


def read_table(path: str, schema: pa.Schema) -> pa.Table:
    """Read a local results file, cast to ``schema``; an empty table if the file does not exist."""
    if not os.path.exists(path):
        return schema.empty_table()
    return conform(pq.read_table(path), schema, path)


def append_rows(directory: str, filename: str, rows: list[dict]) -> int:
    """Add rows to a local results file, replacing rows with the same key, atomically.

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
    _write_local(table, path)
    return table.num_rows


def _write_local(table: pa.Table, path: str) -> None:
    """Write to a temporary file beside ``path``, then rename it over ``path``."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


# -- results anywhere: a local folder or a pyarrow file-system URI (s3://bucket/prefix) ---------------
#
# On an object store a finished trial does not download and re-upload the whole files: it adds its
# rows as one small *part* per file under ``PARTS_DIR`` (history first, then trials), and readers
# merge the parts with the compacted files. ``compact`` folds the parts back into the two files.

PARTS_DIR = "results-parts"


def _location(experiment: str) -> tuple[pafs.FileSystem, str]:
    experiment = str(experiment)
    if "://" in experiment:
        return pafs.FileSystem.from_uri(experiment)
    return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(experiment))


def _read_at(fs: pafs.FileSystem, path: str, schema: pa.Schema) -> pa.Table:
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return schema.empty_table()
    return conform(pq.read_table(path, filesystem=fs), schema, path)


def _part_paths(fs: pafs.FileSystem, inner: str) -> list[str]:
    """The experiment's part files, oldest first (their names start with a UTC time)."""
    folder = f"{inner}/{PARTS_DIR}"
    if fs.get_file_info(folder).type == pafs.FileType.NotFound:
        return []
    return sorted(info.path for info in fs.get_file_info(pafs.FileSelector(folder))
                  if info.path.endswith(".parquet"))


def _merged(fs: pafs.FileSystem, inner: str, filename: str, parts: list[str]) -> pa.Table:
    """The compacted file and its parts, one row per key (the latest wins). History rows are
    kept only for trials that have their row in trials.parquet: history is written first, so a
    crash between the two writes leaves history that no reader sees until its trial row lands."""
    schema, keys = SCHEMAS[filename], KEYS[filename]
    suffix = "." + filename
    tables = [_read_at(fs, f"{inner}/{filename}", schema)]
    tables += [_read_at(fs, p, schema) for p in parts if p.endswith(suffix)]
    table = pa.concat_tables(tables)
    if filename == HISTORY_FILE:
        trials = _merged(fs, inner, TRIALS_FILE, parts)
        committed = pa.compute.is_in(table.column("trial_key"), value_set=trials.column("trial_key"))
        table = table.filter(committed)
    if len(tables) > 1 and table.num_rows:  # the compacted file alone holds each key once
        last = {key: i for i, key in enumerate(zip(*(table.column(k).to_pylist() for k in keys)))}
        table = table.take(pa.array(sorted(last.values()), pa.int64()))
    return table


def merged_table(fs: pafs.FileSystem, inner: str, filename: str) -> pa.Table | None:
    """An experiment's results as one Arrow table: the compacted file and any parts merged (see
    ``_merged``); None when there is neither."""
    parts = _part_paths(fs, inner)
    if not parts and fs.get_file_info(f"{inner}/{filename}").type != pafs.FileType.File:
        return None
    return _merged(fs, inner, filename, parts)


def read_results(experiment: str, filename: str = TRIALS_FILE) -> pd.DataFrame:
    """One experiment's results file as a DataFrame with the schema's dtypes, one row per key.

    ``experiment`` is a local folder or a pyarrow file-system URI (``s3://bucket/prefix/name``).
    Rows still in parts (``PARTS_DIR``) are merged in; history rows appear only for trials that
    have their trials.parquet row. Both sweeps and analysis read results through this function."""
    fs, inner = _location(experiment)
    table = _merged(fs, inner, filename, _part_paths(fs, inner))
    return table.to_pandas(types_mapper={pa.string(): pd.StringDtype()}.get)


def _put(fs: pafs.FileSystem, table: pa.Table, path: str) -> None:
    """Write one file whole. Local: a temporary file renamed over ``path``. An object store:
    one PUT, which readers see whole or not at all."""
    if isinstance(fs, pafs.LocalFileSystem):
        _write_local(table, path)
        return
    with fs.open_output_stream(path) as stream:
        pq.write_table(table, stream)


def write_part(experiment: str, history: list[dict], trials: list[dict]) -> str:
    """Add finished trials' rows as one part per file, history first, then the trials: a trials
    row is never visible without its history. Returns the parts' common stem."""
    import datetime as dt
    import uuid

    fs, inner = _location(experiment)
    fs.create_dir(f"{inner}/{PARTS_DIR}", recursive=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    stem = f"{inner}/{PARTS_DIR}/{stamp}-{uuid.uuid4().hex[:8]}"
    _put(fs, to_table(history, HISTORY_SCHEMA), f"{stem}.{HISTORY_FILE}")
    _put(fs, to_table(trials, TRIALS_SCHEMA), f"{stem}.{TRIALS_FILE}")
    return stem


def compact(experiment: str) -> int:
    """Fold the parts into history.parquet and trials.parquet (in that order), then delete them.
    A crash at any point leaves files that ``read_results`` reads the same. Returns the parts folded."""
    fs, inner = _location(experiment)
    parts = _part_paths(fs, inner)
    if not parts:
        return 0
    trials = _merged(fs, inner, TRIALS_FILE, parts)
    history = _merged(fs, inner, HISTORY_FILE, parts)
    _put(fs, history, f"{inner}/{HISTORY_FILE}")
    _put(fs, trials, f"{inner}/{TRIALS_FILE}")
    for path in parts:
        fs.delete_file(path)
    return len(parts)
