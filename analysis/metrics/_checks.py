"""Input checks shared by the metrics, in scikit-learn's manner: every error names the array
and the shape that was expected (docs/analysis.md, "Bad input and the choices made for it").
"""

from __future__ import annotations

import numpy as np
from sklearn.model_selection import train_test_split


def check_codes(codes, name="codes", *, min_samples=2, min_codes=1):
    """A finite float array of shape (n_samples >= min_samples, n_codes >= min_codes)."""
    array = np.asarray(codes)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of shape (n_samples, n_codes); "
                         f"got shape {array.shape}.")
    try:
        array = array.astype(float)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must hold numbers; got dtype {array.dtype}.") from error
    if array.shape[0] < min_samples:
        raise ValueError(f"{name} must have at least {min_samples} samples, shape "
                         f"(n_samples >= {min_samples}, n_codes); got shape {array.shape}.")
    if array.shape[1] < min_codes:
        raise ValueError(f"{name} must have at least {min_codes} code(s), shape (n_samples, n_codes >= "
                         f"{min_codes}); got shape {array.shape}.")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinite values; shape {array.shape}.")
    return array


def check_factors(factors, n_samples, name="factors", *, discrete=True, codes_name="codes", hint=""):
    """An array of shape (n_samples, n_factors >= 1); integer class labels when ``discrete``
    (``hint`` is added to that error, to say what to do instead)."""
    array = np.asarray(factors)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of shape (n_samples, n_factors); "
                         f"got shape {array.shape}.")
    if array.shape[0] != n_samples:
        raise ValueError(f"{codes_name} and {name} must have the same number of samples: {codes_name} has "
                         f"{n_samples} rows, so {name} must have shape ({n_samples}, n_factors); "
                         f"got {array.shape}.")
    if array.shape[1] == 0:
        raise ValueError(f"{name} must have at least one factor, shape ({n_samples}, n_factors >= 1).")
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
        raise ValueError(f"{name} must hold numbers; got dtype {array.dtype}.")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinite values; shape {array.shape}.")
    if discrete:
        if not np.issubdtype(array.dtype, np.integer) and array.dtype != bool:
            if np.any(array != np.round(array)):
                raise ValueError(f"{name} must hold integer class labels, shape ({n_samples}, n_factors); "
                                 f"got non-integer values.{hint}")
        return array.astype(np.int64)
    return array.astype(float)


def check_pair(codes, factors, *, codes_name="codes", factors_name="factors", min_samples=2, min_codes=1,
               discrete=True, hint=""):
    codes = check_codes(codes, codes_name, min_samples=min_samples, min_codes=min_codes)
    factors = check_factors(factors, codes.shape[0], factors_name, discrete=discrete, codes_name=codes_name,
                            hint=hint)
    return codes, factors


def check_test_pair(codes, factors, codes_test, factors_test, *, discrete=True, min_samples=1, hint=""):
    """Check an optional test set against the training arrays; both or neither must be given."""
    if (codes_test is None) != (factors_test is None):
        raise ValueError("Give both codes_test and factors_test, or neither.")
    if codes_test is None:
        return None, None
    codes_test, factors_test = check_pair(codes_test, factors_test, codes_name="codes_test",
                                          factors_name="factors_test", min_samples=min_samples,
                                          discrete=discrete, hint=hint)
    if codes_test.shape[1] != codes.shape[1]:
        raise ValueError(f"codes_test must have shape (n_test, {codes.shape[1]}) to match codes; "
                         f"got {codes_test.shape}.")
    if factors_test.shape[1] != factors.shape[1]:
        raise ValueError(f"factors_test must have shape (n_test, {factors.shape[1]}) to match factors; "
                         f"got {factors_test.shape}.")
    return codes_test, factors_test


def hold_out(codes, factors, test_fraction, random_state):
    """Split samples into (codes, codes_test, factors, factors_test) when no test set was given."""
    if codes.shape[0] < 4:
        raise ValueError(f"codes must have at least 4 samples to hold some out, shape (n_samples >= 4, "
                         f"n_codes); got {codes.shape}.")
    return train_test_split(codes, factors, test_size=test_fraction, random_state=random_state)


def varying_factors(factors, name="factors"):
    """Indices of the factors that take more than one value; an error if there are none."""
    varying = np.flatnonzero(np.ptp(factors, axis=0) > 0)
    if varying.size == 0:
        raise ValueError(f"every factor in {name} (shape {factors.shape}) takes a single value; at least one "
                         "factor must vary to be scored.")
    return varying


def mean_top_two_gap(matrix):
    """Mean over columns of (largest − second largest entry) of a (n_codes >= 2, n_factors) matrix."""
    matrix = np.asarray(matrix, dtype=float)
    if matrix.ndim != 2 or matrix.shape[0] < 2 or matrix.shape[1] == 0:
        raise ValueError(f"the score matrix must have shape (n_codes >= 2, n_factors >= 1); "
                         f"got {matrix.shape}.")
    ordered = np.sort(matrix, axis=0)
    return float(np.mean(ordered[-1] - ordered[-2]))


def mean_or_nan(values):
    """The mean of the values that are not NaN; NaN if there are none."""
    values = [v for v in values if not np.isnan(v)]
    return float(np.mean(values)) if values else float("nan")
