import math

import numpy as np
import pytest
import torch

from models import ModelConfig, NonFiniteLossError, Trainer, build, encode_means, nll_per_image
from models.objectives import bernoulli_nll, beta_vae, gaussian_kl


def blobs(n=256, seed=0):
    """Tiny binary images: a 12×12 square at one of a few positions."""
    rng = np.random.default_rng(seed)
    images = np.zeros((n, 1, 64, 64), np.uint8)
    for i, (x, y) in enumerate(rng.integers(0, 4, size=(n, 2)) * 12 + 4):
        images[i, 0, y:y + 12, x:x + 12] = 255
    return images


def test_gaussian_kl_closed_form():
    mean = torch.tensor([[0.0, 1.0, 2.0]])
    logvar = torch.tensor([[0.0, 0.0, math.log(2.0)]])
    expected = [0.0, 0.5, 0.5 * (4 + 2 - math.log(2) - 1)]
    assert torch.allclose(gaussian_kl(mean, logvar)[0], torch.tensor(expected), atol=1e-6)


def test_bernoulli_nll_closed_form():
    logits = torch.zeros(1, 1, 2, 2)  # p = 0.5 everywhere: NLL = 4·ln 2 whatever the image
    x = torch.tensor([[[[0.0, 1.0], [1.0, 1.0]]]])
    assert bernoulli_nll(logits, x).item() == pytest.approx(4 * math.log(2))


def test_beta_vae_loss_is_reconstruction_plus_beta_kl():
    logits, x = torch.zeros(2, 1, 2, 2), torch.ones(2, 1, 2, 2)
    mean, logvar = torch.ones(2, 3), torch.zeros(2, 3)
    terms = beta_vae(logits, x, mean, logvar, beta=4.0)
    assert terms["kl"].item() == pytest.approx(1.5)
    assert terms["reconstruction"].item() == pytest.approx(4 * math.log(2))
    assert terms["loss"].item() == pytest.approx(4 * math.log(2) + 4.0 * 1.5)


@pytest.mark.parametrize("field, value, message", [
    ("architecture", "resnet", "architecture: unknown 'resnet'"),
    ("beta", -1.0, "beta: must be >= 0"),
    ("latent_dim", 0, "latent_dim: must be at least 1"),
    ("objective", "gan", "objective: unknown 'gan'"),
])
def test_invalid_configs_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**{field: value})


def test_burgess_shapes_and_loss_goes_down():
    config = ModelConfig(steps=40, lr=1e-3, batch_size=32, seed=0)
    images = blobs()
    model = build(config)
    assert model.decode(torch.zeros(2, 10)).shape == (2, 1, 64, 64)
    reports = list(Trainer(model, images, np.arange(len(images)), config, "cpu").run(report_every=10))
    assert [r["step"] for r in reports] == [10, 20, 30, 40]
    assert reports[-1]["loss"] < 0.5 * reports[0]["loss"]
    assert encode_means(model, images, np.arange(5)).shape == (5, 10)
    assert nll_per_image(model, images, np.arange(7)).shape == (7,)


def test_resume_from_a_checkpoint_follows_the_same_trajectory():
    config = ModelConfig(steps=12, lr=1e-3, batch_size=16, seed=3)
    images, rows = blobs(64), np.arange(64)
    straight = Trainer(build(config), images, rows, config, "cpu")
    uninterrupted = [r["loss"] for r in straight.run(report_every=1)]

    first = Trainer(build(config), images, rows, config, "cpu")
    losses = [r["loss"] for r in first.run(until_step=5, report_every=1)]
    state = first.state_dict()
    resumed = Trainer(build(ModelConfig(**{**config.to_dict(), "seed": 99})), images, rows, config, "cpu")
    resumed.load_state_dict(state)
    losses += [r["loss"] for r in resumed.run(report_every=1)]
    assert losses == uninterrupted


def test_a_nan_loss_stops_with_the_step_and_term():
    config = ModelConfig(steps=5, batch_size=8)
    model = build(config)
    with torch.no_grad():
        model.decoder.deconv[-1].bias.fill_(float("nan"))
    trainer = Trainer(model, blobs(16), np.arange(16), config, "cpu")
    with pytest.raises(NonFiniteLossError, match=r"step 1: loss term .*reconstruction"):
        list(trainer.run(report_every=1))
