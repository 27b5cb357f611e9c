"""SAP: the separated attribute predictability score (Kumar et al., 2018), as disentanglement_lib
computes it.

A score matrix ``S`` (n_codes, n_factors) says how well each code *alone* predicts each factor: the
test accuracy of ``LinearSVC(C=0.01, class_weight="balanced")`` on code ``i`` for factor ``j``
(discrete, the default, as in disentanglement_lib's study), or the R² of a straight-line fit on the
training set (continuous). SAP is the mean over factors of the gap between the two largest scores
in the factor's column; a factor that takes a single value is left out (docs/analysis.md, "Metrics").
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC

from analysis.metrics._checks import check_pair, check_test_pair, hold_out, mean_top_two_gap, varying_factors

__all__ = ["sap", "sap_from_score_matrix"]


def sap_from_score_matrix(score_matrix):
    """Mean over factors of (top score − second score) in a (n_codes >= 2, n_factors) matrix."""
    return mean_top_two_gap(score_matrix)


def sap(codes, factors, *, codes_test=None, factors_test=None, continuous=False, test_fraction=0.33,
        random_state=0):
    """SAP score of ``codes`` (n_samples, n_codes >= 2) about ``factors`` (n_samples, n_factors):
    test accuracies of a linear SVM per (code, factor) on ``codes_test``/``factors_test`` or, without
    them, on ``test_fraction`` of the samples; with ``continuous=True``, R² on the training samples.
    Returns ``"sap"``, ``"n_factors_scored"`` and ``"score_matrix"``."""
    codes, factors = check_pair(codes, factors, min_codes=2, discrete=not continuous)
    codes_test, factors_test = check_test_pair(codes, factors, codes_test, factors_test,
                                               discrete=not continuous)
    varying = varying_factors(factors)
    if continuous:
        score = _r_squared_matrix(codes, factors[:, varying])
    else:
        if codes_test is None:
            codes, codes_test, factors, factors_test = hold_out(codes, factors, test_fraction, random_state)
        score = _accuracy_matrix(codes, factors[:, varying], codes_test, factors_test[:, varying],
                                 random_state)
    return {"sap": sap_from_score_matrix(score), "n_factors_scored": float(varying.size),
            "score_matrix": score}


def _r_squared_matrix(codes, factors):
    codes = codes - codes.mean(axis=0)
    factors = factors - factors.mean(axis=0)
    covariance = codes.T @ factors / codes.shape[0]
    code_variance = (codes**2).mean(axis=0)
    factor_variance = (factors**2).mean(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        r2 = covariance**2 / np.outer(code_variance, factor_variance)
    return np.nan_to_num(r2, nan=0.0)  # a constant code explains nothing


def _accuracy_matrix(codes, factors, codes_test, factors_test, random_state):
    score = np.zeros((codes.shape[1], factors.shape[1]))
    for j in range(factors.shape[1]):
        if np.unique(factors[:, j]).size < 2:
            continue  # constant on the training part: no classifier can be trained
        for i in range(codes.shape[1]):
            classifier = LinearSVC(C=0.01, class_weight="balanced", random_state=random_state)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", category=ConvergenceWarning)
                classifier.fit(codes[:, [i]], factors[:, j])
            score[i, j] = np.mean(classifier.predict(codes_test[:, [i]]) == factors_test[:, j])
    return score


def score_sap(sample) -> dict:
    """The registry's SAP: fitted on the training draws, tested on the check draws."""
    return {"sap": sap(sample.codes, sample.factors, codes_test=sample.codes_check,
                       factors_test=sample.factors_check, random_state=sample.seed)["sap"]}
