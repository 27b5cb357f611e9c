"""The vectorised bootstrap of Spearman's ρ gives the very interval that resampling one draw at a
time with scipy gives, ties included."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from analysis.aggregate import spearman


@pytest.mark.parametrize("n,ties", [(50, False), (23, True)])
def test_the_interval_equals_a_resample_by_resample_scipy_bootstrap(n, ties):
    rng = np.random.default_rng(3)
    x = rng.random(n)
    y = x + rng.random(n)
    if ties:
        x, y = np.round(x * 4), np.round(y * 2)
    result = spearman(pd.DataFrame({"x": x, "y": y}), "x", "y", n_bootstrap=300, seed=7)
    rng, pairs, draws = np.random.default_rng(7), np.c_[x, y], []
    for _ in range(300):
        sample = pairs[rng.integers(0, n, n)]
        if np.ptp(sample[:, 0]) > 0 and np.ptp(sample[:, 1]) > 0:
            draws.append(spearmanr(sample[:, 0], sample[:, 1]).statistic)
    low, high = np.percentile(draws, [2.5, 97.5])
    assert result["low"] == pytest.approx(low, abs=1e-12) and result["high"] == pytest.approx(high, abs=1e-12)
    assert result["rho"] == pytest.approx(spearmanr(x, y).statistic)
