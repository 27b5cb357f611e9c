"""Evaluation of a trained model: reconstruction on train and held-out images, disentanglement,
transfer, and M22's encoder-or-decoder diagnosis.

Metrics and what they write (all floats; NaN where a metric is not configured or not defined):

``"dci"``            dci_disentanglement, dci_completeness, dci_informativeness (``dci_estimator``)
``"d_score"``        d_score (Montero et al. 2021's Lasso D-score)
``"mig"``            mig
``"sap"``            sap (discrete factors, LinearSVC)
``"modularity_explicitness"``  modularity, explicitness
``"beta_vae"``       beta_vae_score   (eval accuracy; see below)
``"factor_vae"``     factor_vae_score
``"transfer"``       transfer_<regressor>_ood1_a/b/c and _ood2 for each of ``transfer_regressors``,
                     and transfer_factor (the OOD1 factor's name)
``"encoder_decoder"``  encoder_error_train/test, decoder_nll_train/test, encoder_fails,
                     decoder_fails and the rule's parameters diagnosis_ratio,
                     diagnosis_encoder_margin, diagnosis_decoder_margin

``train_nll``, ``test_nll``, ``nll_likelihood``, ``n_train_images``, ``n_test_images`` and the
readout accuracy per factor (below) are always computed, and every row records the sample sizes it
used (``metric_n_train``, ``metric_n_test``, ``score_batch_size``, ``score_n_train``,
``score_n_eval``, ``score_n_variance``, ``score_pool_size``, ``score_sample``).

**Likelihood.** Each model is scored with the likelihood it was trained with (its config's
``resolved_likelihood``): Bernoulli for "bernoulli", the Gaussian of variance ½ for "mse" (whose NLL
is the squared error plus a constant; see ``analysis.metrics.reconstruction_nll``). The row names
it in ``nll_likelihood``; NLLs under different likelihoods are not comparable.

**Samples of the disentanglement metrics** (disentanglement_lib's study's, on the training images
only, as M21's appendix A computes the D-score "given the latent representations of the training
images"): DCI, SAP and modularity/explicitness fit on ``n_metric`` training images and test on
``n_metric_test`` (default ``n_metric // 2``), the two drawn independently, uniformly with
replacement, as disentanglement_lib's ``generate_batch_factor_code`` draws two batches (10,000 and
5,000 in its study); MIG and the D-score use the ``n_metric`` sample, the D-score with its own
5-fold split.

**Readout accuracy per factor** (``accuracy_<factor>``, ``chance_<factor>``, ``readout_estimator``,
``readout_n_train``, ``readout_n_test``, ``factor_readout``): how well each factor can be read from
the codes of held-in training images, the evidence ``analysis.findings`` needs before a held-out
split counts (a model that cannot tell a square from an ellipse on training images cannot fail to
generalise a square). One classifier per factor, codes → class, fitted on the ``n_metric``
training draws above and scored on the ``n_metric_test`` draws, counting only draws of images that
are not among the fitted ones (``readout_n_test`` of them), so the accuracy is never a training
accuracy. Where DCI runs with a classifier (``dci_estimator`` "gbt" or "hist_gbt") its fits are
the readout (``readout_estimator`` "dci_gbt"/"dci_hist_gbt"; no second fit); otherwise a random
forest of 20 trees per factor ("random_forest", ``analysis.metrics.factor_readout``), also when
``dci_estimator`` is None. Chance is 1 / the number of values the factor takes on the split's
training images; a factor with one value there has nothing to read (accuracy NaN).

**BetaVAE and FactorVAE scores** need pairs or batches of images that share one factor's value.
disentanglement_lib samples them fresh from the whole dataset; here they are drawn from the
model's training images: a first image uniformly, its partners uniformly among the training images
that share the fixed factor's value (``analysis.metrics._grid.RowSampler``). Where the training
images are not a full factorial grid (a held-out split, a random subset), Dittadi et al. 2021 call
the scores ill-defined; ``score_sample`` says which case a row is. Batch 64; ``min(10_000,
n_metric)`` training points or votes, ``min(5_000, n_metric // 2)`` evaluation ones, and
``min(10_000, n_metric)`` images for the FactorVAE variances. To bound the cost (a fresh draw
encodes 64 × 2 images per BetaVAE point), the images are by default drawn from a pool of
``score_pool`` = ``min(10_000, 4 * n_metric)`` training images encoded once: each pair and batch
then has the distribution above, but they are not independent of each other. ``score_pool=0``
encodes every draw afresh, as disentanglement_lib does. ``score_sampling="grid"`` instead samples
the full factor grid through ``dataset.observe`` (held-out combinations included), the previous
behaviour.
"""

from __future__ import annotations

import json
import logging

import numpy as np

from analysis.metrics._grid import GridPool, RowSampler, grid_pool
from analysis.metrics.beta_vae_score import sampled_beta_vae_score
from analysis.metrics.dci import dci
from analysis.metrics.encoder_decoder_diagnosis import (
    DECODER_MARGIN,
    ENCODER_MARGIN,
    RATIO,
    encoder_decoder_diagnosis,
)
from analysis.metrics.factor_readout import forest_predictions, readout_accuracy
from analysis.metrics.factor_vae_score import sampled_factor_vae_score
from analysis.metrics.mig import mig
from analysis.metrics.modularity_explicitness import modularity_explicitness
from analysis.metrics.reconstruction_nll import likelihood_of
from analysis.metrics.reconstruction_nll import nll_per_image as numpy_nll
from analysis.metrics.sap import sap
from analysis.metrics.transfer_score import transfer_score
from analysis.schema import READOUT_FACTORS
from models.evaluation import decode_probabilities, encode_means, nll_per_image
from models.evaluation import reconstruct as _reconstruct

_log = logging.getLogger(__name__)

METRICS = ("dci", "d_score", "mig", "sap", "modularity_explicitness", "beta_vae", "factor_vae",
           "transfer", "encoder_decoder")
# What a sweep computes unless told otherwise: everything, with the GBT transfer readout only
# (the [256, 256] MLP costs seconds per factor and scenario; ask for it with
# transfer_regressors=("gbt", "mlp"); the dittadi2021 preset does).
DEFAULT_METRICS = METRICS
# The OOD1 factor by default: a colour factor where the dataset has one (D21 varies colour), in
# this order of preference; otherwise the factor with the fewest classes, at least 4.
COLOUR_FACTORS = ("object_hue", "object_color", "hue", "color", "colour")
SCORE_SAMPLINGS = ("training", "grid")

_KEYS = {
    "dci": ["dci_disentanglement", "dci_completeness", "dci_informativeness"],
    "d_score": ["d_score"],
    "mig": ["mig"],
    "sap": ["sap"],
    "modularity_explicitness": ["modularity", "explicitness"],
    "beta_vae": ["beta_vae_score"],
    "factor_vae": ["factor_vae_score"],
    "transfer": [f"transfer_{r}_{s}" for r in ("gbt", "mlp") for s in ("ood1_a", "ood1_b", "ood1_c", "ood2")],
    "encoder_decoder": ["encoder_error_train", "encoder_error_test", "decoder_nll_train", "decoder_nll_test",
                        "encoder_fails", "decoder_fails"],
}


def _sample(indices: np.ndarray, budget: int, rng: np.random.Generator) -> np.ndarray:
    if len(indices) <= budget:
        return indices
    return np.sort(rng.choice(indices, size=budget, replace=False))


def _draw(indices: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` rows drawn uniformly with replacement (disentanglement_lib's sampling)."""
    return indices[rng.integers(0, len(indices), n)] if len(indices) else indices


def transfer_factor_of(factor_space, split=None) -> int:
    """The default OOD factor for OOD1: a colour factor (:data:`COLOUR_FACTORS`, D21 varies
    colour) with at least 4 classes that the split does not hold out; otherwise the factor with
    the fewest classes, at least 4, that the split does not hold out (on dSprites, scale)."""
    held = set(getattr(split, "test_when", {}) or {})
    for name in COLOUR_FACTORS:
        if name in factor_space.names and name not in held and \
                factor_space.sizes[factor_space.names.index(name)] >= 4:
            return factor_space.names.index(name)
    candidates = [(size, i) for i, (name, size) in enumerate(zip(factor_space.names, factor_space.sizes))
                  if size >= 4 and name not in held]
    if not candidates:
        candidates = [(size, i) for i, size in enumerate(factor_space.sizes) if size >= 2]
    return min(candidates)[1]


def transfer_factor_position(factor_space, name: str | None, split=None) -> int:
    """The column of the OOD1 factor ``name`` (None: :func:`transfer_factor_of`); a clear error
    naming the dataset's factors if it has no such factor."""
    if name is None:
        return transfer_factor_of(factor_space, split)
    if name not in factor_space.names:
        raise ValueError(f"transfer_factor: the dataset has no factor {name!r}; its factors are "
                         f"{', '.join(factor_space.names)}")
    return factor_space.names.index(name)


def grid_score_sizes(n_metric: int, n_grid: int | None = None) -> dict[str, int]:
    """The sample sizes of the BetaVAE and FactorVAE scores under evaluate's budget ``n_metric``:
    disentanglement_lib's study's sizes (batch 64, 10,000 / 5,000 points, 10,000 for the variances)
    as upper limits;
    ``n_grid`` is the pool (0: fresh draws; None: ``min(10_000, 4 * n_metric)``)."""
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
    out = [numpy_nll(images[part], _reconstruct(model, images[part]), likelihood=likelihood)
           for part in np.array_split(rows, max(1, -(-len(rows) // 512)))] if len(rows) else []
    return np.concatenate(out) if out else np.zeros(0)


def evaluate(model, dataset, split, *, n_nll: int = 1000, n_metric: int = 1000, seed: int = 0,
             n_jobs: int | None = 1, dci_estimator: str | None = "gbt", metrics=DEFAULT_METRICS,
             transfer_regressors=("gbt",), transfer_factor: str | None = None,
             n_grid: int | None = None, n_metric_test: int | None = None,
             score_sampling: str = "training", diagnosis_ratio: float = RATIO,
             diagnosis_encoder_margin: float = ENCODER_MARGIN,
             diagnosis_decoder_margin: float = DECODER_MARGIN) -> dict[str, float]:
    """Metrics of ``model`` on ``dataset`` under the held-out ``split``.

    Returns ``train_nll`` and ``test_nll`` (mean NLL per image under the model's own likelihood,
    nats, on at most ``n_nll`` images per side) and the metrics named in ``metrics`` (see the
    module docstring for them and their samples). ``n_jobs`` is the number of processes fitting
    the DCI estimators (None: every core). ``dci_estimator`` picks the DCI estimator (see
    ``analysis.metrics.dci``); None skips every disentanglement metric (they are then NaN).
    ``transfer_factor`` names the OOD1 factor (default: :func:`transfer_factor_of`).
    ``n_grid`` is the BetaVAE/FactorVAE pool (0: fresh draws; see :func:`grid_score_sizes`);
    ``score_sampling`` "training" (default) or "grid". ``diagnosis_*`` are the encoder/decoder
    rule's parameters (``analysis.metrics.encoder_decoder_diagnosis.fails``).
    """
    unknown = set(metrics) - set(METRICS)
    if unknown:
        raise ValueError(f"unknown metrics {sorted(unknown)}; choose from {', '.join(METRICS)}")
    if score_sampling not in SCORE_SAMPLINGS:
        raise ValueError(f"score_sampling: unknown {score_sampling!r}; choose one of "
                         f"{', '.join(SCORE_SAMPLINGS)}")
    space = dataset.factor_space
    ood = transfer_factor_position(space, transfer_factor, split) if "transfer" in metrics else None
    train, test = split.train_test_indices(dataset.classes, space)
    rng = np.random.default_rng(seed)
    likelihood = model_likelihood(model)
    out: dict[str, float] = {
        "n_train_images": int(len(train)),
        "n_test_images": int(len(test)),
        "nll_likelihood": likelihood,
        "train_nll": float(reconstruction_nll_per_image(
            model, dataset.images, _sample(train, n_nll, rng), likelihood).mean()),
        "test_nll": float(reconstruction_nll_per_image(
            model, dataset.images, _sample(test, n_nll, rng), likelihood).mean()),
    }
    nan = float("nan")
    for name in METRICS:
        for key in _KEYS[name]:
            out[key] = nan
    n_test = max(2, n_metric // 2) if n_metric_test is None else n_metric_test
    # two independent draws from the training images, as disentanglement_lib draws its train and
    # test batches (a second stream, so the NLL sample above does not move with n_metric)
    draws = np.random.default_rng([seed, 2])
    rows, rows_test = _draw(train, n_metric, draws), _draw(train, n_test, draws)
    codes, factors = encode_means(model, dataset.images, rows), dataset.classes[rows]
    codes_check, factors_check = encode_means(model, dataset.images, rows_test), dataset.classes[rows_test]
    held_test = dict(codes_test=codes_check, factors_test=factors_check)
    if dci_estimator is None:
        out.update(factor_readout(space, dataset.classes[train], rows, rows_test, codes, factors, codes_check,
                                  factors_check, random_state=seed))
        return out
    out.update(metric_n_train=int(len(rows)), metric_n_test=int(len(rows_test)))

    standard = None
    if "dci" in metrics:
        standard = dci(codes, factors, **held_test, estimator=dci_estimator, random_state=seed, n_jobs=n_jobs)
        out["dci_disentanglement"] = float(standard["disentanglement"])
        out["dci_completeness"] = float(standard["completeness"])
        out["dci_informativeness"] = float(standard["informativeness_test"])
    out.update(factor_readout(space, dataset.classes[train], rows, rows_test, codes, factors, codes_check,
                              factors_check, dci_result=standard, dci_estimator=dci_estimator,
                              random_state=seed))
    if "d_score" in metrics:
        lasso = dci(codes, factors, estimator="lasso_m21", random_state=seed)
        out["d_score"] = float(lasso["disentanglement"])
    if "mig" in metrics:
        out["mig"] = mig(codes, factors)["mig"]
    if "sap" in metrics:
        out["sap"] = sap(codes, factors, **held_test, random_state=seed)["sap"]
    if "modularity_explicitness" in metrics:
        result = modularity_explicitness(codes, factors, **held_test, random_state=seed)
        out["modularity"], out["explicitness"] = result["modularity"], result["explicitness_test"]
    if {"beta_vae", "factor_vae"} & set(metrics):
        out.update(_grid_scores(model, dataset, train, metrics, n_metric, n_grid, score_sampling, seed))

    need_test = {"transfer", "encoder_decoder"} & set(metrics)
    test_rows = _sample(test, n_metric, rng)
    codes_test = encode_means(model, dataset.images, test_rows) if need_test else None
    factors_test = dataset.classes[test_rows]
    ranges = np.stack([np.zeros(space.n_factors), np.asarray(space.sizes) - 1.0], axis=1)
    if "transfer" in metrics:
        held = [space.position(name) for name in split.test_when]
        # OOD1 reads the training sample only: its values of the OOD factor are those the encoder
        # trained on (D21: OOD1-A/B/C are defined on the encoder's training hues)
        result = transfer_score(codes, factors, ood_factor=ood, codes_ood2=codes_test,
                                factors_ood2=factors_test,
                                regressors=tuple(transfer_regressors), factor_ranges=ranges,
                                ood2_excluded=held if len(held) == 1 else [], random_state=seed)
        out.update({k: v for k, v in result.items() if k.startswith("transfer_")})
        out["transfer_factor"] = space.names[ood]
    unique = np.unique(rows)  # the diagnosis splits its sample in two: no row on both sides
    if "encoder_decoder" in metrics and len(unique) >= 8:
        codes_unique = encode_means(model, dataset.images, unique)
        result = encoder_decoder_diagnosis(
            codes_unique, dataset.classes[unique], codes_test, factors_test, decode=_decoder(model),
            images=dataset.images[unique], images_test=dataset.images[test_rows], factor_ranges=ranges,
            ratio=diagnosis_ratio, encoder_margin=diagnosis_encoder_margin,
            decoder_margin=diagnosis_decoder_margin, likelihood=likelihood, random_state=seed)
        out.update({k: result[k] for k in _KEYS["encoder_decoder"]})
        out.update(diagnosis_ratio=float(diagnosis_ratio),
                   diagnosis_encoder_margin=float(diagnosis_encoder_margin),
                   diagnosis_decoder_margin=float(diagnosis_decoder_margin))
    return out


def no_readout(space) -> dict:
    """The readout keys of a model that has no encoder to read (the ground-truth decoder) or is not
    read (the composition network): NaN accuracies and chances, no samples, estimator "none"."""
    out: dict = {"readout_estimator": "none", "readout_n_train": 0, "readout_n_test": 0,
                 "factor_readout": "{}"}
    for name in space.names:
        if name in READOUT_FACTORS:
            out[f"accuracy_{name}"] = out[f"chance_{name}"] = float("nan")
    return out


def factor_readout(space, training_classes: np.ndarray, rows: np.ndarray, rows_test: np.ndarray, codes,
                   factors, codes_test, factors_test, *, dci_result: dict | None = None,
                   dci_estimator: str | None = None, random_state: int = 0) -> dict:
    """The readout accuracy per factor on held-in training images (module docstring, "Readout
    accuracy per factor"): the columns ``accuracy_<factor>``, ``chance_<factor>`` (factors with a
    results column, :data:`analysis.schema.READOUT_FACTORS`), ``readout_estimator``,
    ``readout_n_train``, ``readout_n_test`` and ``factor_readout`` (JSON, every factor).

    ``rows``/``codes``/``factors`` are the readout's training draws and ``rows_test``/... the test
    draws, both from the training images (``training_classes`` are all of those, for chance). A
    classifier DCI's result (``dci_result`` with ``predictions_test`` on the test draws) is reused;
    otherwise a random forest per factor is fitted (``analysis.metrics.factor_readout``). Only test
    draws of images that are not among the training draws are scored."""
    n_values = np.array([np.unique(training_classes[:, j]).size for j in range(space.n_factors)])
    if dci_result is not None and dci_result.get("predictions_test") is not None:
        predictions, estimator = dci_result["predictions_test"], f"dci_{dci_estimator}"
    else:
        predictions = forest_predictions(codes, factors, codes_test, random_state=random_state)
        estimator = "random_forest"
    scored = ~np.isin(rows_test, rows)
    accuracy = readout_accuracy(predictions, factors_test, scored, n_values)
    chances = 1.0 / n_values
    out: dict = {"readout_estimator": estimator, "readout_n_train": int(len(rows)),
                 "readout_n_test": int(scored.sum())}
    for name, value, level in zip(space.names, accuracy, chances):
        if name in READOUT_FACTORS:
            out[f"accuracy_{name}"], out[f"chance_{name}"] = float(value), float(level)
    out["factor_readout"] = json.dumps({
        name: {"accuracy": None if np.isnan(value) else float(value), "chance": float(level)}
        for name, value, level in zip(space.names, accuracy, chances)})
    return out


def _grid_scores(model, dataset, train, metrics, n_metric, n_grid, score_sampling, seed):
    """beta_vae_score and factor_vae_score with their sample sizes (see the module docstring)."""
    sizes = grid_score_sizes(n_metric, n_grid)
    batch = dict(batch_size=sizes["batch_size"], n_train=sizes["n_train"], n_eval=sizes["n_eval"])
    space = dataset.factor_space
    out = {"score_batch_size": sizes["batch_size"], "score_n_train": sizes["n_train"],
           "score_n_eval": sizes["n_eval"], "score_n_variance": sizes["n_variance"],
           "score_pool_size": sizes["n_grid"]}
    # a stream of its own for the pool, apart from the scores' (seeded by ``seed``)
    pool_seed = [seed, 1]
    if score_sampling == "grid":
        if dataset.observe is None:
            raise ValueError(f"score_sampling: 'grid' renders grid points with dataset.observe, which "
                             f"{dataset.name} lacks; use 'training'")

        def represent(classes):
            images = dataset.observe(classes)
            return encode_means(model, images, np.arange(len(images)))

        if sizes["n_grid"]:
            source = grid_pool(represent, space.sizes, sizes["n_grid"], random_state=pool_seed)
        else:
            source = represent
        out["score_sample"] = "full grid (rendered), held-out combinations included"
    else:
        if len(train) < 2:
            out.update(beta_vae_score=float("nan"), factor_vae_score=float("nan"),
                       score_sample="training images: fewer than 2")
            return out
        full = len(np.unique(dataset.classes[train], axis=0)) == int(np.prod(space.sizes, dtype=np.int64))
        out["score_sample"] = ("training images (a full factorial grid)" if full else "training images "
                               "(not a full factorial grid: ill-defined, Dittadi et al. 2021)")
        if sizes["n_grid"]:
            pool_rows = _draw(train, sizes["n_grid"], np.random.default_rng(pool_seed))
            source = GridPool(dataset.classes[pool_rows], encode_means(model, dataset.images, pool_rows),
                              space.sizes)
        else:
            source = RowSampler(dataset.classes[train],
                                lambda r: encode_means(model, dataset.images, train[r]), space.sizes)
    factor_sizes = None if isinstance(source, GridPool) else space.sizes
    if "beta_vae" in metrics:
        out["beta_vae_score"] = sampled_beta_vae_score(source, factor_sizes, **batch,
                                                       random_state=seed)["beta_vae_eval"]
    if "factor_vae" in metrics:
        out["factor_vae_score"] = sampled_factor_vae_score(
            source, factor_sizes, **batch, n_variance=sizes["n_variance"], random_state=seed,
        )["factor_vae_eval"]
    return out


def _decoder(model):
    """codes (numpy) → pixel probabilities (numpy, float64), in batches, without gradients."""
    def decode(codes):
        return decode_probabilities(model, codes).astype(np.float64)

    return decode
