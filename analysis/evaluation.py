"""Evaluation of a trained model of any task: reconstruction on train and held-out images,
disentanglement, transfer, and M22's encoder-or-decoder diagnosis.

``evaluate(model, dataset, split, config)`` is the one entry point: it takes a trained VAE, a
ground-truth decoder or a composition network (or the trainer that trained it) and returns one
results row, with the same keys for every task, so a sweep stores every task in the same table.
Which evaluation a model gets is decided once, by its class (``EVALUATIONS``).

**A VAE** (or any model with ``encode`` and ``decode``): the NLLs (under the likelihood the model
was trained with) and the readout accuracy per factor, then each metric of
``analysis.metrics.registry.METRICS`` that ``config.metrics`` names (default: all) on one
:class:`Sample` of codes of training images, drawn and encoded once; the registry's line of each
metric names the columns it writes (NaN where a metric is not configured or not defined). Every
row records the sample sizes it used.

The held-out images (:func:`held_out_sample`) are drawn from the whole held-out part of the factor
grid wherever the dataset can produce any grid point (``dataset.observe``: a generator renders
them, a file that holds the whole grid indexes them), not only from the images the trial's subset
happens to hold; without ``observe`` (a user's labelled data), from the dataset's own held-out
rows. One draw serves ``test_nll`` and the metrics' held-out input alike, for every task (the same
seed, the same images).

**The in-distribution control**, for every task: ``in_distribution_nll`` on at most ``n_nll``
images of *training* combinations the model never trained on (:func:`in_distribution_sample`,
:mod:`data_pipeline.in_distribution`: grid points outside the trial's subset, or the training rows
held back from it where it trains on the whole training part; ``evaluate``'s ``data_seed`` chooses
them, and the training rows every statistic reads exclude them). The rendering judge
(``metrics`` naming ``rendering_judge``; :mod:`analysis.metrics.rendering_judge`) reads the
split's rule factors from every task's reconstructions of held-out and in-distribution images.
docs/analysis.md, "Evaluating a trained model", gives the samples, the likelihoods and the
readout in full.

**The ground-truth decoder and the composition network** (Montero et al. 2021; the scores
themselves are :mod:`analysis.task_nll`'s): ``train_nll`` / ``test_nll`` are the mean Bernoulli
NLL per image (nats) on at most ``n_nll`` training and held-out images, ``n_test_images`` the pool
the held-out sample was drawn from and ``test_nll_images`` how many the test NLL scored; every
disentanglement, transfer and diagnosis metric is NaN (the rendering judge aside): the ground-truth
decoder has no encoder
(its code *is* the factor values), and Montero et al. report only the composition network's NLLs
(score its encoder as a VAE's if needed).

- Ground-truth decoder: the NLL of each image decoded from its factor values; at most ``n_nll``
  training rows, drawn as a VAE's are (same seed, same rows), and the held-out sample. Its
  readout per factor asks whether it learned to *render* each factor on its training images
  (:func:`analysis.task_nll.decoder_readout_scores`, ``readout_estimator``
  "decoder_likelihood"), the evidence the findings' precondition reads, as an encoder's readout
  is for a VAE.
- Composition network: the NLL of the predicted target (posterior means of reference and
  transform, no sampling) on ``n_nll`` triplets per side. Train: triplets among training images,
  drawn as in training (``TripletSampler.sample`` on the training rows). Test: one triplet for
  each image of the held-out sample as the *target* (rendered from the grid where the dataset
  can, so a target need not be one of the dataset's rows); the action is uniform over the
  factors, the reference is the target with that factor's class taken from a random image, and
  the transform a random image with the target's class in that factor. Reference and transform
  are the dataset's rows, training or held-out (extrapolation needs held-out ones: an unseen posX
  can only come from an image that has it); a target for which the dataset's rows hold no such
  reference or transform (a sparse subset of the grid) gets no triplet, and ``test_nll_images``
  counts the targets scored. It has no readout (``readout_estimator`` "none").
"""
from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass

import numpy as np

from analysis.metrics import GridPool, RowSampler, grid_pool
from analysis.metrics._checks import mean_or_nan
from analysis.metrics.factor_readout import READOUT_SCORES, factor_readout_scores
from analysis.metrics.reconstruction_nll import likelihood_of
from analysis.metrics.reconstruction_nll import nll_per_image as numpy_nll
from analysis.metrics.registry import ALWAYS, INPUTS, METRICS, EvaluationConfig, nan_results
from analysis.metrics.rendering_judge import JUDGE_IMAGES, true_codes
from analysis.metrics.transfer_score import transfer_factor_of
from analysis.schema import READOUT_COLUMNS
from analysis.task_nll import (
    composition_nll,
    composition_predictions,
    decoder_readout_scores,
    ground_truth_nll,
    ground_truth_renderings,
)
from data_pipeline.in_distribution import in_distribution_pool, training_rows
from models.composition import CompositionNet, TripletSampler
from models.ground_truth import GroundTruthDecoder
from models.inference import decode_probabilities, encode_means, nll_per_image
from models.inference import reconstruct as _reconstruct

_log = logging.getLogger(__name__)

__all__ = ["EVALUATIONS", "EvaluationConfig", "HeldOut", "METRICS", "Sample", "evaluate", "factor_readout",
           "grid_score_sizes", "held_out_sample", "in_distribution_sample", "model_likelihood", "no_readout",
           "readout_columns",
           "reconstruction_nll_per_image", "sample_without_replacement", "transfer_factor_of"]


def sample_without_replacement(indices: np.ndarray, budget: int, rng: np.random.Generator) -> np.ndarray:
    """At most ``budget`` of ``indices`` without replacement, in order (the training NLL's draw)."""
    if len(indices) <= budget:
        return indices
    return np.sort(rng.choice(indices, size=budget, replace=False))


def _draw(indices: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` rows drawn uniformly with replacement (disentanglement_lib's sampling)."""
    return indices[rng.integers(0, len(indices), n)] if len(indices) else indices


@dataclass(frozen=True)
class HeldOut:
    """The held-out images of one evaluation, in a random order (:func:`held_out_sample`): every
    consumer reads a prefix of them, ``test_nll`` the first ``n_nll`` and the metrics the first
    ``n_metric``, so the smaller sample is part of the larger. ``classes`` (n, F) are the drawn
    combinations, ``images`` (n, C, H, W) uint8 their images, produced once; ``pool`` the number of
    held-out combinations (or rows) they were drawn from. Indexing (``held_out[positions]``) gives
    images, like a dataset's ``images``."""

    classes: np.ndarray
    images: np.ndarray
    pool: int
    source: str = ""  # the in-distribution sample's: "grid" or "rows" (data_pipeline.in_distribution)

    def __len__(self) -> int:
        return len(self.classes)

    def __getitem__(self, positions) -> np.ndarray:
        return self.images[positions]


def held_out_sample(dataset, split, test: np.ndarray, budget: int, seed: int, *, n_nll: int) -> HeldOut:
    """At most ``budget`` held-out images of ``split``, without replacement, in a random order
    seeded by ``seed`` alone (a stream of its own, so every task's evaluation of a seed draws the
    same ones): from every combination of the whole factor grid the split's test set takes
    (modifiers included; :meth:`~data_pipeline.splits.rules.Split.test_grid_indices`), rendered or
    indexed by ``dataset.observe``, where the dataset can produce any grid point; else from the
    dataset's held-out rows ``test``. Logs a warning where fewer than ``n_nll`` are available."""
    space, observe = dataset.factor_space, dataset.observe
    if observe is not None:
        pool, what = split.test_grid_indices(space), "held-out combinations of the factor grid"
    else:
        pool, what = np.asarray(test, dtype=np.int64), "held-out images in the dataset"
    # a permutation's prefix: the same images for the NLL whatever n_metric is, and the reverse
    drawn = pool[np.random.default_rng([seed, 4]).permutation(len(pool))[:budget]]
    if len(pool) < n_nll:
        _log.warning("split %s on %s has %d %s, fewer than n_nll = %d: test_nll uses all %d",
                     split.name, dataset.name, len(pool), what, n_nll, len(pool))
    if observe is not None:
        classes = space.classes_of(drawn)
        return HeldOut(classes, observe(classes), len(pool))
    return HeldOut(dataset.classes[drawn], dataset.images[drawn], len(pool))


IN_DISTRIBUTION_SOURCES = {"grid": "grid points outside the subset", "rows": "held back from training"}


def in_distribution_sample(dataset, split, data_seed: int, budget: int, seed: int) -> HeldOut:
    """At most ``budget`` images of *training* combinations of ``split`` that the trial on
    ``dataset`` never trained on (:func:`data_pipeline.in_distribution.in_distribution_pool`:
    grid points outside its subset, rendered or indexed by ``dataset.observe``, or its held-back
    training rows), without replacement, in a random order seeded by ``seed`` alone (a stream of
    its own: no other draw moves). ``pool``: how many there were to draw from."""
    source, pool = in_distribution_pool(dataset, split, data_seed)
    drawn = pool[np.random.default_rng([seed, 5]).permutation(len(pool))[:budget]]
    if source == "grid":
        classes = dataset.factor_space.classes_of(drawn)
        return HeldOut(classes, dataset.observe(classes), len(pool), source)
    return HeldOut(dataset.classes[drawn], dataset.images[drawn], len(pool), source)


def _in_distribution_row(sample: HeldOut, nll: np.ndarray) -> dict:
    return {"in_distribution_nll": mean_or_nan(nll), "in_distribution_nll_images": int(len(nll)),
            "in_distribution_source": IN_DISTRIBUTION_SOURCES[sample.source]}


def _judged(held_out: HeldOut, in_distribution: HeldOut, render, decode_true=None) -> dict:
    """The rendering judge's input (:func:`analysis.metrics.rendering_judge.rendering_judge`):
    the first :data:`JUDGE_IMAGES` held-out and in-distribution images, by ``render(sample,
    positions) -> (positions kept, reconstructions)``, and where given, ``decode_true(classes)``:
    the model's decoder fed the codes those images should have (M22's decoder side)."""
    test, test_images = render(held_out, np.arange(min(JUDGE_IMAGES, len(held_out))))
    kept, in_images = render(in_distribution, np.arange(min(JUDGE_IMAGES, len(in_distribution))))
    judged = {"test_classes": held_out.classes[test], "test_truth": held_out[test],
              "test_reconstructions": test_images,
              "in_classes": in_distribution.classes[kept], "in_reconstructions": in_images}
    if decode_true is not None:
        judged.update(decoded_test=decode_true(judged["test_classes"]),
                      decoded_in=decode_true(judged["in_classes"]))
    return judged


def _true_code_decoder(model, space, train_classes: np.ndarray, train_codes: np.ndarray):
    """``classes -> pixel probabilities`` of ``model``'s decoder fed the codes images of those
    classes should have (:func:`analysis.metrics.rendering_judge.true_codes`, fitted on training
    images' codes); None with fewer than 2 training codes."""
    if len(train_codes) < 2:
        return None

    def decode(classes: np.ndarray) -> np.ndarray:
        if not len(classes):
            return np.zeros((0, 1, 1, 1), np.float32)
        return decode_probabilities(model, true_codes(space, train_classes, train_codes, classes))

    return decode


def _judge(config: EvaluationConfig, dataset, split, seed: int, data_seed: int, render,
           decode_true=None) -> dict:
    """The rendering judge's columns for a task without a :class:`Sample` (the ground-truth
    decoder, the composition network), where ``config.metrics`` names it: on the first
    :data:`JUDGE_IMAGES` of the held-out and in-distribution samples (drawn as the NLLs' are, so
    the NLLs' images are among them)."""
    if "rendering_judge" not in config.chosen_metrics:
        return {}
    budget = max(config.n_nll, JUDGE_IMAGES)
    test = split.train_test_indices(dataset.classes, dataset.factor_space)[1]
    held_out = held_out_sample(dataset, split, test, budget, seed, n_nll=0)
    in_distribution = in_distribution_sample(dataset, split, data_seed, budget, seed)
    view = _TaskSample(dataset, split, dataset.factor_space,
                       _judged(held_out, in_distribution, render, decode_true() if decode_true else None)
                       if dataset.observe is not None else None)
    return METRICS["rendering_judge"].compute(view)


@dataclass(frozen=True)
class _TaskSample:
    """What the rendering judge reads of a task's evaluation (a :class:`Sample`'s ``judged`` part)."""

    dataset: object
    split: object
    space: object
    judged: dict | None


def grid_score_sizes(n_metric: int, n_grid: int | None = None) -> dict[str, int]:
    """The sample sizes of the BetaVAE and FactorVAE scores under evaluate's budget ``n_metric``:
    disentanglement_lib's study's (batch 64, 10,000 / 5,000 points, 10,000 for the variances) as
    upper limits; ``n_grid`` is the pool (0: fresh draws; None: ``min(10_000, 4 * n_metric)``)."""
    return {"n_grid": min(10_000, 4 * n_metric) if n_grid is None else n_grid, "batch_size": 64,
            "n_train": max(2, min(10_000, n_metric)), "n_eval": max(1, min(5_000, n_metric // 2)),
            "n_variance": max(2, min(10_000, n_metric))}


def model_likelihood(model) -> str:
    """The likelihood a model is scored with: the one it was trained with (see the module docstring)."""
    config = getattr(model, "config", None)
    return likelihood_of(getattr(config, "resolved_likelihood", "bernoulli") or "bernoulli")


def reconstruction_nll_per_image(model, images: np.ndarray, rows: np.ndarray, likelihood: str) -> np.ndarray:
    """NLL per image of the rows' reconstructions (from the posterior means) under ``likelihood``:
    the exact Bernoulli NLL from the logits, or the Gaussian one from the decoded pixel values."""
    if likelihood == "bernoulli":
        return nll_per_image(model, images, rows)
    out = []
    for part in np.array_split(rows, max(1, -(-len(rows) // 512))) if len(rows) else []:
        x = images[part]
        out.append(numpy_nll(x, _reconstruct(model, x), likelihood=likelihood))
    return np.concatenate(out) if out else np.zeros(0)


def _reads_held_out(config: EvaluationConfig) -> bool:
    """Whether a metric ``config`` runs reads the held-out images (their ``held_out`` input)."""
    return config.dci_estimator != "none" and any("held_out" in METRICS[name].inputs
                                                  for name in config.chosen_metrics)


def evaluate(model, dataset, split, config: EvaluationConfig | None = None, *, seed: int = 0,
             n_jobs: int | None = 1, data_seed: int = 0, ood2_sets: dict | None = None) -> dict[str, float]:
    """The results row of a trained ``model`` of any task on ``dataset`` under the held-out
    ``split`` it was trained under, as ``config`` says (default ``EvaluationConfig()``; see the
    module docstring). ``model``: the model, or the trainer that trained it (its ``.model``, as
    every trainer of ``models.build_trainer`` has). ``seed`` seeds every draw and fit (a sweep
    gives the model's seed); ``n_jobs`` is the number of processes fitting the DCI estimators
    (None: every core); ``data_seed`` is the trial's, which chooses the training rows held back as
    the in-distribution control where the trial trains on the whole training part
    (:func:`data_pipeline.in_distribution.training_rows`: give the seed the model trained with).
    ``ood2_sets`` {scenario: dataset}: the datasets ``config``'s ``ood2_a_dataset`` and
    ``ood2_b_dataset`` name (D21's OOD2-A and OOD2-B), each a ``GroundTruthDataset``; a set the
    config names and that is not given is an error (a VAE's transfer scores read them)."""
    model = getattr(model, "model", model)
    config = EvaluationConfig() if config is None else config
    ood2_sets = dict(ood2_sets or {})
    wanted = config.ood2_datasets
    if set(ood2_sets) != set(wanted):
        raise ValueError(f"ood2_sets: the config names {wanted or 'none'}; given "
                         f"{sorted(ood2_sets) or 'none'}")
    evaluation = next(EVALUATIONS[kind] for kind in type(model).__mro__ if kind in EVALUATIONS)
    if evaluation is _evaluate_vae:
        return evaluation(model, dataset, split, config, seed, n_jobs, data_seed, ood2_sets)
    return evaluation(model, dataset, split, config, seed, n_jobs, data_seed)


def _evaluate_vae(model, dataset, split, config: EvaluationConfig, seed: int, n_jobs: int | None,
                  data_seed: int = 0, ood2_sets: dict | None = None) -> dict:
    """A VAE's row, or any model's with ``encode`` and ``decode``: the NLLs, the readout, and
    every configured metric on one :class:`Sample`."""
    chosen = config.chosen_metrics
    for name in chosen:
        if METRICS[name].check is not None:
            METRICS[name].check(config, dataset, split)
    train, held_back, test = training_rows(dataset, split, data_seed)
    rng = np.random.default_rng(seed)
    likelihood = model_likelihood(model)
    judging = JUDGE_IMAGES if "rendering_judge" in chosen and config.dci_estimator != "none" else 0
    in_distribution = in_distribution_sample(dataset, split, data_seed, max(config.n_nll, judging), seed)
    wanted = max(config.n_nll, config.n_metric if _reads_held_out(config) else 0, judging)
    held_out = held_out_sample(dataset, split, test, wanted, seed, n_nll=config.n_nll)
    tested = np.arange(min(config.n_nll, len(held_out)))
    out: dict[str, float] = {
        "n_train_images": int(len(train)),
        "n_test_images": held_out.pool,
        "test_nll_images": int(len(tested)),
        "nll_likelihood": likelihood,
        "train_nll": mean_or_nan(reconstruction_nll_per_image(
            model, dataset.images, sample_without_replacement(train, config.n_nll, rng), likelihood)),
        "test_nll": mean_or_nan(reconstruction_nll_per_image(model, held_out, tested, likelihood)),
        **_in_distribution_row(in_distribution, reconstruction_nll_per_image(
            model, in_distribution, np.arange(min(config.n_nll, len(in_distribution))), likelihood)),
        **nan_results(),
    }
    sample = Sample(model, dataset, split, config, seed, n_jobs, train, held_out, likelihood,
                    in_distribution=in_distribution, held_back=held_back, ood2_sets=ood2_sets)
    if config.dci_estimator != "none":
        out.update(metric_n_train=int(len(sample.rows)), metric_n_test=int(len(sample.rows_check)))
        for name in chosen:
            metric = METRICS[name]
            result = metric.compute(_Inputs(sample, name, metric.inputs))
            undeclared = set(result) - {c.name for c in metric.columns} - set(metric.fills)
            if undeclared:
                raise ValueError(f"metric {name} returned {sorted(undeclared)}, which are not its columns; "
                                 "declare them in its line of analysis.metrics.registry.METRICS")
            out.update(result)
    out.update(factor_readout(sample.space, dataset.classes[train], sample.rows, sample.rows_check,
                              sample.codes, sample.factors, sample.codes_check, sample.factors_check,
                              random_state=seed))
    return out


def _task_row(dataset, split, config: EvaluationConfig, seed: int, data_seed: int) -> tuple:
    """What the ground-truth decoder's and the composition network's rows start from: (training
    rows, held-out rows, the NLL draws' generator, the :class:`HeldOut` sample, the
    in-distribution sample, the row's sizes). Both tasks train with the Bernoulli likelihood, and
    are scored with it."""
    train, _, test = training_rows(dataset, split, data_seed)
    rng = np.random.default_rng(seed)
    held_out = held_out_sample(dataset, split, test, config.n_nll, seed, n_nll=config.n_nll)
    in_distribution = in_distribution_sample(dataset, split, data_seed, config.n_nll, seed)
    row = {"n_train_images": int(len(train)), "n_test_images": held_out.pool, "nll_likelihood": "bernoulli"}
    return train, test, rng, held_out, in_distribution, row


# training images the ground-truth decoder's readout decodes each factor's values for
DECODER_READOUT_IMAGES = 200


def _evaluate_ground_truth_decoder(decoder: GroundTruthDecoder, dataset, split, config: EvaluationConfig,
                                   seed: int, n_jobs: int | None, data_seed: int = 0) -> dict:
    """The ground-truth decoder's row: its NLLs, NaN metrics (but the rendering judge where asked
    for: its reconstruction is its rendering of the true factor values), and its likelihood
    readout."""
    space = dataset.factor_space
    train, _, rng, held_out, in_distribution, out = _task_row(dataset, split, config, seed, data_seed)
    values = space.raw_values(dataset.classes)
    train_rows = sample_without_replacement(train, config.n_nll, rng)
    out["train_nll"] = mean_or_nan(ground_truth_nll(decoder, dataset.images, values, train_rows))
    out["test_nll"] = mean_or_nan(ground_truth_nll(decoder, held_out, space.raw_values(held_out.classes),
                                                   np.arange(len(held_out))))
    out["test_nll_images"] = len(held_out)
    in_values = space.raw_values(in_distribution.classes)
    out.update(_in_distribution_row(in_distribution, ground_truth_nll(
        decoder, in_distribution, in_values, np.arange(len(in_distribution)))))
    out.update(nan_results())

    def render(sample: HeldOut, positions: np.ndarray):
        return positions, ground_truth_renderings(decoder, space.raw_values(sample.classes[positions]))

    out.update(_judge(config, dataset, split, seed, data_seed, render))
    rows = sample_without_replacement(train, DECODER_READOUT_IMAGES, np.random.default_rng([seed, 3]))
    out.update(readout_columns(decoder_readout_scores(decoder, dataset, train, rows), "decoder_likelihood",
                               0, len(rows)))
    return out


def _evaluate_composition(net: CompositionNet, dataset, split, config: EvaluationConfig, seed: int,
                          n_jobs: int | None, data_seed: int = 0) -> dict:
    """The composition network's row: its NLLs on training and held-out triplets (and on
    in-distribution triplets, composed as the held-out ones are, from a stream of their own), NaN
    metrics but the rendering judge where asked for (its reconstruction of an image is its
    prediction of it as a target), no readout."""
    train, test, rng, held_out, in_distribution, out = _task_row(dataset, split, config, seed, data_seed)
    train_triplets = TripletSampler(dataset.classes, train).sample(rng, config.n_nll)
    everything = np.union1d(train, test)
    *sources, target, action = TripletSampler(dataset.classes, everything).sample_onto_classes(
        held_out.classes, rng)
    if len(target) == 0:
        _log.info("test_nll is NaN: no held-out image of split %s could be composed from the dataset's "
                  "images (the composition task needs a full factor grid)", split.name)
    out["train_nll"] = mean_or_nan(composition_nll(net, dataset.images, *train_triplets))
    out["test_nll"] = mean_or_nan(composition_nll(net, dataset.images, *sources, target, action,
                                                  targets=held_out))
    out["test_nll_images"] = int(len(target))
    sampler = TripletSampler(dataset.classes, everything)
    *in_sources, in_target, in_action = sampler.sample_onto_classes(in_distribution.classes,
                                                                    np.random.default_rng([seed, 6]))
    out.update(_in_distribution_row(in_distribution, composition_nll(
        net, dataset.images, *in_sources, in_target, in_action, targets=in_distribution)))
    out.update(nan_results())

    def render(sample: HeldOut, positions: np.ndarray):
        *parts, target, action = sampler.sample_onto_classes(sample.classes[positions],
                                                             np.random.default_rng([seed, 7]))
        return positions[target], composition_predictions(net, dataset.images, *parts, action)

    def decode_true():  # M22's decoder side: the net's decoder fed the codes images should have
        rows = sample_without_replacement(train, config.n_metric, np.random.default_rng([seed, 8]))
        return _true_code_decoder(net, dataset.factor_space, dataset.classes[rows],
                                  encode_means(net, dataset.images, rows))

    out.update(_judge(config, dataset, split, seed, data_seed, render, decode_true))
    out.update(no_readout(dataset.factor_space))
    # Its codes as M22's analysis reads them: the encoder and decoder as an autoencoder, scored as a
    # VAE (the disentanglement metrics, the factor readout, the encoder-versus-decoder diagnosis and
    # its snap counts); the task's own NLLs and rendering judge above stay the row's.
    codes = _evaluate_vae(net.autoencoder(), dataset, split, dataclasses.replace(
        config, metrics=tuple(m for m in config.chosen_metrics if m != "rendering_judge")), seed, n_jobs,
        data_seed)
    # (only the columns every task's row has: the rows of a results table share their keys)
    out.update({k: v for k, v in codes.items() if k in out and k not in _COMPOSITION_OWN
                and not k.startswith("judge_") and k != "rendering_judge"})
    return out


# The composition network's row keeps these from its own task, not from its autoencoder's scoring
_COMPOSITION_OWN = {"n_train_images", "n_test_images", "nll_likelihood", "train_nll", "test_nll",
                    "test_nll_images", "in_distribution_nll", "in_distribution_nll_images",
                    "in_distribution_source"}


# Each model's evaluation, by its class (a subclass takes its nearest ancestor's); every other model
# is read through its encoder, as a VAE.
EVALUATIONS = {GroundTruthDecoder: _evaluate_ground_truth_decoder, CompositionNet: _evaluate_composition,
               object: _evaluate_vae}


class Sample:
    """What the metrics of one evaluation read, each part drawn and encoded once, when first asked
    (``analysis.metrics.registry.INPUTS`` names the parts and what each is): ``n_metric`` training
    draws and ``n_metric_test`` (default ``n_metric // 2``) independent check draws, uniform with
    replacement (disentanglement_lib's two batches); the first ``n_metric`` images of the
    evaluation's :class:`HeldOut` sample (the one ``test_nll`` reads; rendered from the whole grid
    where the dataset can), their images, codes and factor classes; the BetaVAE/FactorVAE
    ``score_pool`` (source None where fewer than 2 training images); the model's ``encode(rows)``
    and ``decode(codes)`` (float64 pixel probabilities). ``factor_ranges`` is each factor's class
    range."""

    def __init__(self, model, dataset, split, config, seed, n_jobs, train, held_out: HeldOut, likelihood,
                 in_distribution: HeldOut | None = None, held_back: np.ndarray | None = None,
                 ood2_sets: dict | None = None):
        self.in_distribution = in_distribution
        self._ood2_sets = dict(ood2_sets or {})
        self.held_back = np.zeros(0, np.int64) if held_back is None else held_back
        self.model, self.dataset, self.split, self.config = model, dataset, split, config
        self.seed, self.n_jobs, self.train, self._held_out = seed, n_jobs, train, held_out
        self.likelihood, self.space = likelihood, dataset.factor_space
        sizes = np.asarray(self.space.sizes)
        self.factor_ranges = np.stack([np.zeros(self.space.n_factors), sizes - 1.0], axis=1)
        self._parts: dict = {}

    def encode(self, rows: np.ndarray) -> np.ndarray:
        return encode_means(self.model, self.dataset.images, rows)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        return decode_probabilities(self.model, codes).astype(np.float64)

    def _part(self, name: str):
        if name not in self._parts:
            self._parts[name] = getattr(self, f"_draw_{name}")()
        return self._parts[name]

    def _draw_training(self):
        # two independent draws from the training images, as disentanglement_lib draws its train
        # and test batches (a stream of their own, so the NLL sample does not move with n_metric)
        draws = np.random.default_rng([self.seed, 2])
        n_metric, n_check = self.config.n_metric, self.config.n_metric_test
        n_check = max(2, n_metric // 2) if n_check is None else n_check
        rows, rows_check = _draw(self.train, n_metric, draws), _draw(self.train, n_check, draws)
        return rows, rows_check

    def _draw_codes(self):
        rows = self._part("training")[0]
        return self.encode(rows), self.dataset.classes[rows]

    def _draw_check(self):
        rows = self._part("training")[1]
        return self.encode(rows), self.dataset.classes[rows]

    def _draw_held_out(self):
        positions = np.arange(min(self.config.n_metric, len(self._held_out)))
        images = self._held_out[positions]
        codes = encode_means(self.model, images, np.arange(len(images)))
        return images, codes, self._held_out.classes[positions]

    def _draw_ood2_sets(self):
        # up to n_metric images of each OOD2 set, drawn without replacement on a stream of their own
        out = {}
        for k, (name, data) in enumerate(sorted(self._ood2_sets.items())):
            rows = np.sort(sample_without_replacement(np.arange(len(data)), self.config.n_metric,
                                                      np.random.default_rng([self.seed, 3, k])))
            out[name] = (encode_means(self.model, data.images, rows), data.classes[rows], data.factor_space)
        return out

    ood2_sets = property(lambda self: self._part("ood2_sets"))
    rows = property(lambda self: self._part("training")[0])
    rows_check = property(lambda self: self._part("training")[1])
    codes = property(lambda self: self._part("codes")[0])
    factors = property(lambda self: self._part("codes")[1])
    codes_check = property(lambda self: self._part("check")[0])
    factors_check = property(lambda self: self._part("check")[1])
    held_out_images = property(lambda self: self._part("held_out")[0])
    held_out_codes = property(lambda self: self._part("held_out")[1])
    held_out_factors = property(lambda self: self._part("held_out")[2])
    score_pool = property(lambda self: self._part("score_pool"))
    judged = property(lambda self: self._part("judged"))

    def _draw_judged(self):
        """The rendering judge's input: the first held-out and in-distribution images and their
        reconstructions from the posterior means (None where the dataset has no ``observe``)."""
        if self.dataset.observe is None:
            return None
        empty = HeldOut(np.zeros((0, self.space.n_factors), np.int64), self._held_out.images[:0], 0)
        in_distribution = self.in_distribution if self.in_distribution is not None else empty

        def render(sample: HeldOut, positions: np.ndarray):
            images = sample[positions]
            return positions, _reconstruct(self.model, images) if len(images) else images.astype(np.float32)

        unique = np.unique(self.rows)  # M22's decoder side, from the training draws' codes
        decode_true = _true_code_decoder(self.model, self.space, self.dataset.classes[unique],
                                         self.encode(unique))
        return _judged(self._held_out, in_distribution, render, decode_true)

    def _draw_score_pool(self):
        """The BetaVAE/FactorVAE scores' source, their factor sizes (None for a pool) and record."""
        # the split's whole training part: the rows held back from training too (the scores are no
        # generalisation test, and ask for a full grid where the split leaves one)
        config, dataset, space = self.config, self.dataset, self.space
        train = np.union1d(self.train, self.held_back) if len(self.held_back) else self.train
        sizes = grid_score_sizes(config.n_metric, config.n_grid)
        record = {"score_batch_size": sizes["batch_size"], "score_n_train": sizes["n_train"],
                  "score_n_eval": sizes["n_eval"], "score_n_variance": sizes["n_variance"],
                  "score_pool_size": sizes["n_grid"]}
        pool_seed = [self.seed, 1]  # a stream of its own for the pool, apart from the scores'
        if config.score_sampling == "grid":
            if dataset.observe is None:
                raise ValueError(f"score_sampling: 'grid' renders grid points with dataset.observe, which "
                                 f"{dataset.name} lacks; use 'training'")

            def represent(classes):
                images = dataset.observe(classes)
                return encode_means(self.model, images, np.arange(len(images)))

            if sizes["n_grid"]:
                source = grid_pool(represent, space.sizes, sizes["n_grid"], random_state=pool_seed)
            else:
                source = represent
            record["score_sample"] = "full grid (rendered), held-out combinations included"
        else:
            if len(train) < 2:
                return None, None, {**record, "score_sample": "training images: fewer than 2"}
            full = len(np.unique(dataset.classes[train], axis=0)) == int(np.prod(space.sizes, dtype=np.int64))
            record["score_sample"] = ("training images (a full factorial grid)" if full else
                                      "training images (not a full factorial grid: ill-defined, "
                                      "Dittadi et al. 2021)")
            if sizes["n_grid"]:
                pool_rows = _draw(train, sizes["n_grid"], np.random.default_rng(pool_seed))
                source = GridPool(dataset.classes[pool_rows], self.encode(pool_rows), space.sizes)
            else:
                source = RowSampler(dataset.classes[train], lambda r: self.encode(train[r]), space.sizes)
        return source, None if isinstance(source, GridPool) else space.sizes, record


class _Inputs:
    """A metric's view of the :class:`Sample`: the parts of the inputs it declares, and what is
    always there; reading another part is an error that says where to declare it."""

    def __init__(self, sample: Sample, name: str, inputs: tuple[str, ...]):
        self._sample, self._name = sample, name
        self._allowed = {*ALWAYS, *(part for i in inputs for part in INPUTS[i])}

    def __getattr__(self, attribute: str):
        if attribute not in self._allowed:
            needs = [i for i, parts in INPUTS.items() if attribute in parts]
            hint = f"add {needs[0]!r} to its inputs" if needs else f"a sample has no {attribute!r}"
            raise AttributeError(f"metric {self._name} reads {attribute!r}: {hint} "
                                 "(analysis.metrics.registry.METRICS)")
        return getattr(self._sample, attribute)


def no_readout(space) -> dict:
    """The readout keys of a model whose codes are not read (the composition network): NaN scores
    and chances, no samples, estimator "none"."""
    nothing = {name: {"kind": kind, "score": float("nan"), "chance": float("nan")}
               for name, kind in zip(space.names, space.kinds)}
    return readout_columns(nothing, "none", 0, 0)


def readout_columns(scores: dict[str, dict], estimator: str, n_train: int, n_test: int) -> dict:
    """A row's readout keys from per-factor ``{"kind", "score", "chance"}``: ``accuracy_<factor>``
    and ``chance_<factor>`` for a categorical factor, ``r2_<factor>`` for the others (the factors
    of :data:`analysis.schema.READOUT_COLUMNS`), ``factor_readout`` (JSON, every factor, null for
    NaN), ``readout_estimator``, ``readout_n_train`` and ``readout_n_test``."""
    out: dict = {"readout_estimator": estimator, "readout_n_train": int(n_train),
                 "readout_n_test": int(n_test)}
    for name, entry in scores.items():
        column = f"{READOUT_SCORES[entry['kind']]}_{name}"
        if column in READOUT_COLUMNS:
            out[column] = float(entry["score"])
            if entry["kind"] == "categorical":
                out[f"chance_{name}"] = float(entry["chance"])
    finite = lambda value: None if np.isnan(value) else float(value)  # noqa: E731
    out["factor_readout"] = json.dumps({name: {"kind": e["kind"], "score": finite(e["score"]),
                                               "chance": finite(e["chance"])} for name, e in scores.items()})
    return out


def factor_readout(space, training_classes: np.ndarray, rows: np.ndarray, rows_test: np.ndarray, codes,
                   classes, codes_test, classes_test, *, random_state: int = 0) -> dict:
    """The readout per factor on held-in training images (:func:`readout_columns`' keys): a forest
    per factor fitted on ``rows``/``codes``/``classes`` and scored, in the score of the factor's
    kind, on the test draws whose images are not among them
    (:mod:`analysis.metrics.factor_readout`). ``training_classes`` (all the training images')
    give chance."""
    scored = ~np.isin(rows_test, rows)
    scores = factor_readout_scores(space, codes, classes, np.asarray(codes_test)[scored],
                                   np.asarray(classes_test)[scored], training_classes,
                                   random_state=random_state)
    return readout_columns(scores, "random_forest", len(rows), int(scored.sum()))
