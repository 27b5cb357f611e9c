import math

import numpy as np
import pytest
import torch
from dataset_files import OBJECTIVE_SETTINGS, blobs

from models import ModelConfig, Trainer, build, encode_means, nll_per_image, reconstruct
from models.objectives import (
    annealed_capacity,
    bernoulli_nll,
    beta_vae,
    gaussian_kl,
    gaussian_kl_between,
    gaussian_log_density,
)
from models.registry import LOSS_TERMS, OBJECTIVES

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------------------------------------
# closed forms


def test_gaussian_kl_closed_form():
    mean = torch.tensor([[0.0, 1.0, 2.0]])
    logvar = torch.tensor([[0.0, 0.0, math.log(2.0)]])
    expected = [0.0, 0.5, 0.5 * (4 + 2 - math.log(2) - 1)]
    assert torch.allclose(gaussian_kl(mean, logvar)[0], torch.tensor(expected), atol=1e-6)


def test_kl_between_gaussians_closed_form():
    # KL(N(1, 1) || N(0, 4)) = ln 2 + (1 + 1)/8 - 1/2
    value = gaussian_kl_between(
        torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([0.0]), torch.tensor([math.log(4.0)])
    )
    assert value.item() == pytest.approx(math.log(2) + 2 / 8 - 0.5)
    assert (
        gaussian_kl_between(torch.zeros(3), torch.zeros(3), torch.zeros(3), torch.zeros(3)).abs().max() == 0
    )
    assert gaussian_log_density(torch.zeros(1), torch.zeros(1), torch.zeros(1)).item() == pytest.approx(
        -0.5 * math.log(2 * math.pi)
    )


def test_bernoulli_nll_closed_form():
    logits = torch.zeros(1, 1, 2, 2)  # p = 0.5 everywhere: NLL = 4·ln 2 whatever the image
    x = torch.tensor([[[[0.0, 1.0], [1.0, 1.0]]]])
    assert bernoulli_nll(logits, x).item() == pytest.approx(4 * math.log(2))


def test_beta_vae_loss_is_the_negative_elbo_with_beta():
    logits, x = torch.zeros(2, 1, 2, 2), torch.ones(2, 1, 2, 2)
    mean, logvar = torch.ones(2, 3), torch.zeros(2, 3)
    terms = beta_vae(logits, x, mean, logvar, beta=4.0)
    assert terms["kl"].item() == pytest.approx(1.5)
    assert terms["reconstruction"].item() == pytest.approx(4 * math.log(2))
    assert terms["loss"].item() == pytest.approx(4 * math.log(2) + 4.0 * 1.5)
    elbo = beta_vae(logits, x, mean, logvar, beta=1.0)["loss"]
    assert elbo.item() == pytest.approx(4 * math.log(2) + 1.5)  # β = 1: −ELBO
    warm = beta_vae(logits, x, mean, logvar, beta=4.0, kl_weight=0.25)["loss"]
    assert warm.item() == pytest.approx(4 * math.log(2) + 1.5)


def test_annealed_capacity_closed_form():
    logits, x = torch.zeros(1, 1, 2, 2), torch.ones(1, 1, 2, 2)
    mean, logvar = torch.ones(1, 4), torch.zeros(1, 4)  # KL = 2
    terms = annealed_capacity(logits, x, mean, logvar, gamma=10.0, capacity=5.0)
    assert terms["loss"].item() == pytest.approx(4 * math.log(2) + 10.0 * 3.0)


def test_factor_vae_permutes_each_dimension_independently_across_the_batch():
    from models.objectives import permute_dims

    z = torch.arange(64 * 10, dtype=torch.float32).view(64, 10)
    permuted = permute_dims(z, torch.Generator().manual_seed(0))
    for k in range(10):  # each column holds the same values, reordered
        assert torch.equal(permuted[:, k].sort().values, z[:, k])
    orders = [tuple(((permuted[:, k] - k) / 10).long().tolist()) for k in range(10)]
    assert len(set(orders)) == 10  # each column got its own permutation
    assert orders[0] != tuple(range(64))
    rows_kept = sum(tuple(r.tolist()) in {tuple(s.tolist()) for s in z} for r in permuted)
    assert rows_kept < 3  # rows are broken up, not just shuffled


@pytest.mark.parametrize("divergence", ["symmetric_kl", "kl"])
def test_ada_gvae_picks_the_shared_dimensions_of_a_constructed_pair(divergence):
    from models.objectives import ada_gvae_aggregate

    mean1 = torch.tensor([[0.1, -0.5, 0.3, 1.0, 0.0, 0.2]])
    logvar1 = torch.full((1, 6), -2.0)
    mean2, logvar2 = mean1.clone(), logvar1.clone()
    mean2[0, 3], mean2[0, 5] = -1.5, 2.0  # the pair differs in dimensions 3 and 5
    logvar2[0, 0] = -1.9  # a small difference that stays below the threshold
    m1, lv1, m2, lv2, shared = ada_gvae_aggregate(mean1, logvar1, mean2, logvar2, divergence)
    assert shared[0].tolist() == [True, True, True, False, True, False]
    assert torch.equal(m1[:, [3, 5]], mean1[:, [3, 5]]) and torch.equal(m2[:, [3, 5]], mean2[:, [3, 5]])
    assert torch.allclose(m1[0, :3], m2[0, :3]) and torch.allclose(lv1[0, 0], lv2[0, 0])
    assert lv1[0, 0].item() == pytest.approx(math.log(0.5 * (math.exp(-2.0) + math.exp(-1.9))))


def test_mmd_is_the_unbiased_estimate_with_the_inverse_multiquadric_kernel():
    from models.objectives import inverse_multiquadric, mmd_unbiased

    assert inverse_multiquadric(torch.zeros(1, 3), torch.zeros(1, 3)).item() == pytest.approx(7.0)
    rng = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 3, generator=rng), torch.randn(5, 3, generator=rng)

    def k(u, v):
        d = float(((u - v) ** 2).sum())
        return sum(10 * s / (10 * s + d) for s in (0.1, 0.2, 0.5, 1, 2, 5, 10))

    n = 5
    by_hand = (
        sum(k(a[i], a[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
        + sum(k(b[i], b[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
        - 2 * sum(k(a[i], b[j]) for i in range(n) for j in range(n)) / n**2
    )
    assert mmd_unbiased(a, b).item() == pytest.approx(by_hand, rel=1e-5)
    big = torch.randn(400, 3, generator=rng), torch.randn(400, 3, generator=rng)
    assert abs(mmd_unbiased(*big).item()) < 0.02 < mmd_unbiased(big[0] + 2.0, big[1]).item()


def test_tc_decomposition_adds_up_to_the_kl_estimate():
    from models.objectives import total_correlation_decomposition

    rng = torch.Generator().manual_seed(0)
    mean, logvar = torch.randn(32, 4, generator=rng), 0.3 * torch.randn(32, 4, generator=rng)
    z = mean + torch.randn(32, 4, generator=rng) * (0.5 * logvar).exp()
    mi, tc, dwkl = total_correlation_decomposition(z, mean, logvar, dataset_size=1000)
    log_q = gaussian_log_density(z, mean, logvar).sum(1)
    log_p = gaussian_log_density(z, torch.zeros_like(z), torch.zeros_like(z)).sum(1)
    assert (mi + tc + dwkl).item() == pytest.approx((log_q - log_p).mean().item(), rel=1e-5)


# ---------------------------------------------------------------------------------------------
# architectures


@pytest.mark.parametrize(
    "architecture", ["higgins", "burgess", "burgess_v2", "kim", "montero", "abdi", "dittadi"]
)
def test_every_architecture_takes_1_or_3_channels_any_latent_size_and_both_sizes(architecture):
    for channels, size, latent in [(1, 64, 3), (3, 128, 25)]:
        if architecture == "higgins" and size == 128:
            channels = 1  # 3-channel 128 px higgins is 122M parameters: too slow to build in a test
        model = build(
            ModelConfig(architecture=architecture, channels=channels, image_size=size, latent_dim=latent)
        )
        x = torch.rand(2, channels, size, size)
        mean, logvar = model.encode(x)
        assert mean.shape == logvar.shape == (2, latent)
        assert model.decode(mean).shape == x.shape


def test_parameter_counts_and_dittadi_matches_the_paper():
    from models.architectures import parameter_count

    count = parameter_count(build(ModelConfig(architecture="dittadi", image_size=128, channels=3)))
    assert abs(count - 16.3e6) < 0.1 * 16.3e6
    assert (
        parameter_count(build(ModelConfig(architecture="burgess"))) == 502_005
    )  # unchanged from the walking skeleton


def test_dittadi_residual_blocks_start_as_the_identity_and_the_logvar_head_is_small():
    from models.architectures import ResidualBlock

    model = build(ModelConfig(architecture="dittadi"))
    blocks = [m for m in model.modules() if isinstance(m, ResidualBlock)]
    assert len(blocks) == 20 and all(b.gate.item() == 0 for b in blocks)
    x = torch.randn(1, 64, 8, 8)
    assert torch.equal(blocks[0](x), x)
    assert torch.all(model.encoder.logvar.bias == -1.0)
    assert model.encoder.logvar.weight.std() < 0.2 * model.encoder.mean.weight.std()


def test_building_is_seeded():
    a, b = build(ModelConfig(seed=4)), build(ModelConfig.from_dict({"seed": 4, "unrelated_key": 1}))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    c = build(ModelConfig(seed=5))
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))


# ---------------------------------------------------------------------------------------------
# configs


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("architecture", "resnet", "architecture: unknown 'resnet'"),
        ("beta", -1.0, "beta: must be >= 0"),
        ("latent_dim", 0, "latent_dim: must be at least 1"),
        ("objective", "gan", "objective: unknown 'gan'"),
        ("image_size", 32, "image_size: must be 64 or 128; got 32"),
        ("lr_milestones", (300, 150), "lr_milestones: must be increasing"),
        ("pair_divergence", "js", "pair_divergence: unknown 'js'"),
        ("input_noise_greyscale_std", -0.1, "input_noise_greyscale_std: must be >= 0"),
        ("gamma", -1.0, "gamma: must be >= 0"),
    ],
)
def test_invalid_configs_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**{field: value})


def test_an_objective_that_needs_pairs_rejects_single_images():
    config = ModelConfig(objective="ada_gvae", batch_size=4)
    images, _ = blobs(8)
    with pytest.raises(ValueError, match="objective: 'ada_gvae' trains on pairs"):
        Trainer(build(config), images, np.arange(8), config, "cpu")
    from models.registry import build_objective

    x = torch.rand(4, 1, 64, 64)
    with pytest.raises(ValueError, match="objective: 'ada_gvae' trains on pairs"):
        build_objective(config)(build(config), x, x, torch.Generator(), None, pairs=False)


def test_config_round_trips_and_accepts_aliases_and_lists():
    config = ModelConfig.from_dict({"objective": "cci_vae", "lr_milestones": [150, 300], "dataset": "x"})
    assert config.objective == "annealed_vae" and config.lr_milestones == (150, 300)
    assert ModelConfig(**config.to_dict()) == config and hash(config) == hash(ModelConfig(**config.to_dict()))
    assert ModelConfig(epochs=2, batch_size=64).total_steps(1000) == 32  # ceil(2000 / 64)
    assert ModelConfig(objective="wae_mmd").resolved_likelihood == "mse"
    assert ModelConfig(objective="factor_vae").resolved_gamma == 35.0


# ---------------------------------------------------------------------------------------------
# objectives train


@pytest.mark.slow
@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_every_objective_lowers_its_loss_on_a_tiny_dataset(objective):
    images, factors = blobs(64)
    config = ModelConfig(
        objective=objective, steps=40, lr=1e-3, batch_size=16, **OBJECTIVE_SETTINGS[objective]
    )
    trainer = Trainer(build(config), images, np.arange(64), config, "cpu", factors=factors)
    reports = list(trainer.run(report_every=10))
    assert [r["step"] for r in reports] == [10, 20, 30, 40]
    assert set(reports[0]) == {"step", "loss", "images_per_second", *LOSS_TERMS[objective]}
    assert reports[-1]["loss"] < 0.8 * reports[0]["loss"]
    assert reports[-1]["reconstruction"] < reports[0]["reconstruction"]


@pytest.mark.slow
def test_burgess_trains_and_the_evaluation_hooks_work():
    config = ModelConfig(steps=40, lr=1e-3, batch_size=32, seed=0)
    images, _ = blobs()
    model = build(config)
    reports = list(Trainer(model, images, np.arange(len(images)), config, "cpu").run(report_every=10))
    assert reports[-1]["loss"] < 0.5 * reports[0]["loss"]
    assert encode_means(model, images, np.arange(5)).shape == (5, 10)
    assert nll_per_image(model, images, np.arange(7)).shape == (7,)
    assert reconstruct(model, images[:3]).shape == (3, 1, 64, 64)


# ---------------------------------------------------------------------------------------------
# run lengths (epochs) and pairs; the engine itself is tested in tests/models/test_engine.py


def test_training_by_epochs():
    images, _ = blobs(40)
    config = ModelConfig(epochs=1.5, steps=999, batch_size=8)
    trainer = Trainer(build(config), images, np.arange(40), config, "cpu")
    assert trainer.total_steps == 8
    assert [r["step"] for r in trainer.run(report_every=5)] == [5, 8]


def test_an_epoch_of_epoch_length_steps_whatever_the_rows():
    """With epoch_length, epochs × epoch_length steps (rounded up), at any training-set size and
    batch (M21's ground-truth decoder: 500 epochs of 10 iterations); without it, passes over the rows."""
    code = ModelConfig(epochs=500, epoch_length=10, batch_size=64)
    assert [code.total_steps(n) for n in (1, 64, 1000, 737_280)] == [5000] * 4
    assert ModelConfig(epochs=1000, epoch_length=10, batch_size=7).total_steps(10) == 10_000
    assert ModelConfig(epochs=2.5, epoch_length=3).total_steps(10) == 8  # 7.5, up to a whole step
    assert ModelConfig(epochs=0.1, epoch_length=30).total_steps(10) == 3  # 3.0000000000000004 is 3
    assert ModelConfig(epochs=2, batch_size=64).total_steps(1000) == 32  # None: ceil(2000 / 64)
    assert ModelConfig(steps=7, epoch_length=10).total_steps(1000) == 7  # no epochs: steps
    images, _ = blobs(40)
    config = ModelConfig(epochs=1.5, epoch_length=3, steps=999, batch_size=8)
    trainer = Trainer(build(config), images, np.arange(40), config, "cpu")
    assert trainer.total_steps == 5
    assert [r["step"] for r in trainer.run(report_every=3)] == [3, 5]


@pytest.mark.parametrize("value, error, message", [
    (0, ValueError, "epoch_length: must be at least 1 or None; got 0"),
    (-1, ValueError, "epoch_length: must be at least 1 or None; got -1"),
    (2.5, TypeError, "epoch_length: expected a whole number, or None; got 2.5"),
    ("x", TypeError, "epoch_length: expected a whole number, or None; got 'x'"),
])
def test_a_bad_epoch_length_is_refused_in_one_line_naming_it(value, error, message):
    assert ModelConfig().optimisation.epoch_length is None
    with pytest.raises(error) as refused:
        ModelConfig(epochs=500, epoch_length=value)
    assert str(refused.value) == f"invalid model config: {message}"


def test_pairs_differ_in_at_most_k_factors():
    from models import PairSampler

    factors = np.stack(np.meshgrid(np.arange(3), np.arange(4), np.arange(5), indexing="ij"), -1).reshape(
        -1, 3
    )
    train = np.arange(0, 60, 2)
    sampler = PairSampler(factors, train, factors_changed=1)
    first, second = sampler.sample(np.random.default_rng(0), 200)
    assert np.isin(first, train).all() and np.isin(second, train).all()
    assert (first != second).all()
    assert ((factors[first] != factors[second]).sum(1) == 1).all()
    first, second = PairSampler(factors, train, factors_changed=2).sample(np.random.default_rng(0), 200)
    assert ((factors[first] != factors[second]).sum(1) <= 2).all()


# ---------------------------------------------------------------------------------------------
# ground-truth decoder and composition network


def test_ground_truth_decoder_takes_raw_or_normalised_factors_and_learns():
    from models.ground_truth import GroundTruthDecoder, train_ground_truth_decoder

    images, factors = blobs(64)
    rows = np.arange(64)
    raw = GroundTruthDecoder.from_factors(factors * 10.0, rows, architecture="higgins")
    normalised = GroundTruthDecoder.from_factors(factors * 10.0, rows, architecture="higgins", normalise=True)
    f = torch.tensor([[0.0, 30.0], [15.0, 0.0]])
    assert torch.equal(raw.inputs(f), f)
    assert torch.allclose(normalised.inputs(f), torch.tensor([[0.0, 1.0], [0.5, 0.0]]))
    reports = list(
        train_ground_truth_decoder(
            normalised, images, factors * 10.0, rows, steps=30, batch_size=16, report_every=10
        )
    )
    assert reports[-1]["loss"] < 0.5 * reports[0]["loss"]
    assert normalised.nll_per_image(images, factors * 10.0, np.arange(5)).shape == (5,)
    with pytest.raises(ValueError, match="architecture: unknown"):
        GroundTruthDecoder(2, architecture="nope")


@pytest.mark.slow
@pytest.mark.parametrize("latent_op", ["linear", "interpolation", "mlp"])
def test_composition_net_latent_ops(latent_op):
    from models import CompositionNet

    net = CompositionNet(ModelConfig(latent_dim=4, latent_op=latent_op).network, n_actions=2)
    images, factors = blobs(32)
    x = torch.from_numpy(images).float() / 255
    action = torch.nn.functional.one_hot(torch.arange(16) % 2, 2)
    logits, mean, logvar = net(x[:16], x[16:], action)
    assert logits.shape == (16, 1, 64, 64) and mean.shape == (32, 4)
    if latent_op == "linear":  # h = W_r[z_r; a] + W_t[z_t; a]
        z_r, z_t = torch.randn(3, 4), torch.randn(3, 4)
        a = torch.eye(2)[[0, 1, 0]]
        expected = (
            torch.cat([z_r, a], 1) @ net.op.reference.weight.T
            + torch.cat([z_t, a], 1) @ net.op.transform.weight.T
        )
        assert torch.allclose(net.op(z_r, z_t, a), expected, atol=1e-6)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(15):
        terms = net.loss_terms(x[:16], x[16:], action, x[:16], generator)
        optimizer.zero_grad()
        terms["loss"].backward()
        optimizer.step()
        losses.append(terms["loss"].item())
    assert losses[-1] < 0.8 * losses[0]


def test_evaluation_hooks_leave_the_model_in_the_mode_they_found():
    from models.inference import decode_probabilities

    model = build(ModelConfig())
    images, rows = np.zeros((4, 1, 64, 64), np.uint8), np.arange(4)
    for training in (True, False):
        model.train(training)
        encode_means(model, images, rows)
        reconstruct(model, images)
        nll_per_image(model, images, rows)
        assert decode_probabilities(model, np.zeros((2, 10))).shape == (2, 1, 64, 64)
        assert model.training is training
