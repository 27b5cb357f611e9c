"""Evaluation of a trained model: reconstruction on train and held-out images, disentanglement.

Cost is bounded by sample budgets: NLL uses at most ``n_nll`` images of each side, and the
disentanglement metrics encode at most ``n_metric`` training images.
"""

from __future__ import annotations

import numpy as np

from analysis.metrics.dci import dci
from models.evaluation import encode_means, nll_per_image


def _sample(indices: np.ndarray, budget: int, rng: np.random.Generator) -> np.ndarray:
    if len(indices) <= budget:
        return indices
    return np.sort(rng.choice(indices, size=budget, replace=False))


def evaluate(model, dataset, split, *, n_nll: int = 1000, n_metric: int = 1000,
             seed: int = 0, n_jobs: int | None = 1, dci_estimator: str | None = "gbt") -> dict[str, float]:
    """Metrics of ``model`` on ``dataset`` under the held-out ``split``.

    Returns ``train_nll`` and ``test_nll`` (mean Bernoulli NLL per image, nats), the standard
    GBT DCI scores on training images, and Montero et al. 2021's Lasso ``d_score``.
    ``n_jobs`` is the number of processes fitting the DCI estimators (None: every core).
    ``dci_estimator`` picks the DCI estimator (see ``analysis.metrics.dci``); None skips the
    disentanglement metrics (they are then NaN). The standard GBT costs about 10 s on dSprites'
    113 factor classes whatever the sample size, since it grows 100 trees per class.
    """
    train, test = split.train_test_indices(dataset.classes, dataset.factor_space)
    rng = np.random.default_rng(seed)
    metrics: dict[str, float] = {
        "n_train_images": int(len(train)),
        "n_test_images": int(len(test)),
        "train_nll": float(nll_per_image(model, dataset.images, _sample(train, n_nll, rng)).mean()),
        "test_nll": float(nll_per_image(model, dataset.images, _sample(test, n_nll, rng)).mean()),
    }
    rows = _sample(train, n_metric, rng)
    if dci_estimator is None:
        nan = float("nan")
        metrics.update(dci_disentanglement=nan, dci_completeness=nan, dci_informativeness=nan, d_score=nan)
        return metrics
    codes, factors = encode_means(model, dataset.images, rows), dataset.classes[rows]
    standard = dci(codes, factors, estimator=dci_estimator, random_state=seed, n_jobs=n_jobs)
    metrics["dci_disentanglement"] = float(standard["disentanglement"])
    metrics["dci_completeness"] = float(standard["completeness"])
    metrics["dci_informativeness"] = float(standard["informativeness_test"])
    lasso = dci(codes, factors, estimator="lasso_m21", random_state=seed)
    metrics["d_score"] = float(lasso["disentanglement"])
    return metrics
