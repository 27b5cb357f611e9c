"""The metric registry: every metric ``analysis.evaluate`` computes, and the evaluation's settings.

A metric is one module of ``analysis.metrics`` (a plain function over arrays and a
``score_<name>(sample) -> dict`` that calls it on the evaluation's sample) and one line of
:data:`METRICS`: its name, that function, the results columns it writes (:class:`Column`) and the
inputs it reads (:data:`INPUTS`). ``evaluate``'s loop, the NaN of a metric that did not run, the
results schema's metric columns, the disentanglement scores the report correlates and the names a
grid's ``metrics`` setting accepts all come from the table (docs/analysis.md, "Adding a metric").
:class:`EvaluationConfig` is how a trained model is evaluated. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields

from analysis.metrics.beta_vae_score import score_beta_vae
from analysis.metrics.dci import ESTIMATORS, score_d_score, score_dci
from analysis.metrics.encoder_decoder_diagnosis import (
    DECODER_MARGIN,
    ENCODER_MARGIN,
    RATIO,
    score_encoder_decoder,
)
from analysis.metrics.factor_vae_score import score_factor_vae
from analysis.metrics.mig import score_mig
from analysis.metrics.modularity_explicitness import score_modularity_explicitness
from analysis.metrics.rendering_judge import score_rendering_judge
from analysis.metrics.sap import score_sap
from analysis.metrics.transfer_score import OOD2_SETS, REGRESSORS, check_transfer, score_transfer
from data_pipeline.config import whole_number

KINDS = ("float", "int", "bool", "group", "text")

# What a metric may read of the evaluation's sample (analysis.evaluation.Sample), by input: each is
# drawn and encoded once, when a metric that reads it first asks.
INPUTS = {
    "training_draws": ("codes", "factors", "rows"),  # n_metric training images, with replacement
    "check_draws": ("codes_check", "factors_check", "rows_check"),  # n_metric_test more, independent
    # <= n_metric held-out images (their pixels, codes and factor classes): the first of the held-out
    # sample test_nll reads, drawn from the whole held-out part of the grid where the dataset can
    # produce any grid point (dataset.observe), else from its own held-out rows
    "held_out": ("held_out_codes", "held_out_factors", "held_out_images"),
    # {scenario: (codes, factor classes, factor space)} of <= n_metric images of each OOD2 set the
    # evaluation was given (D21's ood2_a, ood2_b: datasets the encoder never saw); {} where none
    "ood2_sets": ("ood2_sets",),
    "score_pool": ("score_pool",),  # the BetaVAE/FactorVAE scores' sample (analysis.evaluation)
    "model": ("encode", "decode", "dataset"),  # the model's encoder and decoder, the dataset
    # the first <= 200 held-out and in-distribution images, their classes, ground truth and the model's
    # reconstructions of them (analysis.metrics.rendering_judge), and the dataset (its observe)
    "judged": ("judged", "dataset"),
}
# What every metric may read without declaring it: its config and the evaluation's constants.
ALWAYS = ("config", "seed", "n_jobs", "space", "split", "train", "likelihood", "factor_ranges")


@dataclass(frozen=True)
class Column:
    """A results column a metric writes. ``kind``: float, int, bool, group (a name that groups
    rows; a categorical in pandas) or text. ``record``: False for the metric's result (NaN where
    the metric did not run), True for a record of how it ran (a sample size, a parameter), written
    only when it ran. ``null``: what a null means, where a finished model may have one.
    ``disentanglement``: a disentanglement score, one of :data:`DISENTANGLEMENT_SCORES`."""

    name: str
    doc: str = ""
    kind: str = "float"
    unit: str | None = None
    null: str | None = None
    record: bool = False
    disentanglement: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"column {self.name}: unknown kind {self.kind!r}; choose one of "
                             f"{', '.join(KINDS)}")


@dataclass(frozen=True)
class Metric:
    """One line of :data:`METRICS`: ``compute(sample) -> {column: value}``, the columns it writes,
    the :data:`INPUTS` it reads, the settings it resolves (``fills``: a setting column whose
    None it replaces with the value used) and ``check(config, dataset, split)``, run before
    anything is encoded, which raises a ValueError on a setting the metric cannot use.
    ``by_default``: False for a metric computed only where a trial's ``metrics`` names it."""

    compute: Callable[..., dict]
    columns: tuple[Column, ...]
    inputs: tuple[str, ...]
    fills: tuple[str, ...] = ()
    check: Callable | None = None
    by_default: bool = True  # computed where a trial's metrics setting is null (every such metric)

    def __post_init__(self):
        unknown = [name for name in self.inputs if name not in INPUTS]
        if unknown:
            raise ValueError(f"unknown input {unknown[0]!r}; choose from {', '.join(INPUTS)}")

    @property
    def keys(self) -> tuple[str, ...]:
        """Its results: NaN in every row until it runs."""
        return tuple(c.name for c in self.columns if not c.record)


def score(name: str, doc: str = "") -> Column:
    """A disentanglement score's column."""
    return Column(name, doc, disentanglement=True)


# Columns that more than one metric writes
SCORE_SAMPLE = (
    Column("score_batch_size", "images per BetaVAE pair batch and FactorVAE vote", "int", "images",
           record=True),
    Column("score_n_train", "training points (BetaVAE) or votes (FactorVAE)", "int", record=True),
    Column("score_n_eval", "evaluation points or votes", "int", record=True),
    Column("score_n_variance", "images of the FactorVAE code variances", "int", "images", record=True),
    Column("score_pool_size", "training images encoded once to draw from (0: fresh draws)", "int", "images",
           record=True),
    Column("score_sample", "what the pairs and batches were drawn from, and whether it is a full grid",
           "group", record=True),
)
MAE = "mean absolute error on factors scaled to [0, 1]"

# The table: name → metric, in the order evaluate runs them
METRICS: dict[str, Metric] = {
    "d_score": Metric(score_d_score, (score("d_score", "Montero et al. 2021's Lasso D-score"),),
                      ("training_draws",)),
    "dci": Metric(score_dci, (
        score("dci_disentanglement", "Eastwood & Williams 2018, the config's dci_estimator"),
        score("dci_completeness"),
        Column("dci_informativeness", "the estimator's test accuracy, mean over factors"),
    ), ("training_draws", "check_draws")),
    "mig": Metric(score_mig, (score("mig", "mutual information gap, 20 bins (Chen et al. 2018)"),),
                  ("training_draws",)),
    "sap": Metric(score_sap, (score("sap", "SAP, discrete factors, LinearSVC (Kumar et al. 2018)"),),
                  ("training_draws", "check_draws")),
    "modularity_explicitness": Metric(score_modularity_explicitness, (
        score("modularity", "Ridgeway & Mozer 2018, on the 20-bin MI matrix"),
        score("explicitness", "ROC-AUC of a logistic regression, test part"),
    ), ("training_draws", "check_draws")),
    "beta_vae": Metric(score_beta_vae, (
        score("beta_vae_score", "eval accuracy (Higgins et al. 2017); ill-defined unless a full grid"),
        *SCORE_SAMPLE), ("score_pool",)),
    "factor_vae": Metric(score_factor_vae, (
        score("factor_vae_score", "eval accuracy (Kim & Mnih 2018); ill-defined unless a full grid"),
        *SCORE_SAMPLE), ("score_pool",)),
    "transfer": Metric(score_transfer, (  # Dittadi et al. 2021; lower is better
        *(Column(f"transfer_{regressor}_{scenario}", MAE) for regressor in REGRESSORS
          for scenario in ("ood1_a", "ood1_b", "ood1_c", "ood2")),
        *(Column(f"transfer_{regressor}_{scenario}", f"{MAE}, on the trial's {scenario}_dataset (D21's "
                 f"OOD2-{scenario[-1].upper()})", null=f"the trial has no {scenario}_dataset")
          for regressor in REGRESSORS for scenario in OOD2_SETS)),
        ("training_draws", "held_out", "ood2_sets"), fills=("transfer_factor",), check=check_transfer),
    "encoder_decoder": Metric(score_encoder_decoder, (  # Montero et al. 2022, on the held-out images
        Column("encoder_error_train", "the decisive factor's linear readout error in [0, 1] (MAE, "
               "misclassification rate or angle / π by its kind), training images"),
        Column("encoder_error_test", "the same on held-out images"),
        Column("decoder_nll_train", "NLL decoding the codes the images should have", unit="nats"),
        Column("decoder_nll_test", unit="nats"),
        Column("encoder_fails", "any judged factor's error_test > ratio·train + margin", "bool"),
        Column("decoder_fails", "the same rule for decoder_nll", "bool"),
        Column("encoder_factor", "the factor of the split's rule whose readout fails most (decides "
               "encoder_fails)", "group", null="no factor of the split could be judged"),
        Column("encoder_errors", 'JSON {factor: {"kind", "train", "test", "n_test", "fails"}}, every '
               "factor judged (those the split's rule names)", "text"),
        Column("encoder_nearer_truth", "held-out images whose readout of every rule factor is nearer the "
               "true value than the snap (the nearest value seen in training, other factors fixed)", "int",
               "images", null="the diagnosis did not run"),
        Column("encoder_nearer_snap", "held-out images whose readout of some rule factor is nearer the snap",
               "int", "images", null="the diagnosis did not run"),
        Column("encoder_snap_images", "held-out images of the snap test (its denominator)", "int", "images",
               null="the diagnosis did not run"),
        Column("diagnosis_ratio", "the rule's parameters (disgen's, not M22's)", record=True),
        Column("diagnosis_encoder_margin", record=True),
        Column("diagnosis_decoder_margin", unit="nats", record=True),
    ), ("training_draws", "held_out", "model")),
    "rendering_judge": Metric(score_rendering_judge, (  # M21's evidence: what a model renders (opt-in)
        Column("judge_accuracy_ground_truth", "the judge reading every rule factor right on the held-out "
               "ground truth (below 0.95 it cannot tell the rule factors apart)"),
        Column("judge_accuracy_test", "every rule factor read right on the held-out reconstructions"),
        Column("judge_accuracy_in_distribution", "the same on reconstructions of training combinations "
               "the model never trained on"),
        Column("judge_substitution_share", "held-out reconstructions read as a training combination"),
        Column("judge_images", "held-out reconstructions judged", "int", "images",
               null="the judge did not run"),
        Column("judge_decoder_accuracy_test", "every rule factor read right from the decoder fed the codes "
               "the held-out images should have (M22's decoder side; NaN for the ground-truth decoder)"),
        Column("judge_decoder_accuracy_in_distribution", "the same on in-distribution images"),
        Column("rendering_judge", 'JSON {factor: {"kind", "ground_truth", "test", "in_distribution", '
               '"substitution"}}, every rule factor', "text"),
    ), ("judged",), by_default=False),
}


def metric_columns() -> list[Column]:
    """Every metric's columns, each once, in the table's order."""
    out: dict[str, Column] = {}
    for name, metric in METRICS.items():
        for column in metric.columns:
            if out.setdefault(column.name, column) != column:
                raise ValueError(f"metric {name}: column {column.name} is declared twice, differently")
    return list(out.values())


# The disentanglement scores, in the table's order (the report correlates each with generalisation).
DISENTANGLEMENT_SCORES = [column.name for column in metric_columns() if column.disentanglement]


def nan_results() -> dict[str, float | None]:
    """Every metric's results before any metric runs: NaN (a flag's NaN is stored as null), or None
    for a column of whole numbers or names."""
    return {column.name: float("nan") if column.kind in ("float", "bool") else None
            for metric in METRICS.values() for column in metric.columns if not column.record}


# The evaluation's settings
DCI_ESTIMATORS = ("gbt", "hist_gbt", "none")  # a sweep's choices; evaluate also takes ESTIMATORS
SCORE_SAMPLINGS = ("training", "grid")


def _setting(default, doc: str):
    """A trial setting: a field of the config and a column of the results."""
    return field(default=default, metadata={"doc": doc})


def _option(default, doc: str):
    """One of evaluate's finer options: not a trial setting, no column (a sweep uses the default)."""
    return field(default=default, metadata={"doc": doc, "setting": False})


@dataclass(frozen=True)
class EvaluationConfig:
    """How a trained model is evaluated, and how often its training reports. ``EvaluationConfig()``
    is ``evaluate``'s default; a sweep's trial gives the settings (``parse``). The options after
    the settings are no trial's settings: a sweep leaves them at their defaults."""

    report_every: int = _setting(100, "steps between progress reports")
    n_nll: int = _setting(1000, "images per side for the NLL")
    n_metric: int = _setting(1000, "codes for the disentanglement metrics")
    dci_estimator: str = _setting("gbt", "gbt (standard), hist_gbt (faster) or none (skip every metric "
                                         "but the NLL and the readout)")
    metrics: tuple[str, ...] | None = _setting(None, "the metrics to compute (analysis.metrics.registry."
                                                     "METRICS; default: all but rendering_judge)")
    transfer_factor: str | None = _setting(None, "the OOD1 factor of the transfer scores, a factor name of "
                                                 "the dataset (default: its colour factor, else the factor "
                                                 "with the fewest classes, at least 4)")
    transfer_regressors: tuple[str, ...] = _setting(("gbt",), "the transfer readouts, a list of gbt and/or "
                                                              "mlp (default: [gbt])")
    ood2_a_dataset: str | None = _setting(None, "D21's OOD2-A: a prepared dataset of simulated images the "
                                                "encoder never saw (finger_heldout_colors), on which the "
                                                "transfer readouts are tested (transfer_<readout>_ood2_a)")
    ood2_b_dataset: str | None = _setting(None, "D21's OOD2-B: a prepared dataset of real images "
                                                "(finger_real): sim to real (transfer_<readout>_ood2_b)")
    n_metric_test: int | None = _option(None, "the second draw of training images that DCI, SAP, "
                                              "modularity and the readout test on (None: n_metric // 2)")
    n_grid: int | None = _option(None, "the BetaVAE/FactorVAE pool (0: fresh draws; None: "
                                       "min(10,000, 4·n_metric))")
    score_sampling: str = _option("training", "draw the BetaVAE/FactorVAE images from the training "
                                              "images, or render the full grid (grid)")
    diagnosis_ratio: float = _option(RATIO, "the encoder/decoder rule's ratio")
    diagnosis_encoder_margin: float = _option(ENCODER_MARGIN, "the rule's margin on the encoder's MAE")
    diagnosis_decoder_margin: float = _option(DECODER_MARGIN, "the rule's margin on the decoder's NLL")

    def __post_init__(self):
        for name, least in (("report_every", 1), ("n_nll", 1), ("n_metric", 2)):
            whole_number(getattr(self, name), name, least)
        if self.dci_estimator not in (*DCI_ESTIMATORS, *ESTIMATORS):
            raise ValueError(f"dci_estimator: unknown {self.dci_estimator!r}; choose one of "
                             f"{', '.join(DCI_ESTIMATORS)}")
        if self.metrics is not None:
            metrics = self.metrics
            if not isinstance(metrics, (list, tuple)) or not all(isinstance(m, str) for m in metrics):
                raise ValueError(f"metrics: expected a list of metric names, e.g. [dci, mig]; "
                                 f"got {self.metrics!r}")
            unknown = [m for m in self.metrics if m not in METRICS]
            if unknown:
                raise ValueError(f"metrics: unknown {unknown[0]!r}; choose from {', '.join(METRICS)}")
            object.__setattr__(self, "metrics", tuple(self.metrics))
        if self.transfer_factor is not None and not isinstance(self.transfer_factor, str):
            raise ValueError(f"transfer_factor: expected a factor name; got {self.transfer_factor!r}")
        chosen = self.transfer_regressors
        if not isinstance(chosen, (list, tuple)) or not chosen or not all(isinstance(r, str) for r in chosen):
            raise ValueError(f"transfer_regressors: expected a non-empty list such as [gbt, mlp]; "
                             f"got {chosen!r}")
        unknown = [r for r in chosen if r not in REGRESSORS]
        if unknown:
            raise ValueError(f"transfer_regressors: unknown {unknown[0]!r}; choose from "
                             f"{', '.join(REGRESSORS)}")
        object.__setattr__(self, "transfer_regressors", tuple(dict.fromkeys(chosen)))
        for name in ("ood2_a_dataset", "ood2_b_dataset"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{name}: expected a dataset name such as finger_heldout_colors; "
                                 f"got {value!r}")
        if self.n_metric_test is not None:
            whole_number(self.n_metric_test, "n_metric_test", 1)
        if self.n_grid is not None:
            whole_number(self.n_grid, "n_grid", 0)
        if self.score_sampling not in SCORE_SAMPLINGS:
            raise ValueError(f"score_sampling: unknown {self.score_sampling!r}; choose one of "
                             f"{', '.join(SCORE_SAMPLINGS)}")

    @classmethod
    def parse(cls, settings: dict) -> EvaluationConfig:
        """The evaluation settings of a trial's flat ``settings``; ``report_every``, ``n_nll`` and
        ``n_metric`` must be given. A ValueError names the setting and what to do."""
        for key in ("report_every", "n_nll", "n_metric"):
            if key not in settings:
                raise ValueError(f"{key}: not set; set it under 'fixed' or a scale ({SETTING_DOCS[key]})")
        estimator = settings.get("dci_estimator", "gbt")
        if estimator not in DCI_ESTIMATORS:
            raise ValueError(f"dci_estimator: unknown {estimator!r}; choose one of "
                             f"{', '.join(DCI_ESTIMATORS)}")
        given = {name: settings[name] for name in SETTING_DOCS if name in settings}
        return cls(**{**given, "transfer_factor": _transfer_factor(settings)})

    @property
    def ood2_datasets(self) -> dict[str, str]:
        """{scenario: dataset} of the OOD2 sets the trial names (``ood2_a``, ``ood2_b``)."""
        return {scenario: getattr(self, f"{scenario}_dataset") for scenario in OOD2_SETS
                if getattr(self, f"{scenario}_dataset") is not None}

    @property
    def chosen_metrics(self) -> tuple[str, ...]:
        """The metrics to compute: ``metrics``, or every registered one computed by default where
        it is None."""
        if self.metrics is None:
            return tuple(name for name, metric in METRICS.items() if metric.by_default)
        return self.metrics

    def settings(self) -> dict:
        """The trial settings (the results' columns), with the metrics resolved."""
        return {**{name: getattr(self, name) for name in SETTING_DOCS}, "metrics": self.chosen_metrics}


# the trial settings among the config's fields, with what each is
SETTING_DOCS = {f.name: f.metadata["doc"] for f in fields(EvaluationConfig)
                if f.metadata.get("setting", True)}


def setting_types() -> dict[str, str]:
    """The trial settings' declared types, by name (the results schema's evaluation columns)."""
    return {f.name: f.type for f in fields(EvaluationConfig) if f.name in SETTING_DOCS}


def _transfer_factor(settings: dict) -> str | None:
    """The OOD1 factor's name, checked against the dataset's factor names where disgen knows them."""
    name = settings.get("transfer_factor")
    if name is None or not isinstance(name, str):
        return name
    from data_pipeline.spaces import factor_space

    try:
        names = factor_space(settings.get("dataset", "")).names
    except (KeyError, ValueError):  # a user's labelled dataset: evaluate checks it on load
        return name
    if name not in names:
        raise ValueError(f"transfer_factor: {settings.get('dataset')} has no factor {name!r}; "
                         f"choose one of {', '.join(names)}")
    return name
