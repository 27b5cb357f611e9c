"""mpcnn, WAE-GAN, CascadeVAE and LieGroupVAE: closed forms, configs, resume, evaluation hooks.

(That each objective lowers its loss on a tiny dataset is tests/models/test_vae_training_and_evaluation.py's
test_every_objective_lowers_its_loss_on_a_tiny_dataset, which covers every registered objective.)
"""

import itertools
import math

import numpy as np
import pytest
import torch

from models import ModelConfig, Trainer, build, encode_means, nll_per_image, reconstruct
from models.architectures import parameter_count
from models.cascade_vae import CascadeVAE, cascade_betas, match_categories, released_dimensions
from models.inference import decode_probabilities
from models.lie_group_vae import (
    LieGroupVAE,
    commutator_penalty,
    exponential_map,
    hessian_penalty,
)
from models.objectives import Schedule, bernoulli_nll, gaussian_kl
from models.registry import LOSS_TERMS, OBJECTIVES, build_objective
from models.wae_gan import adversarial_penalty, adversary_loss

M22_OBJECTIVES = ["wae_gan", "cascade_vae", "lie_group_vae"]
SMALL = {"wae_gan": {"adversary_width": 32}, "cascade_vae": {"latent_dim": 6},
         "lie_group_vae": {"lie_matrix_size": 4}}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def blobs(n=32, seed=0):
    """A 12×12 square at one of 4×4 positions in a 64×64 image."""
    rng = np.random.default_rng(seed)
    images = np.zeros((n, 1, 64, 64), np.uint8)
    for i, (x, y) in enumerate(rng.integers(0, 4, size=(n, 2)) * 12 + 4):
        images[i, :, y : y + 12, x : x + 12] = 255
    return images


# ---------------------------------------------------------------------------------------------
# mpcnn


def test_mpcnn_takes_1_or_3_channels_both_sizes_and_pools_once():
    for channels, size, latent in [(1, 64, 3), (3, 128, 12)]:
        config = ModelConfig(architecture="mpcnn", channels=channels, image_size=size, latent_dim=latent)
        model = build(config)
        x = torch.rand(2, channels, size, size)
        mean, logvar = model.encode(x)
        assert mean.shape == logvar.shape == (2, latent)
        assert model.decode(mean).shape == x.shape
    model = build(ModelConfig(architecture="mpcnn"))
    convs = [m for m in model.encoder.conv if isinstance(m, torch.nn.Conv2d)]
    pools = [m for m in model.encoder.conv if isinstance(m, torch.nn.MaxPool2d)]
    assert [c.out_channels for c in convs] == [32, 32, 32] and len(pools) == 1
    assert [m.out_features for m in model.encoder.fc if isinstance(m, torch.nn.Linear)] == [256, 256, 20]
    # 3 convs (1→32, 32→32 ×2) + FC 512→256→256→20, and the decoder's mirror
    encoder = (16 * 32 + 32) + 2 * (16 * 32 * 32 + 32) + (512 * 256 + 256) + (256 * 256 + 256)
    encoder += 256 * 20 + 20
    decoder = (10 * 256 + 256) + (256 * 256 + 256) + (256 * 512 + 512)
    decoder += 2 * (16 * 32 * 32 + 32) + (16 * 32 + 1)
    assert parameter_count(model) == encoder + decoder == 469_173


# ---------------------------------------------------------------------------------------------
# configs


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("adversarial_weight", -1.0, "adversarial_weight: must be >= 0"),
        ("adversary_lr", 0.0, "adversary_lr: must be > 0"),
        ("adversary_layers", 0, "adversary_layers: must be at least 1"),
        ("prior_std", 0.0, "prior_std: must be > 0"),
        ("beta_low", -1.0, "beta_low: must be >= 0"),
        ("beta_high", 1.0, r"beta_high: must be >= beta_low \(2.0\)"),
        ("cascade_steps", -1, "cascade_steps: must be >= 0"),
        ("discrete_categories", 1, "discrete_categories: must be at least 2"),
        ("duplicate_penalty", -0.1, "duplicate_penalty: must be >= 0"),
        ("lie_matrix_size", 0, "lie_matrix_size: must be at least 1"),
        ("hessian_weight", -40.0, "hessian_weight: must be >= 0"),
        ("encoder_group_probability", 1.5, r"encoder_group_probability: must be in \[0, 1\]"),
    ],
)
def test_invalid_configs_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**{field: value})


def test_aliases_likelihoods_and_registries():
    assert ModelConfig(objective="infocascade").objective == "cascade_vae"
    assert ModelConfig(objective="lievae").objective == "lie_group_vae"
    assert ModelConfig(objective="waegan").objective == "wae_gan"
    assert ModelConfig(objective="wae_gan").resolved_likelihood == "mse"
    assert ModelConfig(objective="lie_group_vae").resolved_likelihood == "mse"
    assert ModelConfig(objective="cascade_vae").resolved_likelihood == "bernoulli"
    assert set(M22_OBJECTIVES) <= set(OBJECTIVES) and set(M22_OBJECTIVES) <= set(LOSS_TERMS)
    assert type(build(ModelConfig(objective="cascade_vae"))) is CascadeVAE
    assert type(build(ModelConfig(objective="lie_group_vae"))) is LieGroupVAE
    assert getattr(OBJECTIVES["cascade_vae"], "vmappable", True) is False


# ---------------------------------------------------------------------------------------------
# WAE-GAN


def test_wae_gan_penalty_and_adversary_loss_closed_form():
    zero = torch.zeros(4)
    assert math.isclose(adversarial_penalty(zero).item(), math.log(2), rel_tol=1e-6)
    assert math.isclose(adversary_loss(zero, zero).item(), 2 * math.log(2), rel_tol=1e-6)
    # D(z̃) = sigmoid(ℓ): −log D = log(1 + e^−ℓ)
    logits = torch.tensor([2.0, -1.0])
    expected = np.mean([math.log(1 + math.exp(-2.0)), math.log(1 + math.exp(1.0))])
    assert math.isclose(adversarial_penalty(logits).item(), expected, rel_tol=1e-6)
    # a perfect adversary (prior → +∞, codes → −∞) has zero loss
    assert adversary_loss(torch.full((3,), 50.0), torch.full((3,), -50.0)).item() < 1e-20


def test_wae_gan_adversary_trains_with_its_own_optimiser_only():
    config = ModelConfig(objective="wae_gan", steps=3, lr=1e-3, batch_size=8, adversary_width=16, seed=1)
    images = blobs(16)
    trainer = Trainer(build(config), images, np.arange(16), config, "cpu")
    adversary = [p.detach().clone() for p in trainer.objective.adversary.parameters()]
    model_params = {id(p) for p in trainer.model.parameters()}
    assert not any(id(p) in model_params for p in trainer.objective.adversary.parameters())
    list(trainer.run(report_every=1))
    assert all(not torch.equal(a, p) for a, p in zip(adversary, trainer.objective.adversary.parameters()))
    assert trainer.objective._own_optimizer.state_dict()["state"][0]["step"] == 3


# ---------------------------------------------------------------------------------------------
# CascadeVAE


def _brute_force(costs, penalty):
    rows, k = costs.shape
    best = math.inf
    for choice in itertools.product(range(k), repeat=rows):
        counts = np.bincount(choice, minlength=k)
        best = min(best, costs[np.arange(rows), choice].sum() + penalty * (counts * (counts - 1) / 2).sum())
    return best


@pytest.mark.parametrize("penalty", [0.0, 0.3, 5.0])
def test_category_matching_is_the_exact_optimum(penalty):
    rng = np.random.default_rng(int(penalty * 10))
    for _ in range(3):
        costs = rng.random((6, 3)) * 2
        chosen = match_categories(costs, penalty)
        counts = np.bincount(chosen, minlength=3)
        value = costs[np.arange(6), chosen].sum() + penalty * (counts * (counts - 1) / 2).sum()
        assert math.isclose(value, _brute_force(costs, penalty), rel_tol=1e-9, abs_tol=1e-12)
    if penalty == 0.0:
        assert np.array_equal(chosen, costs.argmin(1))
    if penalty == 5.0:  # duplicates cost more than any cost difference: the categories balance
        assert sorted(np.bincount(chosen, minlength=3)) == [2, 2, 2]


def test_information_cascade_releases_one_dimension_at_a_time():
    assert released_dimensions(0, 6, 20_000).tolist() == [False] * 6
    assert released_dimensions(19_999, 6, 20_000).sum() == 0
    assert released_dimensions(20_000, 6, 20_000).tolist() == [True] + [False] * 5
    assert released_dimensions(59_999, 6, 20_000).sum() == 2
    assert released_dimensions(10**6, 6, 20_000).all()
    assert released_dimensions(0, 6, 0).all()  # no cascade: all at β_low from the start
    betas = cascade_betas(released_dimensions(40_000, 3, 20_000), torch.tensor(2.0), torch.tensor(10.0))
    assert betas.tolist() == [2.0, 2.0, 10.0]


def test_cascade_loss_and_the_code_the_metrics_read():
    config = ModelConfig(objective="cascade_vae", latent_dim=3, cascade_steps=5, discrete_categories=3,
                         duplicate_penalty=0.0)
    model, objective = build(config), build_objective(config)
    x = torch.from_numpy(blobs(4)).float() / 255
    noise = objective.draw_noise(torch.Generator().manual_seed(0), 4, "cpu")
    terms = objective(model, x, x, noise, Schedule(step=7, kl_weight=0.5))
    # independently: z, each row's best category (no duplicate penalty), the β-weighted KL
    with torch.no_grad():
        mean, logvar = model.encode_continuous(x)
        z = mean + noise["posterior"] * torch.exp(0.5 * logvar)
        costs = torch.stack([bernoulli_nll(model.decode(torch.cat([z, torch.eye(3)[k].expand(4, 3)], 1)), x)
                             for k in range(3)], 1)
        one_hot = torch.eye(3)[costs.argmin(1)]
        reconstruction = bernoulli_nll(model.decode(torch.cat([z, one_hot], 1)), x).mean()
        weighted = (torch.tensor([2.0, 10.0, 10.0]) * gaussian_kl(mean, logvar).mean(0)).sum()
    assert torch.allclose(terms["reconstruction"], reconstruction, rtol=1e-5)
    assert torch.allclose(terms["weighted_kl"], weighted, rtol=1e-5)
    assert torch.allclose(terms["loss"], reconstruction + 0.5 * weighted, rtol=1e-5)
    assert terms["released_dimensions"].item() == 1
    # before the discrete warm-up ends, the category code is zero and no pairs are counted
    late = build_objective(ModelConfig(**{**config.to_dict(), "discrete_warmup_steps": 100}))
    assert late(model, x, x, noise, Schedule(step=7))["duplicate_pairs"].item() == 0
    # the metrics read [continuous means, one-hot best category from the means]
    images = blobs(5)
    codes = encode_means(model, images, np.arange(5))
    assert codes.shape == (5, 6)
    means = model.encode_continuous(torch.from_numpy(images).float() / 255)[0].detach().numpy()
    assert np.allclose(codes[:, :3], means, atol=1e-6)
    assert np.array_equal(codes[:, 3:].sum(1), np.ones(5)) and set(np.unique(codes[:, 3:])) <= {0.0, 1.0}
    target = torch.from_numpy(images).float() / 255
    best = [min(range(3), key=lambda k, i=i: bernoulli_nll(
        model.decode(torch.cat([torch.from_numpy(means[i:i + 1]), torch.eye(3)[k:k + 1]], 1)),
        target[i:i + 1]).item()) for i in range(5)]
    assert codes[:, 3:].argmax(1).tolist() == best


# ---------------------------------------------------------------------------------------------
# LieGroupVAE


def test_exponential_map_of_a_rotation_generator():
    generator = torch.tensor([[[0.0, -1.0], [1.0, 0.0]]])
    angle = 0.7
    rotation = torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    assert torch.allclose(exponential_map(torch.tensor([[angle]]), generator)[0], rotation, atol=1e-6)
    assert torch.allclose(exponential_map(torch.zeros(1, 1), generator)[0], torch.eye(2))


def test_group_penalties_closed_form():
    e12, e21 = torch.zeros(2, 2), torch.zeros(2, 2)
    e12[0, 1], e21[1, 0] = 1.0, 1.0
    # E12·E21 = E11, E21·E12 = E22: Σ_{i≠j}‖A_i A_j‖² = 2 over K² = 4 pairs
    assert math.isclose(hessian_penalty(torch.stack([e12, e21])).item(), 0.5)
    # [E12, E21] = E11 − E22 (‖·‖² = 2), for both orders
    assert math.isclose(commutator_penalty(torch.stack([e12, e21])).item(), 1.0)
    diagonal = torch.stack([torch.diag(torch.tensor([1.0, 0.0])), torch.diag(torch.tensor([0.0, 3.0]))])
    assert hessian_penalty(diagonal).item() == 0 and commutator_penalty(diagonal).item() == 0
    commuting = torch.stack([torch.eye(2), 2 * torch.eye(2)])  # commute, but multiply to 2I ≠ 0
    assert commutator_penalty(commuting).item() == 0
    assert math.isclose(hessian_penalty(commuting).item(), 2 * 8.0 / 4)


def test_lie_model_encodes_to_its_latent_size():
    # the loss itself is checked by value, for both groups the decoder may read, in
    # tests/models/test_objective_losses_by_value.py
    config = ModelConfig(objective="lie_group_vae", latent_dim=3, lie_matrix_size=3)
    assert build(config).encode(torch.rand(2, 1, 64, 64))[0].shape == (2, 3)


# ---------------------------------------------------------------------------------------------
# engine: resume, evaluation hooks


@pytest.mark.parametrize("objective", M22_OBJECTIVES)
def test_resume_from_a_checkpoint_follows_the_same_trajectory(objective):
    config = ModelConfig(objective=objective, steps=8, lr=1e-3, batch_size=8, seed=3, kl_warmup_steps=4,
                         cascade_steps=3, discrete_warmup_steps=2, input_noise_subpixel_std=0.05,
                         **SMALL[objective])
    images = blobs(24)
    rows = np.arange(24)
    uninterrupted = list(Trainer(build(config), images, rows, config, "cpu").run(report_every=1))

    first = Trainer(build(config), images, rows, config, "cpu")
    reports = list(first.run(until_step=4, report_every=1))
    state = first.state_dict()
    other = ModelConfig(**{**config.to_dict(), "seed": 99})
    resumed = Trainer(build(other), images, rows, config, "cpu")
    resumed.objective = build_objective(other)  # differently initialised: the checkpoint must fix it
    resumed.load_state_dict(state)
    reports += list(resumed.run(report_every=1))
    drop = "images_per_second"
    assert [{k: v for k, v in r.items() if k != drop} for r in reports] == [
        {k: v for k, v in r.items() if k != drop} for r in uninterrupted
    ]


@pytest.mark.parametrize("objective", M22_OBJECTIVES)
def test_evaluation_hooks_work(objective):
    config = ModelConfig(objective=objective, **SMALL[objective])
    model = build(config)
    images = blobs(6)
    codes = encode_means(model, images, np.arange(6), batch_size=4)
    width = 6 + 3 if objective == "cascade_vae" else config.latent_dim
    assert codes.shape == (6, width) and np.isfinite(codes).all()
    assert nll_per_image(model, images, np.arange(6)).shape == (6,)
    assert reconstruct(model, images[:2]).shape == (2, 1, 64, 64)
    probabilities = decode_probabilities(model, codes)
    assert probabilities.shape == (6, 1, 64, 64) and ((probabilities >= 0) & (probabilities <= 1)).all()
    assert np.allclose(probabilities[:2], reconstruct(model, images[:2]), atol=1e-5)
