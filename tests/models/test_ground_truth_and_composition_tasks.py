"""The ground-truth decoder and composition tasks: training, exact resume, held-out hygiene and
evaluation (models.tasks, models.ground_truth, models.composition, analysis.evaluation, analysis.task_nll)."""

import dataclasses
import io
import itertools
import json
import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from analysis.evaluation import EvaluationConfig, evaluate
from data_pipeline.datasets import GroundTruthDataset, as_channels_first
from data_pipeline.in_distribution import training_rows
from data_pipeline.spaces import SIMPLE_NAMES, sprite_space
from data_pipeline.splits.rules import Split
from data_pipeline.sprites import render_simple
from models import (
    CompositionNet,
    CompositionTrainer,
    GroundTruthDecoder,
    GroundTruthDecoderTrainer,
    ModelConfig,
    NonFiniteLossError,
    Trainer,
    TripletSampler,
    build_trainer,
)

# Simple (posX, posY, shape) on a 6 × 6 × 3 grid: 108 images; the split holds out circles
# (shape 1) on the right half: 18 images, which are made all black so that an NLL on them is
# recognisable.
SPACE = sprite_space(SIMPLE_NAMES, (6, 6, 3))
CLASSES = SPACE.all_classes()
SPLIT = Split(name="circle_right", dataset="simple", condition="recombination_to_range",
              test_when={"shape": (1,), "posX": (3, 4, 5)})
# the rows a trial trains on: the whole grid holds back its in-distribution control (about 2% of the
# training combinations, data_pipeline.in_distribution), as every trial and evaluation does
TRAIN, HELD_BACK, TEST = training_rows(SimpleNamespace(classes=CLASSES, factor_space=SPACE, observe=None),
                                       SPLIT, 0)


@pytest.fixture(scope="module")
def data():
    images = as_channels_first(render_simple(CLASSES, SPACE))
    images[TEST] = 0
    return GroundTruthDataset("simple", images, CLASSES, SPACE)


CONFIGS = {
    # M21 used the higgins MLP decoder; burgess's costs a third as much per step here
    "ground_truth_decoder": ModelConfig(task="ground_truth_decoder", architecture="burgess", lr=1e-3,
                                        batch_size=16, steps=40, normalise_factors=True),
    "composition": ModelConfig(task="composition", latent_dim=6, lr=1e-3, batch_size=16, steps=40),
}


def _trainer(data, task, **changes):
    config = ModelConfig(**{**CONFIGS[task].to_dict(), **changes})
    return build_trainer(config, data.images, data.classes, data.factor_space, TRAIN, device="cpu")


def _copy(state):
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def trained(data):
    """Each task trained for 40 steps without interruption: the trainer, its reports, and a copy
    of its checkpoint taken at step 20 in the middle of the run."""
    out = {}
    for task in CONFIGS:
        trainer = _trainer(data, task)
        reports, middle = [], None
        for report in trainer.run(report_every=10):
            reports.append(report)
            if report["step"] == 20:
                middle = _copy(trainer.state_dict())
        out[task] = (trainer, reports, middle)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("task", list(CONFIGS))
def test_loss_falls_within_a_few_dozen_steps(trained, task):
    trainer, reports, _ = trained[task]
    assert [r["step"] for r in reports] == [10, 20, 30, 40] and trainer.step == trainer.total_steps == 40
    assert reports[-1]["loss"] < 0.5 * reports[0]["loss"]
    assert reports[-1]["reconstruction"] < 0.5 * reports[0]["reconstruction"]
    assert all(r["images_per_second"] > 0 for r in reports)
    if task == "composition":
        assert "kl" in reports[0] and isinstance(trainer, CompositionTrainer)
    else:
        assert isinstance(trainer, GroundTruthDecoderTrainer)
        assert isinstance(trainer.model, GroundTruthDecoder)


@pytest.mark.parametrize("task", list(CONFIGS))
def test_resume_follows_the_same_trajectory(data, trained, task):
    whole, reports, middle = trained[task]
    resumed = _trainer(data, task)
    resumed.load_state_dict(middle)
    assert resumed.step == 20
    later = list(resumed.run(report_every=10))
    assert [r["loss"] for r in later] == [r["loss"] for r in reports[2:]]
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_a_training_triplet_never_holds_a_held_out_image(data):
    trainer = _trainer(data, "composition", steps=6, batch_size=64)
    seen = []
    fetch = trainer.batch_images
    trainer.batch_images = lambda rows: seen.append(rows.host) or fetch(rows)
    list(trainer.run(report_every=6))
    seen = np.concatenate(seen)
    assert len(seen) == 6 * 3 * 64 and np.isin(seen, TRAIN).all()
    # the triplets themselves: the target is the reference with the action's factor from the transform
    sampler = TripletSampler(CLASSES, TRAIN)
    reference, transform, target, action = sampler.sample(np.random.default_rng(0), 4000)
    expected = CLASSES[reference].copy()
    expected[np.arange(4000), action] = CLASSES[transform, action]
    assert np.array_equal(CLASSES[target], expected)
    assert np.isin(np.concatenate([reference, transform, target]), TRAIN).all()
    assert set(action.tolist()) == {0, 1, 2}
    # onto held-out targets: the same relation, every target served
    reference, transform, target, action = TripletSampler(CLASSES, np.arange(len(CLASSES))).sample_onto(
        np.repeat(TEST, 20), np.random.default_rng(1))
    assert len(target) == 20 * len(TEST) and np.isin(target, TEST).all()
    composed = CLASSES[reference].copy()
    composed[np.arange(len(target)), action] = CLASSES[transform, action]
    assert np.array_equal(composed, CLASSES[target])


def test_triplets_need_a_grid_and_say_so():
    diagonal = np.array([[0, 0], [1, 1], [2, 2], [3, 3]])  # no two rows differ in one factor only
    with pytest.raises(ValueError, match="full factor grid"):
        TripletSampler(diagonal, np.arange(4))
    # one pair differs in factor 1 only: that is the only action, and all else is redrawn
    sampler = TripletSampler(np.vstack([diagonal, [[0, 5]]]), np.arange(5))
    assert sampler.actions.tolist() == [1]
    # a constant factor is never an action
    assert TripletSampler(np.c_[np.zeros(len(CLASSES), int), CLASSES], TRAIN).actions.tolist() == [1, 2, 3]


def _bernoulli_nll(logits, x):
    """Independent numpy Bernoulli NLL per image, summed over pixels."""
    logits, x = logits.astype(np.float64), x.astype(np.float64)
    return (np.logaddexp(0, logits) - x * logits).reshape(len(x), -1).sum(1)


def test_ground_truth_decoder_evaluation_reads_held_out_rows(data, trained):
    trainer, _, _ = trained["ground_truth_decoder"]
    metrics = evaluate(trainer, data, SPLIT, EvaluationConfig(n_nll=1000), seed=0)
    assert metrics["n_train_images"] == len(TRAIN) and metrics["n_test_images"] == len(TEST)
    values = SPACE.raw_values(CLASSES)
    with torch.no_grad():
        logits = trainer.model(torch.as_tensor(values, dtype=torch.float32)).numpy()
    x = data.images.astype(np.float64) / 255
    assert metrics["train_nll"] == pytest.approx(_bernoulli_nll(logits[TRAIN], x[TRAIN]).mean(), rel=1e-5)
    # the in-distribution control: the held-back training rows, which the decoder never trained on
    assert len(HELD_BACK) and metrics["in_distribution_nll_images"] == len(HELD_BACK)
    assert metrics["in_distribution_nll"] == pytest.approx(
        _bernoulli_nll(logits[HELD_BACK], x[HELD_BACK]).mean(), rel=1e-5)
    # the held-out images are black: their NLL is Σ softplus(logit), which no training image has
    black = np.logaddexp(0, logits[TEST].astype(np.float64)).reshape(len(TEST), -1).sum(1).mean()
    assert metrics["test_nll"] == pytest.approx(black, rel=1e-5)
    assert np.isfinite(metrics["train_nll"]) and metrics["train_nll"] != pytest.approx(metrics["test_nll"])
    # the code is the factors: no disentanglement metric; the budget bounds and seeds the sample
    assert np.isnan(metrics["d_score"]) and np.isnan(metrics["dci_disentanglement"])
    five = EvaluationConfig(n_nll=5)
    small = evaluate(trainer.model, data, SPLIT, five, seed=3)
    assert small["train_nll"] == evaluate(trainer.model, data, SPLIT, five, seed=3)["train_nll"]
    assert small["train_nll"] != evaluate(trainer.model, data, SPLIT, five, seed=4)["train_nll"]


def test_composition_evaluation_scores_held_out_targets(data, trained):
    trainer, _, _ = trained["composition"]
    metrics = evaluate(trainer, data, SPLIT, EvaluationConfig(n_nll=200), seed=0)
    assert np.isfinite(metrics["train_nll"]) and np.isfinite(metrics["test_nll"])
    assert np.isfinite(metrics["in_distribution_nll"])
    assert metrics["in_distribution_nll_images"] == len(HELD_BACK)
    # a decoder that ignores its code and says logit b for every pixel: an all-black target costs
    # exactly P·softplus(b); a training target with k pixels on costs k·softplus(-b) + (P-k)·softplus(b)
    net = CompositionNet(CONFIGS["composition"].network, n_actions=3)
    last = [m for m in net.decoder.modules() if isinstance(m, (torch.nn.ConvTranspose2d, torch.nn.Conv2d,
                                                                torch.nn.Linear))][-1]
    b = -3.0
    with torch.no_grad():
        last.weight.zero_()
        last.bias.fill_(b)
    constant = evaluate(net, data, SPLIT, EvaluationConfig(n_nll=200), seed=0)
    pixels = 64 * 64
    assert constant["test_nll"] == pytest.approx(pixels * np.logaddexp(0, b), rel=1e-5)
    on = (data.images[TRAIN] > 0).reshape(len(TRAIN), -1).sum(1)
    per_image = on * np.logaddexp(0, -b) + (pixels - on) * np.logaddexp(0, b)
    assert per_image.min() - 1e-3 <= constant["train_nll"] <= per_image.max() + 1e-3
    assert constant["train_nll"] > constant["test_nll"] + 10
    # the held-back targets cost what their pixels say, as a training target's do
    on = (data.images[HELD_BACK] > 0).reshape(len(HELD_BACK), -1).sum(1)
    held_back = on * np.logaddexp(0, -b) + (pixels - on) * np.logaddexp(0, b)
    assert constant["in_distribution_nll"] == pytest.approx(held_back.mean(), rel=1e-5)


def test_composition_codes_are_scored_as_m22s_analysis_reads_them(data, trained):
    """M22's analysis scores a trained CompositionNet's encoder and decoder as an autoencoder: the
    row carries that autoencoder's metrics, readout and encoder snap counts (what M22's finding reads),
    beside the composition task's own NLLs and rendering judge."""
    trainer, _, _ = trained["composition"]
    config = EvaluationConfig(n_nll=50, n_metric=60, metrics=("d_score", "encoder_decoder"))
    row = evaluate(trainer, data, SPLIT, config, seed=0)
    codes = evaluate(trainer.model.autoencoder(), data, SPLIT, config, seed=0)
    for column in ("d_score", "encoder_nearer_truth", "encoder_nearer_snap", "encoder_snap_images",
                   "encoder_error_test"):
        assert np.isfinite(row[column]) and row[column] == codes[column], column
    readouts = [c for c in codes if c.startswith(("accuracy_", "r2_"))]
    assert readouts and all(row[c] == codes[c] or np.isnan(codes[c]) for c in readouts)
    # the NLLs stay the composition task's: the predicted target, not the autoencoder's reconstruction
    assert row["test_nll"] != codes["test_nll"]
    assert row["test_nll"] == evaluate(trainer, data, SPLIT, EvaluationConfig(n_nll=50), seed=0)["test_nll"]


def _subset_of_the_grid(data):
    """The training images and just 2 of the 18 held-out ones, with an ``observe`` that indexes the
    whole grid (``data`` holds it in flat-index order), as a subset of a whole-grid file has."""
    whole = dataclasses.replace(data, observe=lambda classes: data.images[SPACE.index_of(classes)])
    return whole.subset(np.sort(np.concatenate([TRAIN, TEST[:2]])), observe=True)


def test_ground_truth_decoder_test_nll_reads_the_grids_held_out_images(data, trained, caplog):
    trainer, _, _ = trained["ground_truth_decoder"]
    subset = _subset_of_the_grid(data)
    with caplog.at_level(logging.WARNING, logger="analysis.evaluation"):
        metrics = evaluate(trainer, subset, SPLIT, EvaluationConfig(n_nll=1000), seed=0)
    assert "split circle_right on simple has 18 held-out combinations" in caplog.text
    # all 18 held-out combinations of the grid, not the subset's 2: each black, so Σ softplus(logit)
    assert metrics["test_nll_images"] == metrics["n_test_images"] == len(TEST) == 18
    with torch.no_grad():
        logits = trainer.model(torch.as_tensor(SPACE.raw_values(CLASSES), dtype=torch.float32)).numpy()
    black = np.logaddexp(0, logits[TEST].astype(np.float64)).reshape(len(TEST), -1).sum(1)
    assert metrics["test_nll"] == pytest.approx(black.mean(), rel=1e-5)
    assert metrics["test_nll"] != pytest.approx(black[:2].mean(), rel=1e-3)
    # n_nll below the pool: that many, drawn without replacement
    five = evaluate(trainer, subset, SPLIT, EvaluationConfig(n_nll=5), seed=0)
    assert five["test_nll_images"] == 5 and five["n_test_images"] == 18
    assert any(five["test_nll"] == pytest.approx(black[list(chosen)].mean(), rel=1e-5)
               for chosen in itertools.combinations(range(18), 5))


def test_composition_test_targets_are_the_grids_held_out_images(data):
    # a decoder that ignores its code and says logit b for every pixel: each black target costs
    # exactly P·softplus(b); reference and transform are rows of the subset
    net = CompositionNet(CONFIGS["composition"].network, n_actions=3)
    last = [m for m in net.decoder.modules() if isinstance(m, (torch.nn.ConvTranspose2d, torch.nn.Conv2d,
                                                                torch.nn.Linear))][-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.fill_(-3.0)
    metrics = evaluate(net, _subset_of_the_grid(data), SPLIT, EvaluationConfig(n_nll=200), seed=0)
    assert metrics["test_nll_images"] == metrics["n_test_images"] == 18  # every held-out target composed
    assert metrics["test_nll"] == pytest.approx(64 * 64 * np.logaddexp(0, -3.0), rel=1e-5)


def test_evaluate_takes_a_trainer_or_its_model_and_gives_every_task_the_same_keys(data):
    config = ModelConfig(latent_dim=4, steps=1, batch_size=4)
    vae = build_trainer(config, data.images, data.classes, data.factor_space, TRAIN, device="cpu")
    assert type(vae) is Trainer
    config = EvaluationConfig(n_nll=10, n_metric=100, dci_estimator="none")
    expected = evaluate(vae.model, data, SPLIT, config)
    got = evaluate(vae, data, SPLIT, config)
    assert got == pytest.approx(expected, nan_ok=True)
    for task in CONFIGS:
        trainer = _trainer(data, task)
        row = evaluate(trainer.model, data, SPLIT, EvaluationConfig(n_nll=10))
        assert set(row) == set(expected)
        assert evaluate(trainer, data, SPLIT, EvaluationConfig(n_nll=10)) == pytest.approx(row, nan_ok=True)


def test_task_settings_are_checked_and_named():
    with pytest.raises(ValueError, match="task: unknown 'decoder'"):
        ModelConfig(task="decoder")
    with pytest.raises(ValueError, match="latent_op: unknown 'sum'"):
        ModelConfig(task="composition", latent_op="sum")
    with pytest.raises(ValueError, match="objective: task 'composition'"):
        ModelConfig(task="composition", objective="factor_vae")
    with pytest.raises(ValueError, match="input_noise_subpixel_std: only task 'vae'"):
        ModelConfig(task="ground_truth_decoder", input_noise_subpixel_std=0.1)
    assert ModelConfig(task="gt_decoder").task == "ground_truth_decoder"
    # the VAE engine refuses the other tasks rather than train a VAE in their place
    with pytest.raises(ValueError, match="task: Trainer trains VAEs"):
        Trainer(torch.nn.Linear(1, 1), np.zeros((4, 1, 64, 64), np.uint8), np.arange(4),
                ModelConfig(task="composition"), "cpu")
    assert not ModelConfig(task="composition", objective="vae").needs_pairs


@pytest.mark.parametrize("latent_op", ["linear", "interpolation", "fixed_interpolation", "mlp"])
def test_config_builds_each_latent_op_and_the_factor_scaling(data, latent_op):
    trainer = _trainer(data, "composition", latent_op=latent_op, steps=1)
    assert trainer.model.latent_op == latent_op and trainer.model.n_actions == 3
    decoder = _trainer(data, "ground_truth_decoder").model
    values = SPACE.raw_values(CLASSES)[TRAIN]
    assert decoder.normalise and torch.allclose(decoder.low, torch.tensor(values.min(0), dtype=torch.float32))
    raw = _trainer(data, "ground_truth_decoder", normalise_factors=False).model
    f = torch.tensor([[0.2, 0.4, 2.0]])
    assert torch.equal(raw.inputs(f), f)
    assert torch.allclose(decoder.inputs(f), torch.tensor([[0.2, 0.4, 1.0]]))


@pytest.mark.slow
def test_m22s_composition_net_trains_through_the_trainer(data):
    """M22's settings end to end: WAE-MMD (M22's code's estimator and prior), all three images
    reconstructed, the fixed-interpolation op and the spatial broadcast decoder: the trainer reports
    WAE-MMD's terms and the loss is finite."""
    trainer = _trainer(data, "composition", objective="wae_mmd", latent_op="fixed_interpolation",
                       composition_loss="all_three", decoder="sbd3", mmd_estimator="m22_code", prior_std=2.0,
                       batch_size=4, steps=2)
    reports = list(trainer.run(until_step=2, report_every=1))
    assert {"mmd", "logvar_l1", "reconstruction", "kl"} <= set(reports[-1])
    assert all(np.isfinite(r["loss"]) for r in reports)


def test_a_non_finite_loss_names_the_step_and_term(data):
    trainer = _trainer(data, "ground_truth_decoder", steps=3)
    trainer.values[:] = float("nan")
    with pytest.raises(NonFiniteLossError, match="step 1: loss term loss, reconstruction is not finite"):
        list(trainer.run(report_every=3))


class _OracleDecoder(GroundTruthDecoder):
    """A ground-truth decoder that renders its input's grid point exactly (logits ±20), or, with
    ``ignore``, renders that factor's first value whatever it is given."""

    def __init__(self, ignore=None):
        super().__init__(SPACE.n_factors, architecture="burgess")
        self.ignore = ignore

    def forward(self, factors):
        classes = np.stack([np.abs(SPACE.values[j][None, :] - factors[:, j, None].numpy()).argmin(1)
                            for j in range(SPACE.n_factors)], axis=1)
        if self.ignore is not None:
            classes[:, SPACE.position(self.ignore)] = 0
        images = as_channels_first(render_simple(classes, SPACE)).astype(np.float32) / 255
        return torch.as_tensor(40 * images - 20)


def test_ground_truth_decoder_readout_asks_whether_it_renders_each_factor(data):
    from analysis.evaluation import DECODER_READOUT_IMAGES
    from analysis.task_nll import decoder_readout_scores

    rows = np.sort(np.random.default_rng(0).choice(TRAIN, 60, replace=False))
    perfect = decoder_readout_scores(_OracleDecoder(), data, TRAIN, rows)
    assert {name: e["score"] for name, e in perfect.items()} == {"shape": 1.0, "posX": 1.0, "posY": 1.0}
    assert perfect["shape"]["chance"] == 1 / 3
    # a decoder that draws every shape as a square has not learned shape: ties go to the first value,
    # so it reads at the share of squares, about chance; posX is still rendered
    blind = decoder_readout_scores(_OracleDecoder(ignore="shape"), data, TRAIN, rows)
    assert blind["shape"]["score"] < 0.5 and blind["posX"]["score"] == 1.0
    # the trained decoder's row carries its readout, on at most DECODER_READOUT_IMAGES training images
    metrics = evaluate(_OracleDecoder(), data, SPLIT, EvaluationConfig(n_nll=50))
    assert metrics["readout_estimator"] == "decoder_likelihood" and metrics["accuracy_shape"] == 1.0
    assert metrics["r2_posX"] == 1.0 and metrics["chance_shape"] == 1 / 3
    assert metrics["readout_n_test"] == min(len(TRAIN), DECODER_READOUT_IMAGES)


@pytest.mark.slow  # about 5 s for the decoder: three evaluations, each with its likelihood readout
@pytest.mark.parametrize("task", ["ground_truth_decoder", "composition"])
def test_the_rendering_judge_reads_each_tasks_renderings_where_asked(data, trained, task):
    """The judge reads the decoder's rendering of the true factor values, and the composition
    network's prediction of each target; NaN where the dataset cannot render grid points."""
    trainer, _, _ = trained[task]
    subset = _subset_of_the_grid(data)
    config = EvaluationConfig(n_nll=10, metrics=("rendering_judge",))
    metrics = evaluate(trainer, subset, SPLIT, config, seed=0)
    assert 0 < metrics["judge_images"] <= len(TEST)
    assert task == "composition" or metrics["judge_images"] == len(TEST)
    for column in ("judge_accuracy_ground_truth", "judge_accuracy_test", "judge_substitution_share",
                   "judge_accuracy_in_distribution"):
        assert 0.0 <= metrics[column] <= 1.0
    assert set(json.loads(metrics["rendering_judge"])) == {"shape", "posX"}
    # without observe nothing renders the templates: NaN, and the NLLs as before
    blind = evaluate(trainer, data, SPLIT, config, seed=0)
    assert np.isnan(blind["judge_accuracy_test"]) and blind["judge_images"] is None
    assert evaluate(trainer, data, SPLIT, EvaluationConfig(n_nll=10), seed=0)["test_nll"] == blind["test_nll"]
