"""DIP-VAE-I, the objective docs/adding_an_objective.md adds: its loss by an independent route."""

import numpy as np
import torch

from models import ModelConfig, build, build_objective
from models.objectives import Schedule


def test_dip_vae_loss_is_reconstruction_kl_and_the_covariance_penalties():
    config = ModelConfig(objective="dip_vae", gamma=3.0, latent_dim=4, seed=0)
    model, objective = build(config), build_objective(config)
    x = torch.rand(6, 1, 64, 64, generator=torch.Generator().manual_seed(0))
    noise = objective.draw_noise(torch.Generator().manual_seed(1), 6, "cpu")
    terms = objective(model, x, x, noise, Schedule(step=0))

    mean = model.encode(x)[0].detach().double().numpy()
    covariance = np.zeros((4, 4))  # the 1/B covariance of the means, one entry at a time
    for i in range(4):
        for j in range(4):
            covariance[i, j] = np.mean((mean[:, i] - mean[:, i].mean()) * (mean[:, j] - mean[:, j].mean()))
    off = sum(covariance[i, j] ** 2 for i in range(4) for j in range(4) if i != j)
    diagonal = sum((covariance[i, i] - 1) ** 2 for i in range(4))
    expected = float(terms["reconstruction"]) + float(terms["kl"]) + 3.0 * off + 30.0 * diagonal
    assert abs(float(terms["loss"]) - expected) < 1e-4 * abs(expected)
    assert abs(float(terms["dip_off_diagonal"]) - off) < 1e-5
    assert abs(float(terms["dip_diagonal"]) - diagonal) < 1e-5


def test_gamma_moves_the_loss_by_exactly_the_weighted_penalties():
    x = torch.rand(6, 1, 64, 64, generator=torch.Generator().manual_seed(0))
    losses, terms = [], None
    for gamma in (3.0, 5.0):
        config = ModelConfig(objective="dip_vae", gamma=gamma, latent_dim=4, seed=0)
        objective = build_objective(config)
        noise = objective.draw_noise(torch.Generator().manual_seed(1), 6, "cpu")
        terms = objective(build(config), x, x, noise, Schedule(step=0))
        losses.append(float(terms["loss"]))
    # λ_od moves by 2 and λ_d = 10·λ_od by 20
    moved = 2.0 * float(terms["dip_off_diagonal"]) + 20.0 * float(terms["dip_diagonal"])
    assert abs((losses[1] - losses[0]) - moved) < 1e-4 * max(1.0, abs(moved))
