"""Modularity and explicitness (Ridgeway & Mozer, 2018), as disentanglement_lib computes them.

**Modularity**, on MIG's 20-bin mutual information matrix ``M`` (n_codes, n_factors): per code,
``1 − Σ_j (M[i, j] − t_i[j])² / (θ_i² (n_factors − 1))`` with ``θ_i`` its largest entry and the
template ``t_i`` keeping only that entry (0 for a code with ``θ_i = 0``); the mean over codes.
**Explicitness**: per factor, a logistic regression (scikit-learn's defaults) on the codes
standardised with the training statistics; its one-vs-rest ROC-AUC averaged over the factor's
classes present in the scored set, then over factors. Factors with a single value are left out.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from analysis.metrics._checks import check_pair, check_test_pair, hold_out, mean_or_nan, varying_factors
from analysis.metrics.mig import N_BINS, discretize, mutual_information_matrix

__all__ = ["modularity_explicitness", "modularity", "explicitness"]


def modularity(mutual_information):
    """Modularity of a (n_codes, n_factors) matrix of mutual information (or any importances)."""
    matrix = np.asarray(mutual_information, dtype=float)
    if matrix.ndim != 2 or 0 in matrix.shape:
        raise ValueError(f"mutual_information must be a non-empty 2-D array of shape (n_codes, n_factors); "
                         f"got shape {matrix.shape}.")
    if np.any(matrix < 0) or not np.all(np.isfinite(matrix)):
        raise ValueError("mutual_information must be finite and non-negative.")
    theta = matrix.max(axis=1)
    informative = theta > 0
    scores = np.zeros(matrix.shape[0])
    if matrix.shape[1] == 1:
        scores[informative] = 1.0
        return float(scores.mean())
    template = np.zeros_like(matrix)
    template[np.arange(matrix.shape[0]), matrix.argmax(axis=1)] = theta
    deviation = ((matrix - template) ** 2).sum(axis=1)
    scores[informative] = 1.0 - deviation[informative] / (theta[informative] ** 2 * (matrix.shape[1] - 1))
    return float(scores.mean())


def explicitness(codes, factors, codes_test, factors_test, *, random_state=0):
    """Mean ROC-AUC of a logistic regression per factor; returns (train, test) scores."""
    mean, scale = codes.mean(axis=0), codes.std(axis=0)
    scale[scale == 0] = 1.0
    x_train, x_test = (codes - mean) / scale, (codes_test - mean) / scale
    train_scores, test_scores = [], []
    for j in range(factors.shape[1]):
        if np.unique(factors[:, j]).size < 2:
            continue
        model = LogisticRegression(random_state=random_state)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=ConvergenceWarning)
            model.fit(x_train, factors[:, j])
        train_scores.append(_mean_auc(model, x_train, factors[:, j]))
        test_scores.append(_mean_auc(model, x_test, factors_test[:, j]))
    return mean_or_nan(train_scores), mean_or_nan(test_scores)


def _mean_auc(model, x, y):
    probabilities = model.predict_proba(x)
    aucs = []
    for k, label in enumerate(model.classes_):
        positive = y == label
        if positive.any() and not positive.all():
            aucs.append(roc_auc_score(positive, probabilities[:, k]))
    return float(np.mean(aucs)) if aucs else float("nan")


def modularity_explicitness(codes, factors, *, codes_test=None, factors_test=None, n_bins=N_BINS,
                            test_fraction=0.33, random_state=0):
    """Modularity (on all the given ``codes``) and explicitness (train and test ROC-AUC).

    ``codes`` (n_samples, n_codes), ``factors`` (n_samples, n_factors) of integer class labels.
    Without a test set, ``test_fraction`` of the samples are held out for explicitness.
    Returns ``"modularity"``, ``"explicitness_train"``, ``"explicitness_test"``,
    ``"n_factors_scored"`` and the ``"mutual_information"`` matrix.
    """
    codes, factors = check_pair(codes, factors)
    codes_test, factors_test = check_test_pair(codes, factors, codes_test, factors_test)
    varying = varying_factors(factors)
    mutual_information = mutual_information_matrix(discretize(codes, n_bins), factors[:, varying])
    if codes_test is None:
        codes, codes_test, factors, factors_test = hold_out(codes, factors, test_fraction, random_state)
    train, test = explicitness(codes, factors[:, varying], codes_test, factors_test[:, varying],
                               random_state=random_state)
    return {"modularity": modularity(mutual_information), "explicitness_train": train,
            "explicitness_test": test, "n_factors_scored": float(varying.size),
            "mutual_information": mutual_information}


def score_modularity_explicitness(sample) -> dict:
    """The registry's modularity and explicitness: fitted on the training draws, explicitness
    tested on the check draws."""
    result = modularity_explicitness(sample.codes, sample.factors, codes_test=sample.codes_check,
                                     factors_test=sample.factors_check, random_state=sample.seed)
    return {"modularity": result["modularity"], "explicitness": result["explicitness_test"]}
