"""Bad input, the same way for every metric: the error names the array and the expected shape."""

import itertools

import numpy as np
import pytest

from analysis.metrics import (
    beta_vae_score,
    dci,
    factor_vae_score,
    mig,
    modularity_explicitness,
    sap,
    transfer_score,
)

FACTORS = np.repeat(np.array(list(itertools.product(range(2), range(3)))), 4, axis=0)
CODES = FACTORS + 0.0

METRICS = {
    "mig": lambda c, f: mig(c, f),
    "sap": lambda c, f: sap(c, f),
    "modularity_explicitness": lambda c, f: modularity_explicitness(c, f),
    "beta_vae_score": lambda c, f: beta_vae_score(c, f, n_train=20, n_eval=10, batch_size=4),
    "factor_vae_score": lambda c, f: factor_vae_score(c, f, n_train=20, n_eval=10, n_variance=50),
    "transfer_score": lambda c, f: transfer_score(c, f, ood_factor=0, regressors=("gbt",)),
    "dci": lambda c, f: dci(c, f, n_jobs=1),
}


@pytest.mark.parametrize("name", METRICS)
def test_different_number_of_samples(name):
    with pytest.raises(
        ValueError, match=r"codes and factors must have the same number of samples.*\(24, n_factors\)"
    ):
        METRICS[name](CODES[:24], FACTORS[:23] if name == "dci" else FACTORS[:23])


@pytest.mark.parametrize("name", METRICS)
def test_nan_in_codes(name):
    codes = CODES.copy()
    codes[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"codes contains NaN"):
        METRICS[name](codes, FACTORS)


@pytest.mark.parametrize("name", [n for n in METRICS if n != "dci"])
def test_every_factor_constant_is_an_error(name):
    with pytest.raises(ValueError, match=r"single value"):
        METRICS[name](CODES, np.zeros_like(FACTORS))


@pytest.mark.parametrize("name", ["mig", "sap", "modularity_explicitness"])
def test_one_constant_factor_is_left_out(name):
    factors = np.hstack([FACTORS, np.full((len(FACTORS), 1), 3)])
    result = METRICS[name](CODES, factors)
    assert result["n_factors_scored"] == 2.0


@pytest.mark.parametrize("name", METRICS)
def test_too_few_samples(name):
    with pytest.raises(ValueError, match=r"at least \d+ samples"):
        METRICS[name](CODES[:1], FACTORS[:1])


@pytest.mark.parametrize("name", METRICS)
def test_codes_must_be_two_dimensional(name):
    with pytest.raises(ValueError, match=r"codes must be a 2-D array of shape \(n_samples, n_codes\)"):
        METRICS[name](CODES[:, 0], FACTORS)


def test_metrics_do_not_import_torch():
    """joblib workers import analysis.metrics; they must not pay for torch."""
    import subprocess
    import sys

    code = "import sys, analysis, analysis.metrics; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
