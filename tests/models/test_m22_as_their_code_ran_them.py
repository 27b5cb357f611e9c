"""Montero et al. 2022's models as their code ran them (mmrl/lost-in-latent-space): the
CompositionNet latent operations, the spatial broadcast decoder, the composition loss over all three
images, and WAE-MMD's MMD both ways. Each value is computed independently here: by hand on tiny
weights, by counting, or from the authors' formula written out with loops."""

import itertools

import numpy as np
import pytest
import torch

from models import ModelConfig, build
from models.architectures import SpatialBroadcastDecoder, parameter_count
from models.composition import CompositionNet, FixedInterpolationOp, InterpolationOp
from models.config import ConfigError
from models.objectives import Schedule, bernoulli_nll, gaussian_kl, mmd_m22_code, mmd_unbiased
from models.registry import build_objective

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------------------------------------
# the latent operations (src/models/compnet.py)


def test_interpolation_reads_both_codes_and_the_action_and_weighs_the_reference():
    op = InterpolationOp(latent_dim=2, n_actions=1)
    with torch.no_grad():
        op.gate.weight.copy_(torch.tensor([[1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0, -1.0]]))
        op.gate.bias.copy_(torch.tensor([0.0, 0.5]))
    z_r, z_t, a = torch.tensor([[2.0, 1.0]]), torch.tensor([[-1.0, 3.0]]), torch.tensor([[1.0]])
    # by hand: gate inputs [z_r; z_t; a] = [2, 1, -1, 3, 1]
    w0 = 1 / (1 + np.exp(-2.0))  # 1·z_r[0]
    w1 = 1 / (1 + np.exp(-(2 * 3.0 - 1.0 + 0.5)))  # 2·z_t[1] − a + 0.5
    expected = [w0 * 2.0 + (1 - w0) * -1.0, w1 * 1.0 + (1 - w1) * 3.0]
    np.testing.assert_allclose(op(z_r, z_t, a).detach().numpy()[0], expected, rtol=1e-6)


def test_fixed_interpolation_takes_the_actions_dimension_from_the_transform():
    op = FixedInterpolationOp(latent_dim=4, n_actions=3)
    z_r, z_t = torch.tensor([[1.0, 2.0, 3.0, 4.0]]), torch.tensor([[10.0, 20.0, 30.0, 40.0]])
    assert op(z_r, z_t, torch.tensor([[0.0, 1.0, 0.0]])).tolist() == [[1.0, 20.0, 3.0, 4.0]]
    assert op(z_r, z_t, torch.tensor([[1.0, 0.0, 0.0]])).tolist() == [[10.0, 2.0, 3.0, 4.0]]
    assert parameter_count(op) == 0
    with pytest.raises(ValueError, match="a latent dimension per factor"):
        FixedInterpolationOp(latent_dim=2, n_actions=3)


# ---------------------------------------------------------------------------------------------
# the spatial broadcast decoder (scripts/configs/vaes.py sbd3, sbd4; src/models/sbd.py)


def test_spatial_broadcast_input_is_the_tiled_code_and_xy_coordinates():
    decoder = SpatialBroadcastDecoder(channels=1, latent_dim=2, image_size=5)
    grid = decoder.broadcast(torch.tensor([[0.3, -7.0]]))[0].numpy()
    assert grid.shape == (4, 5, 5)
    assert (grid[0] == np.float32(0.3)).all() and (grid[1] == -7.0).all()
    line = [-1.0, -0.5, 0.0, 0.5, 1.0]
    for row, col in itertools.product(range(5), range(5)):
        assert grid[2, row, col] == pytest.approx(line[col])  # x: along the width
        assert grid[3, row, col] == pytest.approx(line[row])  # y: along the height


@pytest.mark.parametrize("name, hidden", [("sbd3", 2), ("sbd4", 3)])
def test_sbd_decoders_have_m22s_layers(name, hidden):
    """5×5 'same' convolutions of 64 channels on K + 2 inputs, then one to the image's channels:
    parameters counted by hand, and the output has the image's shape."""
    model = build(ModelConfig(architecture="kim", decoder=name, channels=3, latent_dim=10))
    assert isinstance(model.decoder, SpatialBroadcastDecoder)
    expected = (12 * 64 * 25 + 64) + (hidden - 1) * (64 * 64 * 25 + 64) + (64 * 3 * 25 + 3)
    assert parameter_count(model.decoder) == expected
    assert model.decode(torch.zeros(2, 10)).shape == (2, 3, 64, 64)
    # the encoder stays kim's: 32, 32, 64, 64 then 256
    convs = [m.out_channels for m in model.encoder.conv if isinstance(m, torch.nn.Conv2d)]
    assert convs == [32, 32, 64, 64]


def test_mirror_is_the_architectures_own_decoder():
    assert not isinstance(build(ModelConfig(architecture="kim")).decoder, SpatialBroadcastDecoder)
    with pytest.raises(ConfigError, match="decoder"):
        ModelConfig(decoder="sbd5")


# ---------------------------------------------------------------------------------------------
# the composition loss over all three images (src/dataset/tuples.py, src/training/loss.py)


def composition(latent_op="interpolation", **settings):
    config = ModelConfig(task="composition", architecture="burgess", latent_op=latent_op, latent_dim=4,
                         **settings)
    return CompositionNet(config.network, n_actions=3, seed=1, beta=config.beta, loss=config.loss), config


def triplet_batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    images = (torch.rand(3, 2, 1, 64, 64, generator=g) > 0.7).float()
    action = torch.nn.functional.one_hot(torch.tensor([0, 2]), 3)
    return images[0], images[1], action, images[2]


def test_all_three_sums_the_three_reconstructions_and_both_kls():
    model, config = composition(composition_loss="all_three", objective="beta_vae", beta=3.0)
    reference, transform, action, target = triplet_batch()
    terms = model.loss_terms(reference, transform, action, target, torch.Generator().manual_seed(5))
    # independently: the same posterior draws, each image decoded on its own
    with torch.no_grad():
        mean, logvar = model.encoder(torch.cat([reference, transform]))
        noise = torch.randn(mean.shape, generator=torch.Generator().manual_seed(5))
        z = mean + noise * torch.exp(0.5 * logvar)
        composed = model.op(z[:2], z[2:], action.float())
        nll = (bernoulli_nll(model.decoder(z[:2]), reference) + bernoulli_nll(model.decoder(z[2:]), transform)
               + bernoulli_nll(model.decoder(composed), target)).mean()
        kl = (gaussian_kl(mean[:2], logvar[:2]).sum(1) + gaussian_kl(mean[2:], logvar[2:]).sum(1)).mean()
    assert terms["reconstruction"].item() == pytest.approx(nll.item(), rel=1e-5)
    assert terms["kl"].item() == pytest.approx(kl.item(), rel=1e-5)
    assert terms["loss"].item() == pytest.approx((nll + 3.0 * kl).item(), rel=1e-5)
    # the default reconstructs the target only and averages the two KLs
    target_only, _ = composition(objective="beta_vae", beta=3.0)
    target_only.load_state_dict(model.state_dict())
    terms = target_only.loss_terms(reference, transform, action, target, torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert terms["reconstruction"].item() == pytest.approx(
            bernoulli_nll(model.decoder(composed), target).mean().item(), rel=1e-5)
    assert terms["kl"].item() == pytest.approx(kl.item() / 2, rel=1e-5)


def test_a_composition_network_trains_with_wae_mmd():
    model, config = composition(latent_op="fixed_interpolation", objective="wae_mmd", mmd_weight=10.0,
                                composition_loss="all_three", mmd_estimator="m22_code", prior_std=2.0)
    terms = model.loss_terms(*triplet_batch(), torch.Generator().manual_seed(0))
    assert set(terms) == {"loss", "reconstruction", "kl", "mmd", "logvar_l1"}
    assert config.resolved_likelihood == "mse"
    terms["loss"].backward()
    assert all(p.grad is not None for p in model.encoder.parameters())
    with pytest.raises(ConfigError, match="objective"):
        ModelConfig(task="composition", objective="factor_vae")


# ---------------------------------------------------------------------------------------------
# WAE-MMD both ways (src/training/math.py lines 15-56; src/training/loss.py lines 416-435)


def m22_formula(z, prior, c=10.0, scales=(0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)):
    """The authors' code written out: the squared distances summed over the index lists, the
    kernel applied to each sum, each divided by len(tuple of two index lists) = 2."""
    n = len(z)
    intra = list(itertools.combinations(range(n), 2))
    cross = list(itertools.product(range(n), repeat=2))
    q_zz = sum(float(((z[i] - z[j]) ** 2).sum()) for i, j in intra)
    q_pp = sum(float(((prior[i] - prior[j]) ** 2).sum()) for i, j in intra)
    q_zp = sum(float(((z[i] - prior[j]) ** 2).sum()) for i, j in cross)
    k = lambda q: sum(c * s / (c * s + q) for s in scales)  # noqa: E731
    return (k(q_pp) + k(q_zz)) / 2 - 2 * k(q_zp) / 2


def test_m22_code_mmd_is_the_authors_expression_and_near_zero():
    g = torch.Generator().manual_seed(0)
    z, prior = torch.randn(6, 3, generator=g, dtype=torch.float64), torch.randn(6, 3, generator=g,
                                                                              dtype=torch.float64)
    assert mmd_m22_code(z, prior).item() == pytest.approx(m22_formula(z.numpy(), prior.numpy()), rel=1e-9)
    # a batch of 64 ten-dimensional codes: the term is about zero, against a far prior too
    z = torch.randn(64, 10, generator=g) + 3.0
    prior = 2.0 * torch.randn(64, 10, generator=g)
    near_zero, correct = mmd_m22_code(z, prior).item(), mmd_unbiased(z, prior).item()
    assert abs(near_zero) < 0.01 and correct > 100 * abs(near_zero)


@pytest.mark.parametrize("estimator", ["unbiased", "m22_code"])
def test_wae_mmd_objective_uses_the_estimator_and_the_prior_std_set(estimator):
    config = ModelConfig(objective="wae_mmd", latent_dim=3, mmd_estimator=estimator, prior_std=2.0,
                         mmd_weight=1.0, logvar_l1_weight=0.0)
    model = build(config)
    objective = build_objective(config)
    x = (torch.rand(4, 1, 64, 64, generator=torch.Generator().manual_seed(1)) > 0.5).float()
    noise = objective.draw_noise(torch.Generator().manual_seed(2), 4, "cpu")
    terms = objective(model, x, x, noise, Schedule(step=0))
    with torch.no_grad():
        mean, logvar = model.encode(x)
        z = mean + noise["posterior"] * torch.exp(0.5 * logvar)
        prior = 2.0 * noise["prior"]
        expected = (m22_formula(z.double().numpy(), prior.double().numpy()) if estimator == "m22_code"
                    else mmd_unbiased(z, prior).item())
    assert terms["mmd"].item() == pytest.approx(expected, rel=1e-4, abs=1e-7)
    assert ModelConfig().mmd_estimator == "unbiased" and ModelConfig().prior_std == 1.0


# ---------------------------------------------------------------------------------------------
# M22's Simple: two shapes (its README, line 27)


def test_simple_has_two_shapes_and_its_shape_1_is_the_circles_circle():
    from data_pipeline import factor_space
    from data_pipeline.datasets import load_procedural

    space = factor_space("simple")
    assert tuple(space.sizes) == (32, 32, 2) and space.n_images == 32 * 32 * 2
    # the circle at one position is the Circles dataset's circle there
    simple = load_procedural("simple", classes=np.array([[9, 20, 1]]))
    circles = load_procedural("circles", classes=np.array([[9, 20]]))
    assert np.array_equal(np.asarray(simple.images), np.asarray(circles.images))


# ---------------------------------------------------------------------------------------------
# what M22's analysis reads from a CompositionNet: its autoencoder (scripts/analysis/model.py)


def test_a_composition_nets_autoencoder_shares_its_weights():
    from models.composition import ComposedAutoencoder
    from models.inference import encode_means

    model, config = composition(latent_op="fixed_interpolation", decoder="sbd3")
    model.config = config
    auto = model.autoencoder()
    assert isinstance(auto, ComposedAutoencoder) and auto.config.task == "vae"
    assert auto.encoder is model.encoder and auto.decoder is model.decoder
    x = triplet_batch()[0]
    with torch.no_grad():
        mean, _ = model.encoder(x)
        auto.eval()
        logits, auto_mean, _ = auto(x)
        assert torch.equal(auto_mean, mean) and torch.equal(logits, model.decoder(mean))
    images = (x.numpy() * 255).astype(np.uint8)
    np.testing.assert_allclose(encode_means(auto, images, np.arange(2)), mean.numpy(), rtol=1e-5, atol=1e-6)
