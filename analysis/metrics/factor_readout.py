"""Readout accuracy per factor: how well each generative factor can be read from the codes.

The evidence ``analysis.findings`` needs before a held-out split counts: one classifier per factor,
codes → the factor's class, fitted on codes of training images and scored on codes of *other*
training images. The classifier is DCI's own fit where DCI runs with ``"gbt"`` or ``"hist_gbt"``,
else :func:`forest_predictions` (``RandomForestClassifier(n_estimators=20, max_features=None)``,
seeded; docs/analysis.md, "Readout accuracy per factor", says why trees and every code at each
split). :func:`readout_accuracy` scores the predictions on the test samples the readout did not
train on, beside chance: 1 / the number of values the factor takes on the training images (a
factor with one value there has nothing to read: NaN).
"""

from __future__ import annotations

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from threadpoolctl import threadpool_limits

from analysis.metrics._checks import check_codes, check_pair

__all__ = ["FOREST_TREES", "forest_predictions", "readout_accuracy"]

# the cheap readout's ensemble size (about 1 s of CPU for 5 factors of up to 40 values on 1,000 codes)
FOREST_TREES = 20


def forest_predictions(codes, factors, codes_test, *, random_state: int = 0) -> np.ndarray:
    """Predicted classes (n_test, n_factors) of a random forest per factor
    (:data:`FOREST_TREES` trees, every code considered at each split, scikit-learn's defaults
    otherwise), fitted on ``codes`` →
    ``factors`` (integer classes). A factor with one class in ``factors`` is predicted as that
    class."""
    codes, factors = check_pair(codes, factors, discrete=True)
    codes_test = check_codes(codes_test, "codes_test", min_samples=1)
    if codes_test.shape[1] != codes.shape[1]:
        raise ValueError(f"codes_test must have the {codes.shape[1]} codes of codes; "
                         f"got shape {codes_test.shape}.")
    seeds = np.random.default_rng(random_state).integers(0, np.iinfo(np.int32).max, factors.shape[1])
    out = np.empty((len(codes_test), factors.shape[1]), dtype=factors.dtype)
    with threadpool_limits(limits=1):
        for j in range(factors.shape[1]):
            y = factors[:, j]
            if np.unique(y).size < 2:
                out[:, j] = y[0]
                continue
            forest = RandomForestClassifier(n_estimators=FOREST_TREES, max_features=None,
                                            random_state=int(seeds[j]), n_jobs=1)
            out[:, j] = forest.fit(codes, y).predict(codes_test)
    return out


def readout_accuracy(predictions_test, factors_test, scored=None, n_values=None) -> np.ndarray:
    """Per factor, the share of the ``scored`` test samples (a boolean mask; default all) whose
    predicted class is the true one. NaN where no sample is scored, and for factors whose
    ``n_values`` (the number of classes on the training images) is below 2."""
    predictions = np.asarray(predictions_test)
    truth = np.asarray(factors_test)
    if predictions.shape != truth.shape or predictions.ndim != 2:
        raise ValueError(f"predictions_test {predictions.shape} and factors_test {truth.shape} must both "
                         "have shape (n_test, n_factors)")
    scored = np.ones(len(truth), dtype=bool) if scored is None else np.asarray(scored, dtype=bool)
    if scored.shape != (len(truth),):
        raise ValueError(f"scored must be a boolean mask of {len(truth)} test samples; "
                         f"got shape {scored.shape}")
    if not scored.any():
        return np.full(truth.shape[1], np.nan)
    accuracy = (predictions[scored] == truth[scored]).mean(axis=0).astype(float)
    if n_values is not None:
        accuracy[np.asarray(n_values) < 2] = np.nan
    return accuracy
