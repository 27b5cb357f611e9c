import numpy as np
import pytest

from analysis.evaluation import EvaluationConfig, evaluate
from data_pipeline import get_split, load_procedural
from models import ModelConfig, Trainer, build, reconstruct

pytestmark = pytest.mark.slow  # trains a model and runs every metric: about 20 s


@pytest.fixture(scope="module")
def trained():
    data = load_procedural("dsprites", n_images=1500, seed=0)
    split = get_split("dsprites", "blank_side")
    train_rows, _ = split.train_test_indices(data.classes, data.factor_space)
    config = ModelConfig(steps=30, lr=1e-3, batch_size=32)
    trainer = Trainer(build(config), data.images, train_rows, config, "cpu")
    list(trainer.run(report_every=30))
    return trainer.model, data, split


def _numpy_nll(model, images):
    x = images.astype(np.float64) / 255
    p = np.clip(reconstruct(model, images).astype(np.float64), 1e-12, 1 - 1e-12)
    return -(x * np.log(p) + (1 - x) * np.log(1 - p)).sum(axis=(1, 2, 3)).mean()


def test_nll_matches_an_independent_numpy_computation(trained):
    import dataclasses

    model, data, split = trained
    rendered = []

    def observe(classes):
        rendered.append(np.asarray(classes))
        return data.observe(classes)

    recording = dataclasses.replace(data, observe=observe)
    config = EvaluationConfig(n_nll=2000, n_metric=100, dci_estimator="none")
    metrics = evaluate(model, recording, split, config)
    train_rows, test_rows = split.train_test_indices(data.classes, data.factor_space)
    assert metrics["n_train_images"] == len(train_rows) < 2000
    assert metrics["train_nll"] == pytest.approx(_numpy_nll(model, data.images[train_rows]), rel=1e-3)
    # the held-out images: 2,000 of the whole grid's posX > 0.5 (3 shapes × 6 scales × 40 orientations ×
    # 16 posX × 32 posY), rendered, though the 1,500 images hold only len(test_rows) of them
    posX = data.factor_space.position("posX")
    held = np.concatenate([r for r in rendered if (r[:, posX] >= 16).all()])
    assert metrics["n_test_images"] == 3 * 6 * 40 * 16 * 32 and len(test_rows) < 2000
    assert metrics["test_nll_images"] == len(held) == len(np.unique(held, axis=0)) == 2000
    assert (held[:, data.factor_space.position("posX")] >= 16).all()
    assert metrics["test_nll"] == pytest.approx(_numpy_nll(model, data.observe(held)), rel=1e-3)
    # the in-distribution control: 2,000 grid points of the training part (posX <= 0.5) that the
    # 1,500 images do not hold, rendered
    (inside,) = [r for r in rendered if (r[:, posX] < 16).all()]
    assert metrics["in_distribution_nll_images"] == len(inside) == len(np.unique(inside, axis=0)) == 2000
    assert not {tuple(c) for c in inside} & {tuple(c) for c in data.classes}
    assert metrics["in_distribution_nll"] == pytest.approx(_numpy_nll(model, data.observe(inside)), rel=1e-3)


def test_disentanglement_scores_are_in_range_and_budgets_bound_the_work(trained):
    model, data, split = trained
    config = EvaluationConfig(n_nll=50, n_metric=150, metrics=("dci", "d_score"))
    metrics = evaluate(model, data, split, config, seed=3)
    for key in ["dci_disentanglement", "dci_completeness", "dci_informativeness", "d_score"]:
        assert 0.0 <= metrics[key] <= 1.0, key
    # the NLL budget draws the same seeded sample each time, and a different one for another seed
    cheap = EvaluationConfig(n_nll=50, n_metric=100, dci_estimator="none")
    assert evaluate(model, data, split, cheap, seed=3)["train_nll"] == metrics["train_nll"]
    assert evaluate(model, data, split, cheap, seed=4)["train_nll"] != metrics["train_nll"]


def test_every_metric_is_computed_and_in_range(trained):
    model, data, split = trained
    # the GBT DCI is tested above; leaving it out here saves ~10 s
    from analysis.evaluation import METRICS
    config = EvaluationConfig(n_nll=50, n_metric=150, metrics=[m for m in METRICS if m != "dci"])
    metrics = evaluate(model, data, split, config, seed=1)
    for key in ["mig", "sap", "modularity", "explicitness", "transfer_gbt_ood1_a", "transfer_gbt_ood1_b",
                "transfer_gbt_ood1_c", "transfer_gbt_ood2", "encoder_error_train", "encoder_error_test"]:
        assert 0.0 <= metrics[key] <= 1.0, key
    assert metrics["decoder_nll_train"] > 0 and metrics["decoder_nll_test"] > 0
    # sampled on the full grid through dataset.observe, so defined on a random subset too
    for key in ["beta_vae_score", "factor_vae_score"]:
        assert 0.0 <= metrics[key] <= 1.0, key
    assert np.isnan(metrics["transfer_mlp_ood2"])  # the MLP readout is opt-in
    assert all(isinstance(v, (int, float, str)) for v in metrics.values())
    # every key is a column of the results schema, so a sweep can store it
    from analysis.schema import TRIALS_SCHEMA
    assert set(metrics) <= set(TRIALS_SCHEMA.names)


def test_metrics_can_be_chosen(trained):
    model, data, split = trained
    metrics = evaluate(model, data, split, EvaluationConfig(n_nll=20, n_metric=100, metrics=("mig",)))
    assert 0.0 <= metrics["mig"] <= 1.0 and np.isnan(metrics["dci_disentanglement"])
    with pytest.raises(ValueError, match="metrics: unknown 'nope'; choose from d_score, dci, mig"):
        evaluate(model, data, split, EvaluationConfig(metrics=("nope",)))


def test_grid_sampling_renders_points_outside_the_dataset_and_the_training_default_does_not(trained):
    import dataclasses

    model, data, split = trained
    rendered = []

    def observe(classes):
        rendered.append(np.asarray(classes))
        return data.observe(classes)

    recording = dataclasses.replace(data, observe=observe)
    scores = ("beta_vae", "factor_vae")
    grid = evaluate(model, recording, split,
                    EvaluationConfig(n_nll=20, n_metric=120, metrics=scores, score_sampling="grid"), seed=2)
    assert grid["score_sample"].startswith("full grid") and grid["score_pool_size"] == 480
    # the pool is drawn from the whole grid, not from the 1,500 images the dataset holds
    held = {tuple(row) for row in data.classes}
    assert sum(tuple(row) not in held for row in np.concatenate(rendered)) > 400
    rendered.clear()
    evaluate(model, recording, split, EvaluationConfig(n_nll=20, n_metric=120, metrics=scores), seed=2)
    # the default reads the training images: what it renders is the held-out sample of test_nll and
    # the in-distribution control's sample (training combinations outside the dataset) only
    posX = data.factor_space.position("posX")
    (held,) = [r for r in rendered if (r[:, posX] >= 16).all()]
    (inside,) = [r for r in rendered if (r[:, posX] < 16).all()]
    assert len(rendered) == 2 and len(held) == 20 and (held[:, posX] >= 16).all()
    assert len(inside) == 20 and (inside[:, posX] < 16).all()


def test_without_observe_the_scores_read_the_training_images_and_grid_sampling_is_refused(trained):
    import dataclasses

    model, data, split = trained
    no_renderer = dataclasses.replace(data, observe=None)
    scores = ("beta_vae", "factor_vae")
    metrics = evaluate(model, no_renderer, split, EvaluationConfig(n_nll=20, n_metric=100, metrics=scores))
    assert 0 <= metrics["beta_vae_score"] <= 1 and 0 <= metrics["factor_vae_score"] <= 1
    assert "not a full factorial grid" in metrics["score_sample"]
    with pytest.raises(ValueError, match="score_sampling: 'grid'.*observe"):
        evaluate(model, no_renderer, split,
                 EvaluationConfig(n_nll=20, n_metric=100, metrics=("beta_vae",), score_sampling="grid"))
