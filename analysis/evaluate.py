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
             seed: int = 0, n_jobs: int | None = 1) -> dict[str, float]:
    """Metrics of ``model`` on ``dataset`` under the held-out ``split``.

    Returns ``train_nll`` and ``test_nll`` (mean Bernoulli NLL per image, nats), the standard
    GBT DCI scores on training images, and Montero et al. 2021's Lasso ``d_score``.
    ``n_jobs`` is the number of processes fitting the DCI estimators (None: every core).
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
    codes, factors = encode_means(model, dataset.images, rows), dataset.classes[rows]
    standard = dci(codes, factors, estimator="gbt", random_state=seed, n_jobs=n_jobs)
    metrics["dci_disentanglement"] = float(standard["disentanglement"])
    metrics["dci_completeness"] = float(standard["completeness"])
    metrics["dci_informativeness"] = float(standard["informativeness_test"])
    lasso = dci(codes, factors, estimator="lasso_m21", random_state=seed)
    metrics["d_score"] = float(lasso["disentanglement"])
    return metrics
