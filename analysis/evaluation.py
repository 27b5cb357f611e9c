"""Evaluation of a trained model: reconstruction on train and held-out images, disentanglement,
transfer, and M22's encoder-or-decoder diagnosis.

Cost is bounded by sample budgets: NLL uses at most ``n_nll`` images of each side, and every
other metric encodes at most ``n_metric`` training images (and ``n_metric`` held-out images for
the scores that need them). A model is trained under one held-out split, so "each test condition"
is that split's test images; a sweep over splits evaluates every condition.

Metrics and what they write (all floats; NaN where a metric is not configured or not defined):

``"dci"``            dci_disentanglement, dci_completeness, dci_informativeness (``dci_estimator``)
``"d_score"``        d_score (Montero et al. 2021's Lasso D-score)
``"mig"``            mig
``"sap"``            sap (discrete factors, LinearSVC)
``"modularity_explicitness"``  modularity, explicitness
``"beta_vae"``       beta_vae_score   (eval accuracies, sampled on the full factor grid; see below)
``"factor_vae"``     factor_vae_score
``"transfer"``       transfer_<regressor>_ood1_a/b/c and _ood2 for each of ``transfer_regressors``
``"encoder_decoder"``  encoder_error_train/test, decoder_nll_train/test

``train_nll``, ``test_nll``, ``n_train_images`` and ``n_test_images`` are always computed.

**BetaVAE and FactorVAE scores.** Both need pairs or batches of images that share one factor's
value and vary at random in the others. The training rows of a random subset or of a held-out
split are no factorial grid, and on such rows the scores are ill-defined (Dittadi et al. 2021).
So, as disentanglement_lib does, evaluate() samples factor classes on the *full* grid, renders
them with ``dataset.observe`` and encodes them with the model. The scores then describe the
encoder on the whole grid, held-out combinations included; they do not depend on the split.
To bound the cost, ``n_grid`` grid points (default ``min(10_000, 4 * n_metric)``) are drawn
uniformly, rendered and encoded once, and both scores draw their pairs and batches from that
pool (``analysis.metrics.grid_pool``: each pair or batch has disentanglement_lib's distribution;
they are not independent of each other). Batch 64 as in SPEC §5; BetaVAE points and FactorVAE
votes: ``min(10_000, n_metric)`` to train, ``min(5_000, n_metric // 2)`` to evaluate; the
FactorVAE variances come from the whole pool. Where ``dataset.observe`` is None (images read
from a file that is not a full grid), the scores are computed on the encoded training rows,
which gives NaN unless they form a full factorial grid; the reason is logged.
"""

from __future__ import annotations

import logging

import numpy as np

from analysis.metrics._grid import grid_pool
from analysis.metrics.beta_vae_score import beta_vae_score, sampled_beta_vae_score
from analysis.metrics.dci import dci
from analysis.metrics.encoder_decoder_diagnosis import encoder_decoder_diagnosis
from analysis.metrics.factor_vae_score import factor_vae_score, sampled_factor_vae_score
from analysis.metrics.mig import mig
from analysis.metrics.modularity_explicitness import modularity_explicitness
from analysis.metrics.sap import sap
from analysis.metrics.transfer_score import transfer_score
from models.evaluation import decode_probabilities, encode_means, nll_per_image

_log = logging.getLogger(__name__)

METRICS = ("dci", "d_score", "mig", "sap", "modularity_explicitness", "beta_vae", "factor_vae",
           "transfer", "encoder_decoder")
# What a sweep computes unless told otherwise: everything, with the GBT transfer readout only
# (the [256, 256] MLP costs seconds per factor and scenario; ask for it with
# transfer_regressors=("gbt", "mlp")).
DEFAULT_METRICS = METRICS

_KEYS = {
    "dci": ["dci_disentanglement", "dci_completeness", "dci_informativeness"],
    "d_score": ["d_score"],
    "mig": ["mig"],
    "sap": ["sap"],
    "modularity_explicitness": ["modularity", "explicitness"],
    "beta_vae": ["beta_vae_score"],
    "factor_vae": ["factor_vae_score"],
    "transfer": [f"transfer_{r}_{s}" for r in ("gbt", "mlp") for s in ("ood1_a", "ood1_b", "ood1_c", "ood2")],
    "encoder_decoder": ["encoder_error_train", "encoder_error_test", "decoder_nll_train", "decoder_nll_test"],
}


def _sample(indices: np.ndarray, budget: int, rng: np.random.Generator) -> np.ndarray:
    if len(indices) <= budget:
        return indices
    return np.sort(rng.choice(indices, size=budget, replace=False))


def transfer_factor_of(factor_space, split=None) -> int:
    """The default OOD factor for OOD1: the factor with the fewest classes, at least 4, that the
    split does not hold out (D21 used object colour, 8 values); on dSprites this is scale."""
    held = set(getattr(split, "test_when", {}) or {})
    candidates = [(size, i) for i, (name, size) in enumerate(zip(factor_space.names, factor_space.sizes))
                  if size >= 4 and name not in held]
    if not candidates:
        candidates = [(size, i) for i, size in enumerate(factor_space.sizes) if size >= 2]
    return min(candidates)[1]


def grid_score_sizes(n_metric: int, n_grid: int | None = None) -> dict[str, int]:
    """The sample sizes of the BetaVAE and FactorVAE scores under evaluate's budget ``n_metric``:
    SPEC §5's sizes (batch 64, 10,000 / 5,000 points, 10,000 for the variances) as upper limits."""
    return {"n_grid": min(10_000, 4 * n_metric) if n_grid is None else n_grid, "batch_size": 64,
            "n_train": max(2, min(10_000, n_metric)), "n_eval": max(1, min(5_000, n_metric // 2))}


def evaluate(model, dataset, split, *, n_nll: int = 1000, n_metric: int = 1000, seed: int = 0,
             n_jobs: int | None = 1, dci_estimator: str | None = "gbt", metrics=DEFAULT_METRICS,
             transfer_regressors=("gbt",), transfer_factor: str | None = None,
             n_grid: int | None = None) -> dict[str, float]:
    """Metrics of ``model`` on ``dataset`` under the held-out ``split``.

    Returns ``train_nll`` and ``test_nll`` (mean Bernoulli NLL per image, nats) and the metrics
    named in ``metrics`` (see the module docstring), computed on at most ``n_metric`` images per
    side. ``n_jobs`` is the number of processes fitting the DCI estimators (None: every core).
    ``dci_estimator`` picks the DCI estimator (see ``analysis.metrics.dci``); None skips every
    disentanglement metric, as before (they are then NaN). The standard GBT costs about 10 s on
    dSprites' 113 factor classes whatever the sample size, since it grows 100 trees per class.
    ``transfer_factor`` names the OOD1 factor (default: :func:`transfer_factor_of`).
    ``n_grid`` is the number of full-grid points rendered and encoded for the BetaVAE and
    FactorVAE scores (default and sample sizes: :func:`grid_score_sizes`).
    """
    unknown = set(metrics) - set(METRICS)
    if unknown:
        raise ValueError(f"unknown metrics {sorted(unknown)}; choose from {', '.join(METRICS)}")
    train, test = split.train_test_indices(dataset.classes, dataset.factor_space)
    rng = np.random.default_rng(seed)
    out: dict[str, float] = {
        "n_train_images": int(len(train)),
        "n_test_images": int(len(test)),
        "train_nll": float(nll_per_image(model, dataset.images, _sample(train, n_nll, rng)).mean()),
        "test_nll": float(nll_per_image(model, dataset.images, _sample(test, n_nll, rng)).mean()),
    }
    nan = float("nan")
    for name in METRICS:
        for key in _KEYS[name]:
            out[key] = nan
    if dci_estimator is None:
        return out
    rows = _sample(train, n_metric, rng)
    test_rows = _sample(test, n_metric, rng)
    codes, factors = encode_means(model, dataset.images, rows), dataset.classes[rows]
    space = dataset.factor_space

    if "dci" in metrics:
        standard = dci(codes, factors, estimator=dci_estimator, random_state=seed, n_jobs=n_jobs)
        out["dci_disentanglement"] = float(standard["disentanglement"])
        out["dci_completeness"] = float(standard["completeness"])
        out["dci_informativeness"] = float(standard["informativeness_test"])
    if "d_score" in metrics:
        lasso = dci(codes, factors, estimator="lasso_m21", random_state=seed)
        out["d_score"] = float(lasso["disentanglement"])
    if "mig" in metrics:
        out["mig"] = mig(codes, factors)["mig"]
    if "sap" in metrics:
        out["sap"] = sap(codes, factors, random_state=seed)["sap"]
    if "modularity_explicitness" in metrics:
        result = modularity_explicitness(codes, factors, random_state=seed)
        out["modularity"], out["explicitness"] = result["modularity"], result["explicitness_test"]
    if {"beta_vae", "factor_vae"} & set(metrics):
        out.update(_grid_scores(model, dataset, codes, factors, metrics, n_metric, n_grid, seed))

    need_test = {"transfer", "encoder_decoder"} & set(metrics)
    codes_test = encode_means(model, dataset.images, test_rows) if need_test else None
    factors_test = dataset.classes[test_rows]
    ranges = np.stack([np.zeros(space.n_factors), np.asarray(space.sizes) - 1.0], axis=1)
    if "transfer" in metrics:
        ood = space.position(transfer_factor) if transfer_factor else transfer_factor_of(space, split)
        held = [space.position(name) for name in split.test_when]
        result = transfer_score(codes, factors, ood_factor=ood, codes_ood2=codes_test,
                                factors_ood2=factors_test,
                                regressors=tuple(transfer_regressors), factor_ranges=ranges,
                                ood2_excluded=held if len(held) == 1 else [], random_state=seed)
        out.update({k: v for k, v in result.items() if k.startswith("transfer_")})
    if "encoder_decoder" in metrics and len(rows) >= 8:
        result = encoder_decoder_diagnosis(
            codes, factors, codes_test, factors_test, decode=_decoder(model),
            images=dataset.images[rows], images_test=dataset.images[test_rows], factor_ranges=ranges,
            random_state=seed)
        out.update({k: result[k] for k in _KEYS["encoder_decoder"]})
    return out


def _grid_scores(model, dataset, codes, factors, metrics, n_metric, n_grid, seed):
    """beta_vae_score and factor_vae_score, on a pool of full-grid points where the dataset can
    render them, else on the encoded training rows (NaN unless they are a full grid)."""
    sizes = grid_score_sizes(n_metric, n_grid)
    batch = dict(batch_size=sizes["batch_size"], n_train=sizes["n_train"], n_eval=sizes["n_eval"])
    out = {}
    if dataset.observe is not None:
        def represent(classes):
            images = dataset.observe(classes)
            return encode_means(model, images, np.arange(len(images)))

        # a stream of its own for the pool, apart from the scores' (seeded by ``seed``)
        source = grid_pool(represent, dataset.factor_space.sizes, sizes["n_grid"], random_state=[seed, 1])
        if "beta_vae" in metrics:
            result = sampled_beta_vae_score(source, **batch, random_state=seed)
            out["beta_vae_score"] = result["beta_vae_eval"]
        if "factor_vae" in metrics:
            result = sampled_factor_vae_score(source, **batch, n_variance=sizes["n_grid"], random_state=seed)
            out["factor_vae_score"] = result["factor_vae_eval"]
        return out
    results = {}
    if "beta_vae" in metrics:
        results["beta_vae_score"] = beta_vae_score(codes, factors, **batch, random_state=seed)
        out["beta_vae_score"] = results["beta_vae_score"]["beta_vae_eval"]
    if "factor_vae" in metrics:
        results["factor_vae_score"] = factor_vae_score(
            codes, factors, **batch, n_variance=max(2, min(10_000, len(codes))), random_state=seed)
        out["factor_vae_score"] = results["factor_vae_score"]["factor_vae_eval"]
    for key, result in results.items():
        if result["reason"]:
            _log.info("%s is NaN: %s (dataset %s has no observe)", key, result["reason"], dataset.name)
    return out


def _decoder(model):
    """codes (numpy) → pixel probabilities (numpy, float64), in batches, without gradients."""
    def decode(codes):
        return decode_probabilities(model, codes).astype(np.float64)

    return decode
