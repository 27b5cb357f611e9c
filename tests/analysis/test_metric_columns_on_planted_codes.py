"""Issue 14: each metric column of trials.parquet, read by name from the real evaluation path on
planted codes with known answers, and the evaluation points 1, 5, 6, 8 and 9 (transfer factor,
FactorVAE pruning, disentanglement_lib's samples, the model's own likelihood, the diagnosis rule)."""

import importlib

import numpy as np
import planted
import pytest

import analysis.evaluation as evaluation
from analysis.evaluation import EvaluationConfig, evaluate, transfer_factor_of
from analysis.metrics.encoder_decoder_diagnosis import encoder_decoder_diagnosis, fails
from analysis.metrics.factor_vae_score import factor_vae_score
from analysis.schema import TRIALS_SCHEMA
from data_pipeline.in_distribution import training_rows

DISENTANGLEMENT = ("dci", "d_score", "mig", "sap", "modularity_explicitness", "beta_vae", "factor_vae")


@pytest.fixture(scope="module")
def data():
    return planted.dataset(), planted.split()


@pytest.fixture(scope="module")
def scored(data):
    """Every metric on three planted encoders: codes = factors, noise, factors with one duplicated."""
    dataset, split = data
    out = {}
    for name, code, k in [("factors", planted.factors_as_codes, 3), ("noise", planted.noise_codes, 3),
                          ("duplicated", planted.duplicated_first_factor, 4)]:
        regressors = ("gbt", "mlp") if name == "factors" else ("gbt",)
        out[name] = evaluate(planted.PlantedModel(code, k), dataset, split,
                             EvaluationConfig(n_nll=200, n_metric=300, transfer_regressors=regressors))
    return out


@pytest.mark.slow
def test_every_key_is_a_column(scored):
    for metrics in scored.values():
        assert set(metrics) <= set(TRIALS_SCHEMA.names)


@pytest.mark.parametrize("column, planted_at_least, noise_at_most", [
    ("dci_disentanglement", 0.95, 0.1), ("dci_completeness", 0.95, 0.1), ("dci_informativeness", 0.95, 0.4),
    ("d_score", 0.95, 0.8), ("mig", 0.9, 0.1), ("sap", 0.25, 0.1), ("modularity", 0.98, 0.7),
    ("explicitness", 0.95, 0.65), ("beta_vae_score", 0.99, 0.5), ("factor_vae_score", 0.99, 0.5),
])
@pytest.mark.slow
def test_disentanglement_columns_by_name(scored, column, planted_at_least, noise_at_most):
    assert scored["factors"][column] >= planted_at_least
    assert scored["noise"][column] <= noise_at_most


@pytest.mark.slow
def test_a_duplicated_code_moves_mig_and_completeness_but_not_modularity_or_disentanglement(scored):
    factors, duplicated = scored["factors"], scored["duplicated"]
    # factor a's two codes carry the same information: its gap is 0, MIG ≈ 2/3 of the planted one
    assert duplicated["mig"] == pytest.approx(2 / 3 * factors["mig"], abs=0.05)
    assert duplicated["dci_completeness"] < factors["dci_completeness"] - 0.1
    assert duplicated["modularity"] == pytest.approx(1.0, abs=0.01)
    assert duplicated["dci_disentanglement"] == pytest.approx(1.0, abs=0.01)


@pytest.mark.slow
@pytest.mark.parametrize("readout", ["gbt", "mlp"])
def test_transfer_columns_by_name(scored, readout):
    for scenario in ("ood1_a", "ood1_b", "ood1_c", "ood2"):
        column = f"transfer_{readout}_{scenario}"
        # the noise encoder is read out with the GBT only (the MLP on noise costs ~20 s)
        assert scored["factors"][column] < scored["noise"][f"transfer_gbt_{scenario}"] - 0.1, column
        assert 0 <= scored["factors"][column] <= 0.25, column  # MAE on factors in [0, 1]
    assert scored["factors"]["transfer_factor"] == "object_hue"


@pytest.mark.slow
def test_diagnosis_columns_by_name(scored):
    factors, noise = scored["factors"], scored["noise"]
    assert factors["encoder_error_train"] < 0.01 and factors["encoder_error_test"] < 0.01
    assert noise["encoder_error_train"] > 0.2 and noise["encoder_error_test"] > 0.2
    assert factors["encoder_fails"] == 0.0
    assert factors["diagnosis_ratio"] == 1.5 and factors["diagnosis_encoder_margin"] == 0.05
    assert factors["diagnosis_decoder_margin"] == 0.0


# -- point 8: each model is scored with the likelihood it was trained with ----------------------


@pytest.mark.parametrize("likelihood", ["mse", "bernoulli"])
def test_nll_uses_the_training_likelihood(data, likelihood):
    dataset, split = data
    model = planted.PlantedModel(planted.factors_as_codes, 3, likelihood=likelihood, logit=0.7)
    config = EvaluationConfig(n_nll=10_000, n_metric=100, dci_estimator="none")
    metrics = evaluate(model, dataset, split, config)
    # the whole grid trains: its held-back slice (the in-distribution control) is no training image
    train, _, test = training_rows(dataset, split, 0)
    p = 1 / (1 + np.exp(-0.7))
    for rows, key in [(train, "train_nll"), (test, "test_nll")]:
        x = dataset.images[rows].reshape(len(rows), -1) / 255.0
        if likelihood == "mse":  # Gaussian of variance 1/2: squared error + D/2 log π
            expected = ((x - p) ** 2).sum(1) + x.shape[1] / 2 * np.log(np.pi)
        else:
            expected = -(x * np.log(p) + (1 - x) * np.log(1 - p)).sum(1)
        assert metrics[key] == pytest.approx(expected.mean(), rel=1e-5)
    assert metrics["nll_likelihood"] == {"mse": "gaussian", "bernoulli": "bernoulli"}[likelihood]


# -- point 1: the OOD1 factor -------------------------------------------------------------------


def test_transfer_factor_is_the_colour_factor_on_3dshapes():
    from data_pipeline import load_procedural

    space = load_procedural("shapes3d", n_images=10, seed=0).factor_space
    assert space.names[transfer_factor_of(space)] == "object_hue"  # not shape, the fewest classes


def test_transfer_factor_is_validated_against_the_factor_names(data):
    dataset, split = data
    model = planted.PlantedModel(planted.factors_as_codes, 3)
    with pytest.raises(ValueError, match="transfer_factor: .* no factor 'hue'; its factors are a"):
        evaluate(model, dataset, split,
                 EvaluationConfig(n_nll=10, n_metric=50, metrics=("transfer",), transfer_factor="hue"))
    metrics = evaluate(model, dataset, split,
                       EvaluationConfig(n_nll=10, n_metric=100, metrics=("transfer",), transfer_factor="b"))
    assert metrics["transfer_factor"] == "b"


# -- point 5: FactorVAE pruning on the standard deviation -----------------------------------------


def test_factor_vae_keeps_a_code_whose_std_is_at_least_0_05():
    """Codes = 0.15 × the factors' z-scores: variance 0.0225 < 0.05 but std 0.15 ≥ 0.05, so
    disentanglement_lib keeps every code and the score is 1 (pruning on the variance gave 0)."""
    classes = np.stack(np.unravel_index(np.arange(120), (5, 4, 6)), axis=1)
    codes = 0.15 * (classes - classes.mean(0)) / classes.std(0)
    result = factor_vae_score(codes, classes, n_train=200, n_eval=100, n_variance=120)
    assert result["n_active_codes"] == 3 and result["factor_vae_eval"] == 1.0
    tiny = factor_vae_score(0.04 * codes / 0.15, classes, n_train=50, n_eval=20, n_variance=120)
    assert tiny["n_active_codes"] == 0  # std 0.04 < 0.05


# -- point 6: disentanglement_lib's samples, on training images only ----------------------------


def test_disentanglement_metrics_read_training_images_in_independent_draws(data, monkeypatch):
    dataset, split = data
    train, _ = split.train_test_indices(dataset.classes, dataset.factor_space)
    encoded, dci_calls = [], []
    dci_module = importlib.import_module("analysis.metrics.dci")  # the package's `dci` is the function
    real_encode, real_dci = evaluation.encode_means, dci_module.dci

    def recording_encode(model, images, indices, *args, **kwargs):
        encoded.append((images is dataset.images, np.asarray(indices)))
        return real_encode(model, images, indices, *args, **kwargs)

    def recording_dci(codes, factors, **kwargs):
        test = kwargs.get("codes_test")
        dci_calls.append((len(codes), None if test is None else len(test)))
        return real_dci(codes, factors, **kwargs)

    monkeypatch.setattr(evaluation, "encode_means", recording_encode)
    monkeypatch.setattr(dci_module, "dci", recording_dci)
    model = planted.PlantedModel(planted.factors_as_codes, 3)
    metrics = evaluate(model, dataset, split,
                       EvaluationConfig(n_nll=10, n_metric=200, metrics=DISENTANGLEMENT))
    # every image the metrics encoded is a training image of the dataset (no rendered grid point,
    # no held-out image)
    assert all(own for own, _ in encoded)
    assert set(np.concatenate([rows for _, rows in encoded])) <= set(train)
    # DCI: 200 to fit and an independent draw of 100 to test, as disentanglement_lib's 10,000 / 5,000
    assert dci_calls[0] == (200, 100)
    assert [len(rows) for _, rows in encoded[:2]] == [200, 100]
    assert not np.array_equal(encoded[0][1][:100], encoded[1][1])
    assert metrics["metric_n_train"] == 200 and metrics["metric_n_test"] == 100
    assert (metrics["score_batch_size"], metrics["score_n_train"], metrics["score_n_eval"],
            metrics["score_n_variance"], metrics["score_pool_size"]) == (64, 200, 100, 200, 800)
    assert metrics["score_sample"].startswith("training images (not a full factorial grid")


def test_fresh_score_draws_need_no_pool_and_say_so(data):
    dataset, _ = data

    class Everything:  # every image trains (a split never leaves its test side empty; a stub does)
        name, test_when = "everything", {}

        def train_test_indices(self, classes, space):
            return np.arange(len(classes)), np.arange(1)

        def test_grid_indices(self, space):  # the held-out sample's pool: the grid's first point, row 0
            return np.arange(1)

        def train_mask(self, classes, space):
            return np.ones(len(classes), bool)

    everything = Everything()
    model = planted.PlantedModel(planted.factors_as_codes, 3)
    metrics = evaluate(model, dataset, everything,
                       EvaluationConfig(n_nll=10, n_metric=100, n_grid=0, metrics=("beta_vae", "factor_vae")))
    assert metrics["score_pool_size"] == 0
    assert metrics["score_sample"] == "training images (a full factorial grid)"
    assert metrics["beta_vae_score"] == 1.0 and metrics["factor_vae_score"] == 1.0


# -- point 9: the encoder/decoder verdict is one formula with its parameters --------------------


@pytest.mark.parametrize("train, test, ratio, margin, expected", [
    (1.0, 1.49, 1.5, 0.0, 0.0), (1.0, 1.51, 1.5, 0.0, 1.0),
    (0.1, 0.2, 1.5, 0.05, 0.0), (0.1, 0.201, 1.5, 0.05, 1.0),
    (100.0, 103.0, 1.0, 5.0, 0.0), (100.0, 106.0, 1.0, 5.0, 1.0),
])
def test_fails_is_test_above_ratio_times_train_plus_margin(train, test, ratio, margin, expected):
    assert fails(train, test, ratio, margin) == expected


def test_every_parameter_of_the_rule_changes_the_verdict():
    rng = np.random.default_rng(0)
    factors = rng.integers(0, 5, (200, 2)).astype(float)
    codes = factors + 0.05 * rng.standard_normal(factors.shape)
    factors_test = rng.integers(0, 5, (50, 2)).astype(float)
    codes_test = factors_test + 0.2 * rng.standard_normal(factors_test.shape)  # a worse encoder
    images = rng.integers(0, 2, (200, 1, 2, 2)).astype(np.uint8) * 255
    images_test = rng.integers(0, 2, (50, 1, 2, 2)).astype(np.uint8) * 255

    def decode(z):
        return np.full((len(z), 1, 2, 2), 0.5)

    def verdict(**rule):
        return encoder_decoder_diagnosis(codes, factors, codes_test, factors_test, decode=decode,
                                         images=images, images_test=images_test, **rule)

    base = verdict(ratio=1.5, encoder_margin=0.0, decoder_margin=0.0)
    assert base["encoder_fails"] == 1.0 and base["decoder_fails"] == 0.0  # constant decoder: same NLL
    assert verdict(ratio=1.5, encoder_margin=1.0, decoder_margin=0.0)["encoder_fails"] == 0.0
    assert verdict(ratio=100.0, encoder_margin=0.0, decoder_margin=0.0)["encoder_fails"] == 0.0
    assert verdict(ratio=0.5, encoder_margin=0.0, decoder_margin=0.0)["decoder_fails"] == 1.0
    assert verdict(ratio=0.5, encoder_margin=0.0, decoder_margin=1e6)["decoder_fails"] == 0.0
