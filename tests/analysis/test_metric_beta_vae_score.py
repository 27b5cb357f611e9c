"""Tests for analysis.metrics.beta_vae_score on full factorial grids and on other sample sets."""

import itertools

import numpy as np
import pytest

from analysis.metrics.beta_vae_score import beta_vae_score

SMALL = dict(n_train=300, n_eval=200, batch_size=16)


def grid(sizes=(2, 3, 4), repeat=2):
    return np.repeat(np.array(list(itertools.product(*map(range, sizes)))), repeat, axis=0)


def test_identity_permuted_duplicated_and_empty_codes_score_one():
    factors = grid()
    codes = factors + 0.0
    for variant in (
        codes,
        codes[:, [2, 0, 1]],
        np.hstack([codes, codes]),
        np.hstack([codes, np.zeros((len(codes), 1))]),
    ):
        result = beta_vae_score(variant, factors, **SMALL)
        assert result["beta_vae_train"] == pytest.approx(1.0)
        assert result["beta_vae_eval"] == pytest.approx(1.0)
        assert result["reason"] == ""


def test_all_zero_codes_score_near_chance():
    factors = grid()
    result = beta_vae_score(np.zeros((len(factors), 2)), factors, **SMALL)
    assert result["beta_vae_eval"] < 0.5


def test_duplicated_factors_are_not_a_factorial_grid():
    factors = grid()
    result = beta_vae_score(factors + 0.0, np.hstack([factors, factors]), **SMALL)
    assert np.isnan(result["beta_vae_train"]) and np.isnan(result["beta_vae_eval"])
    assert "not a full factorial grid" in result["reason"]


def test_a_held_out_split_is_not_a_factorial_grid():
    factors = grid()
    keep = ~((factors[:, 0] == 1) & (factors[:, 2] == 3))
    result = beta_vae_score(factors[keep] + 0.0, factors[keep], **SMALL)
    assert np.isnan(result["beta_vae_eval"])
    assert "of the 24 combinations" in result["reason"]


def test_random_codes_stay_in_range():
    factors = grid()
    codes = np.random.default_rng(0).standard_normal((len(factors), 3))
    result = beta_vae_score(codes, factors, **SMALL)
    assert 0.0 <= result["beta_vae_eval"] <= 1.0


def test_bad_budget():
    with pytest.raises(ValueError, match="n_train must be an integer >= 2"):
        beta_vae_score(grid() + 0.0, grid(), n_train=1)


# --- the sampled path: a representation function over the full grid, or a pool of encoded points ---

from analysis.metrics import grid_pool, sampled_beta_vae_score  # noqa: E402

SIZES = (3, 4, 5)
SAMPLED = dict(n_train=300, n_eval=600, batch_size=64)


def encoder(columns=None, noise=1e-6, constant=False, seed=0):
    """An "encoder" of grid classes: the true classes (or some columns of them) plus tiny noise;
    or a constant; or, with ``columns=[]``, pure noise independent of the classes."""
    rng = np.random.default_rng(seed)

    def represent(classes):
        if constant:
            return np.zeros((len(classes), 3))
        codes = classes[:, columns] if columns is not None else classes
        codes = codes + 0.0 if codes.shape[1] else np.zeros((len(classes), 4))
        scale = noise if codes.any() else 1.0
        return codes + scale * rng.standard_normal(codes.shape)

    return represent


@pytest.mark.parametrize(
    "columns", [None, [2, 0, 1], [0, 1, 2, 0, 1, 2]], ids=["true", "permuted", "duplicated"]
)
@pytest.mark.parametrize("pooled", [False, True], ids=["direct", "pool"])
def test_sampled_true_factor_classes_score_one(columns, pooled):
    represent = encoder(columns)
    source = grid_pool(represent, SIZES, 2000) if pooled else represent
    result = sampled_beta_vae_score(source, None if pooled else SIZES, **SAMPLED)
    assert result["beta_vae_train"] == pytest.approx(1.0) and result["beta_vae_eval"] == pytest.approx(1.0)
    assert result["reason"] == ""


def test_sampled_score_is_one_even_with_a_factor_left_out():
    # the known blind spot of the BetaVAE score: with factors 0 and 1 encoded and factor 2 not,
    # fixing k = 0, 1 or 2 gives the mean |z1 - z2| = (0, +), (+, 0) or (+, +): still separable
    result = sampled_beta_vae_score(encoder([0, 1]), SIZES, **SAMPLED)
    assert result["beta_vae_eval"] == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("kind", ["constant", "noise"])
def test_sampled_uninformative_encoders_score_chance(kind):
    represent = encoder(constant=True) if kind == "constant" else encoder(columns=[])
    result = sampled_beta_vae_score(represent, SIZES, **SAMPLED)
    # chance is 1/3 (three factors picked uniformly); 600 eval points: standard error 0.02
    assert result["beta_vae_eval"] == pytest.approx(1 / 3, abs=0.07)


def test_sampled_calls_stay_small_are_seeded_and_accept_a_factor_space():
    from data_pipeline import factor_space

    sizes_seen = []

    def represent(classes):
        sizes_seen.append(len(classes))
        assert classes.min() >= 0 and np.all(classes.max(axis=0) < np.array(space.sizes))
        return classes + 0.5 * np.random.default_rng(len(sizes_seen)).standard_normal(classes.shape)

    space = factor_space("dsprites")
    kwargs = dict(n_train=60, n_eval=30, batch_size=64, random_state=3)
    first = sampled_beta_vae_score(represent, space, **kwargs)
    assert sum(sizes_seen) == 2 * 64 * 90 and max(sizes_seen) <= 8192
    sizes_seen.clear()
    assert sampled_beta_vae_score(represent, space, **kwargs) == first


def test_sampled_bad_input():
    with pytest.raises(ValueError, match="factor_sizes must be a non-empty sequence of integers"):
        sampled_beta_vae_score(encoder(), (3, 0))
    with pytest.raises(ValueError, match="every factor takes a single value"):
        sampled_beta_vae_score(encoder(), (1, 1))
    with pytest.raises(ValueError, match="factor_sizes is needed"):
        sampled_beta_vae_score(encoder(), None)
    with pytest.raises(ValueError, match=r"represent must return codes of shape \(M, n_codes\)"):
        sampled_beta_vae_score(lambda classes: classes[:-1], SIZES, n_train=5, n_eval=5)
    with pytest.raises(ValueError, match="NaN or infinite codes"):
        sampled_beta_vae_score(lambda classes: classes * np.nan, SIZES, n_train=5, n_eval=5)
    with pytest.raises(ValueError, match="differ from the pool's"):
        sampled_beta_vae_score(grid_pool(encoder(), SIZES, 50), (3, 4, 6))
