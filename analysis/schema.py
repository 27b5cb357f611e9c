"""The results schema: one Arrow schema for each results table, defined once.

``trials.parquet`` holds one row per finished trial: its configuration and its final metrics.
``history.parquet`` holds one row per (trial, report): the step and the loss terms. Everything
that writes or reads results goes through these schemas, so pandas always sees the same dtypes;
where and how the files are stored is ``analysis/storage.py``'s business.
"""

from __future__ import annotations

import pyarrow as pa

from data_pipeline.spaces import DATASETS, factor_space
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

# The factors that have readout columns (accuracy_<factor>, chance_<factor>): every factor name of
# every registered dataset (data_pipeline.spaces), in registry order.
READOUT_FACTORS = tuple(dict.fromkeys(name for dataset in DATASETS for name in factor_space(dataset).names))

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
    # Added by issue 26: the readout accuracy per factor on held-in training images (docs/analysis.md,
    # "Readout accuracy per factor"): accuracy_<factor> on training images the readout did not fit,
    # chance_<factor> = 1 / the factor's number of values on the training images; null where the
    # row's dataset has no such factor, and in files written before.
    *[pa.field(f"{kind}_{name}", pa.float64())
      for name in READOUT_FACTORS for kind in ("accuracy", "chance")],
    pa.field("readout_estimator", pa.string()),  # dci_gbt, dci_hist_gbt (DCI's fits) or random_forest
    pa.field("readout_n_train", pa.int64()),  # training-image codes the readout was fitted on
    pa.field("readout_n_test", pa.int64()),  # other training images it was scored on
    # every factor of the row's dataset, names outside READOUT_FACTORS too (a labelled dataset's):
    # JSON {factor: {"accuracy": a, "chance": c}}, null where NaN
    pa.field("factor_readout", pa.string()),
    pa.field("node_id", pa.string()),  # the Ray node that trained the model
    pa.field("device", pa.string()),  # cpu, cuda or mps
    pa.field("train_seconds", pa.float64()),
    pa.field("eval_seconds", pa.float64()),
    # When the model's training started and ended (a pack's members share their pack's; after a
    # restore, the restored run's) and when its evaluation started and ended: in its trial, or in
    # the CPU-only task that evaluated it while its GPU trained the next (sweeps/evaluation.py).
    # Null in files written before the columns existed.
    pa.field("train_started_at", pa.timestamp("ms", tz="UTC")),
    pa.field("train_ended_at", pa.timestamp("ms", tz="UTC")),
    pa.field("eval_started_at", pa.timestamp("ms", tz="UTC")),
    pa.field("eval_ended_at", pa.timestamp("ms", tz="UTC")),
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
        if not names.issuperset(row):
            raise KeyError(f"columns not in the results schema: {sorted(set(row) - names)}")
    return pa.Table.from_pylist(rows, schema=schema)


def conform(table: pa.Table, schema: pa.Schema, where: str = "results") -> pa.Table:
    """A table read from a results file, cast to ``schema``. Columns the file lacks are filled
    with nulls (files written before a nullable column was added stay readable and resumable);
    columns the schema lacks are dropped."""
    if table.schema.equals(schema):  # as written by to_table: nothing to do
        return table
    for field in schema:
        if field.name not in table.column_names:
            if not field.nullable:  # pragma: no cover - every field is nullable today
                raise KeyError(f"{where}: column {field.name!r} is missing")
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    return table.select(schema.names).cast(schema)
