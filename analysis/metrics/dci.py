"""DCI: disentanglement, completeness and informativeness (Eastwood & Williams, 2018).

One regressor or classifier per ground-truth factor predicts that factor from the codes; how much
each code matters to each factor gives an importance matrix ``R`` of shape ``(n_codes,
n_factors)``. Disentanglement: how much each code is devoted to a single factor (row entropies);
completeness: how much each factor is captured by a single code (column entropies);
informativeness: how well the factors can be predicted (a classifier's accuracy, a lasso's R²,
averaged over the factors that are not constant on the training set; a constant factor gets a zero
column).

Four estimators, whose numbers should not be mixed in one study (docs/analysis.md, "Metrics"):
``"gbt"`` (disentanglement_lib's ``GradientBoostingClassifier``), ``"hist_gbt"`` (a faster
``HistGradientBoostingClassifier``, early stopping off, importance = the total split gain on each
code; it always picks the lower-indexed of two equally good codes, so a duplicated code does not
lower completeness), ``"lasso_m21"`` (Montero et al. 2021's D-score) and ``"lasso_m22"`` (Montero
et al. 2022's variant: codes z-scored, targets padded with noise to the number of codes, codes
reordered by an optimal assignment, entropy base the number of codes). ``LassoCV``'s convergence
warnings are silenced: the settings are fixed by the papers.

The factors are fitted in parallel with joblib, each with a seed drawn before any fitting starts,
so the parallel result equals the serial one exactly. ``n_jobs=None`` uses every core; a caller
given fewer (a Ray trial reserving one CPU) passes its own.
"""

import numbers
import warnings

import numpy as np
import sklearn
from joblib import Parallel, delayed, effective_n_jobs
from scipy.optimize import linear_sum_assignment
from sklearn.ensemble import GradientBoostingClassifier, HistGradientBoostingClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LassoCV
from sklearn.model_selection import train_test_split
from sklearn.utils import check_random_state
from threadpoolctl import threadpool_limits

from analysis.metrics._checks import check_pair, check_test_pair, mean_or_nan

__all__ = ["dci", "disentanglement", "completeness", "ESTIMATORS"]

ESTIMATORS = ("gbt", "hist_gbt", "lasso_m21", "lasso_m22")

# Added to every importance before taking an entropy, as disentanglement_lib does, so that
# rows and columns of zeros have a defined (maximal) entropy.
_EPSILON = 1e-11

# The smallest training set LassoCV(cv=5) can be fitted on.
_LASSO_MIN_TRAIN = 5


def disentanglement(importance_matrix):
    """Disentanglement of an importance matrix ``(n_codes, n_factors)``: Σ_i ρ_i (1 − H(R_i)), with
    H(R_i) the entropy, in base n_factors, of code i's row (+1e-11, normalised) and ρ_i the row's
    share of the total. 1 when every code matters to at most one factor; 0 for an all-zero matrix."""
    matrix = _check_importance_matrix(importance_matrix)
    return _weighted_specificity(matrix)


def completeness(importance_matrix):
    """Completeness of an importance matrix ``(n_codes, n_factors)``: :func:`disentanglement`
    over each factor's column, in base n_codes. 1 when every factor is captured by one code."""
    matrix = _check_importance_matrix(importance_matrix)
    return _weighted_specificity(matrix.T)


def _weighted_specificity(matrix):
    """Sum over rows of (row share of the total) * (1 - row entropy in base n_columns)."""
    total = matrix.sum()
    if total == 0.0:
        return 0.0
    n_columns = matrix.shape[1]
    if n_columns == 1:
        # A distribution over one outcome has no uncertainty.
        entropy = np.zeros(matrix.shape[0])
    else:
        p = matrix + _EPSILON
        p = p / p.sum(axis=1, keepdims=True)
        entropy = -(p * np.log(p)).sum(axis=1) / np.log(n_columns)
    weights = matrix.sum(axis=1) / total
    return float(np.sum(weights * (1.0 - entropy)))


def _check_importance_matrix(importance_matrix):
    matrix = np.asarray(importance_matrix, dtype=float)
    if matrix.ndim != 2 or matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise ValueError("importance_matrix must be a non-empty 2-D array of shape (n_codes, n_factors); "
                         f"got shape {matrix.shape}.")
    if not np.all(np.isfinite(matrix)):
        raise ValueError("importance_matrix contains NaN or infinite values.")
    if np.any(matrix < 0):
        raise ValueError("importance_matrix must be non-negative.")
    return matrix


def dci(codes, factors, *, codes_test=None, factors_test=None, estimator="gbt", test_fraction=0.33,
        n_jobs=None, random_state=0):
    """DCI disentanglement, completeness and informativeness of ``codes`` (n_samples, n_codes) for
    ``factors`` (n_samples, n_factors): integer class labels for ``"gbt"`` and ``"hist_gbt"``,
    numbers for the lasso estimators (module docstring).

    ``codes_test``, ``factors_test``: a separate test set (both or neither); without one,
    ``test_fraction`` of the samples are held out. ``n_jobs``: factors fitted at once (None: every
    core; the result does not depend on it). ``random_state`` seeds the split, the estimators and
    the noise targets of ``"lasso_m22"``.

    Returns ``"disentanglement"``, ``"completeness"``, ``"informativeness_train"``,
    ``"informativeness_test"`` and ``"importance_matrix"`` (n_codes, n_factors). The classifiers
    also give each factor's test accuracy, ``"accuracy_test"`` (n_factors,; NaN for a factor
    constant on the training set). ``"lasso_m22"`` gives its
    matrix's rows in the reordered code order, ``"importance_matrix_padded"`` (with the noise
    targets, from which D and C are computed) and ``"code_order"`` (each row's original index).
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {', '.join(repr(e) for e in ESTIMATORS)}; "
                         f"got {estimator!r}.")
    classify = estimator in ("gbt", "hist_gbt")
    hint = " The gbt and hist_gbt estimators classify; use a lasso estimator for continuous factors."
    codes, factors = check_pair(codes, factors, discrete=classify, hint=hint)
    codes_test, factors_test = check_test_pair(codes, factors, codes_test, factors_test,
                                               discrete=classify, min_samples=2, hint=hint)
    rng = check_random_state(random_state)

    if codes_test is None:
        if not (isinstance(test_fraction, numbers.Real) and 0.0 < test_fraction < 1.0):
            raise ValueError(f"test_fraction must be a number in (0, 1); got {test_fraction!r}.")
        split_seed = rng.randint(np.iinfo(np.int32).max)
        codes, codes_test, factors, factors_test = train_test_split(codes, factors, test_size=test_fraction,
                                                                    random_state=split_seed)
    if not classify and codes.shape[0] < _LASSO_MIN_TRAIN:
        raise ValueError(f"{estimator} needs at least {_LASSO_MIN_TRAIN} training samples (5-fold "
                         f"cross-validation); got {codes.shape[0]}.")

    if classify:
        return _dci_classifier(codes, factors, codes_test, factors_test, estimator, n_jobs, rng)
    return _dci_lasso(codes, factors, codes_test, factors_test, estimator, n_jobs, rng)


def _dci_classifier(codes, factors, codes_test, factors_test, estimator, n_jobs, rng):
    n_factors = factors.shape[1]
    seeds = rng.randint(np.iinfo(np.int32).max, size=n_factors)
    tasks = [(codes, factors[:, j], codes_test, factors_test[:, j], estimator, seeds[j])
             for j in range(n_factors)]
    results = _run(tasks, n_jobs)
    importance = np.stack([r[0] for r in results], axis=1)
    return {"disentanglement": _weighted_specificity(importance),
            "completeness": _weighted_specificity(importance.T),
            "informativeness_train": mean_or_nan([r[1] for r in results]),
            "informativeness_test": mean_or_nan([r[2] for r in results]),
            "importance_matrix": importance,
            "accuracy_test": np.array([r[2] for r in results], dtype=float)}


def _dci_lasso(codes, factors, codes_test, factors_test, estimator, n_jobs, rng):
    n_codes = codes.shape[1]
    n_factors = factors.shape[1]
    mean = codes.mean(axis=0)
    if estimator == "lasso_m21":
        scale = np.ones(n_codes)
    else:
        scale = _safe_std(codes)
    x_train = (codes - mean) / scale
    x_test = (codes_test - mean) / scale

    factors = factors.astype(float)
    factors_test = factors_test.astype(float)
    y_mean = factors.mean(axis=0)
    y_std = factors.std(axis=0)
    constant = y_std == 0
    y_std[constant] = 1.0
    y_train = (factors - y_mean) / y_std
    y_test = (factors_test - y_mean) / y_std

    n_noise = 0
    if estimator == "lasso_m22" and n_codes > n_factors:
        n_noise = n_codes - n_factors
        # Noise targets are standard normal, so already z-scored in expectation; z-score them
        # exactly like the factors.
        noise = rng.standard_normal((x_train.shape[0], n_noise))
        noise = (noise - noise.mean(axis=0)) / _safe_std(noise)
        y_train = np.hstack([y_train, noise])

    n_targets = n_factors + n_noise
    seeds = rng.randint(np.iinfo(np.int32).max, size=n_targets)
    fitted = [j for j in range(n_targets) if j >= n_factors or not constant[j]]  # constant: a zero column
    tasks = [(x_train, y_train[:, j], x_test, y_test[:, j] if j < n_factors else None, estimator, seeds[j])
             for j in fitted]
    results = dict(zip(fitted, _run(tasks, n_jobs)))
    importance = np.zeros((n_codes, n_targets))
    for j, r in results.items():
        importance[:, j] = r[0]
    real = [r for j, r in results.items() if j < n_factors]
    out = {"informativeness_train": mean_or_nan([r[1] for r in real]),
           "informativeness_test": mean_or_nan([r[2] for r in real])}
    if estimator == "lasso_m21":
        out["disentanglement"] = _weighted_specificity(importance)
        out["completeness"] = _weighted_specificity(importance.T)
        out["importance_matrix"] = importance
        return out

    # lasso_m22: give each target the code that matters most to it, overall, and reorder the
    # codes so that code j is the one assigned to target j (unassigned codes, if any, last).
    _, assigned_codes = linear_sum_assignment(importance.T, maximize=True)
    order = np.concatenate([assigned_codes, np.setdiff1d(np.arange(n_codes), assigned_codes)])
    padded = importance[order]
    out["disentanglement"] = _weighted_specificity(padded)
    out["completeness"] = _weighted_specificity(padded.T)
    out["importance_matrix"] = padded[:, :n_factors]
    out["importance_matrix_padded"] = padded
    out["code_order"] = order
    return out


def _run(tasks, n_jobs):
    """Fit every task, in parallel when more than one worker is useful; keep the task order. In
    parallel the costliest tasks start first, so that the workers finish together: a boosted
    classifier grows one tree per class and stage, so its cost is taken as its number of classes."""
    if n_jobs is None:
        n_jobs = -1
    workers = min(effective_n_jobs(n_jobs), len(tasks))
    if all(task[4] not in ("gbt", "hist_gbt") for task in tasks):
        workers = 1  # a lasso fit takes milliseconds: starting worker processes takes seconds
    # HistGradientBoostingClassifier runs OpenMP threads of its own. Serially, and with the
    # threading backend, keep it to one: OpenMP threads that compete for busy cores can slow
    # a fit down many times over. Process workers get their thread limits from joblib.
    with threadpool_limits(limits=1, user_api="openmp"):
        if workers <= 1:
            return [_fit_one(*task) for task in tasks]
        cost = [np.unique(task[1]).size if task[4] in ("gbt", "hist_gbt") else 1 for task in tasks]
        order = sorted(range(len(tasks)), key=lambda i: -cost[i])
        fitted = Parallel(n_jobs=workers)(delayed(_fit_one)(*tasks[i]) for i in order)
    results = [None] * len(tasks)
    for i, result in zip(order, fitted, strict=True):
        results[i] = result
    return results


def _fit_one(x_train, y_train, x_test, y_test, estimator, seed):
    """Fit one factor's estimator; return (importances over codes, train score, test score). The
    inputs were checked before any fitting, so scikit-learn's per-call checks are off: each of a
    boosted classifier's thousands of small trees would re-validate them (a quarter of the fit's
    time on 300 samples). The numbers are the same to the last bit."""
    with sklearn.config_context(assume_finite=True, skip_parameter_validation=True):
        return _fit_checked(x_train, y_train, x_test, y_test, estimator, seed)


def _fit_checked(x_train, y_train, x_test, y_test, estimator, seed):
    n_codes = x_train.shape[1]
    if estimator in ("gbt", "hist_gbt"):
        if np.unique(y_train).size < 2:
            return np.zeros(n_codes), np.nan, np.nan
        if estimator == "gbt":
            model = GradientBoostingClassifier(random_state=seed).fit(x_train, y_train)
            importance = np.abs(model.feature_importances_)
        else:
            model = HistGradientBoostingClassifier(early_stopping=False, random_state=seed)
            model.fit(x_train, y_train)
            importance = _split_gain_importance(model, n_codes)
        train_score = np.mean(model.predict(x_train) == y_train)
        return importance, train_score, np.mean(model.predict(x_test) == y_test)

    model = LassoCV(cv=5, alphas=[0.02], selection="random", random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=ConvergenceWarning)
        model.fit(x_train, y_train)
    importance = np.abs(model.coef_)
    if y_test is None:  # a noise target of lasso_m22: only its importances are needed
        return importance, np.nan, np.nan
    return importance, model.score(x_train, y_train), model.score(x_test, y_test)


def _split_gain_importance(model, n_codes):
    """Total split gain per code over all trees of a fitted HistGradientBoostingClassifier,
    normalised to sum to 1 (zeros if no split was made) like ``feature_importances_``. Reads the
    undocumented fitted trees (``_predictors``); a clear error if their layout ever changes."""
    try:
        gains = np.zeros(n_codes)
        for iteration in model._predictors:
            for tree in iteration:
                nodes = tree.nodes
                split = ~nodes["is_leaf"].astype(bool)
                np.add.at(gains, nodes["feature_idx"][split], nodes["gain"][split])
    except (AttributeError, KeyError, ValueError) as error:  # pragma: no cover
        raise RuntimeError(
            "Cannot read split gains from this scikit-learn version's "
            "HistGradientBoostingClassifier; use estimator='gbt'."
        ) from error
    gains = np.maximum(gains, 0.0)
    total = gains.sum()
    return gains / total if total > 0 else gains


def _safe_std(array):
    std = array.std(axis=0)
    std[std == 0] = 1.0
    return std


def score_dci(sample) -> dict:
    """The registry's DCI: the config's ``dci_estimator``, fitted on the training draws and tested
    on the check draws."""
    result = dci(sample.codes, sample.factors, codes_test=sample.codes_check,
                 factors_test=sample.factors_check, estimator=sample.config.dci_estimator,
                 random_state=sample.seed, n_jobs=sample.n_jobs)
    return {"dci_disentanglement": float(result["disentanglement"]),
            "dci_completeness": float(result["completeness"]),
            "dci_informativeness": float(result["informativeness_test"])}


def score_d_score(sample) -> dict:
    """The registry's D-score: Montero et al. 2021's Lasso DCI on the training draws (5-fold)."""
    return {"d_score": float(dci(sample.codes, sample.factors, estimator="lasso_m21",
                                 random_state=sample.seed, n_jobs=sample.n_jobs)["disentanglement"])}
