"""Packed training: members trained together follow the trajectories they follow alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models import ModelConfig, Trainer, build
from models.packed import (
    PackedTrainer,
    max_pack_size,
    member_memory_bytes,
    split_into_packs,
)

N_IMAGES = 48
# On whatever device is present. On a GPU, convolutions may use TF32 and reduce in another order from
# one call to the next, so trajectories agree to a looser tolerance there.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
RTOL = 1e-5 if DEVICE == "cpu" else 2e-3


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    images = ((rng.random((N_IMAGES, 1, 64, 64)) > 0.7) * 255).astype(np.uint8)
    factors = rng.integers(0, 3, (N_IMAGES, 4))
    return images, factors


def small(**fields) -> ModelConfig:
    return ModelConfig(**{"steps": 3, "batch_size": 8, "lr": 1e-3, **fields})


def alone(config, data, report_every=1):
    images, factors = data
    trainer = Trainer(build(config), images, np.arange(N_IMAGES), config, DEVICE, factors=factors)
    return [r["loss"] for r in trainer.run(report_every=report_every)], trainer


def packed(configs, data, mode, report_every=1):
    images, factors = data
    trainer = PackedTrainer(configs, images, np.arange(N_IMAGES), device=DEVICE, factors=factors, mode=mode)
    losses = {k: [] for k in range(len(configs))}
    for reports in trainer.run(report_every=report_every):
        for k, report in reports.items():
            losses[k].append(report.get("loss", float("nan")))
    return losses, trainer


# members that differ in every kind of scalar: β, seed, learning rate, clipping, warm-up, noise
BETA_VAE_PACK = [
    small(beta=1.0, seed=0),
    small(beta=4.0, seed=1, lr=3e-4, grad_clip_norm=0.5, kl_warmup_steps=3),
    small(beta=2.0, seed=2, input_noise_subpixel_std=0.1, lr_milestones=(2,), lr_decay=0.5),
]


@pytest.mark.parametrize("mode", ["vmap", "loop"])
def test_members_trained_packed_follow_their_trajectories_alone(data, mode):
    losses, _ = packed(BETA_VAE_PACK, data, mode)
    for k, config in enumerate(BETA_VAE_PACK):
        expected, _ = alone(config, data)
        if mode == "loop" and DEVICE == "cpu":  # the very same operations
            assert losses[k] == expected
        else:  # grouped convolutions sum in another order: float tolerance
            np.testing.assert_allclose(losses[k], expected, rtol=RTOL)


def test_objectives_with_their_own_optimiser_pack_too(data):
    configs = [small(objective="factor_vae", gamma=g, seed=s, discriminator_width=32, discriminator_layers=3,
                     discriminator_lr=lr) for g, s, lr in [(10.0, 0, 1e-4), (40.0, 1, 1e-3)]]
    losses, trainer = packed(configs, data, "vmap")
    for k, config in enumerate(configs):
        expected, reference = alone(config, data)
        np.testing.assert_allclose(losses[k], expected, rtol=RTOL)
        # the discriminator trained exactly as alone, and its Adam state is an ordinary one
        for mine, theirs in zip(trainer.members[k].objective.discriminator.parameters(),
                                reference.objective.discriminator.parameters()):
            torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-6)


def test_pairs_and_prior_samples_pack(data):
    for objective in ("ada_gvae", "wae_mmd"):
        configs = [small(objective=objective, beta=b, seed=s, mmd_weight=w)
                   for b, s, w in [(1.0, 0, 10.0), (2.0, 3, 20.0)]]
        losses, _ = packed(configs, data, "vmap")
        for k, config in enumerate(configs):
            np.testing.assert_allclose(losses[k], alone(config, data)[0], rtol=RTOL)


def test_a_packed_checkpoint_resumes_packed_or_alone(data):
    configs = BETA_VAE_PACK[:2]
    full, _ = packed(configs, data, "vmap")
    images, factors = data
    first = PackedTrainer(configs, images, np.arange(N_IMAGES), device=DEVICE, mode="vmap")
    for _ in zip(range(2), first.run(report_every=1)):
        pass
    state = first.state_dict()
    resumed = PackedTrainer(configs, images, np.arange(N_IMAGES), device=DEVICE, mode="vmap")
    resumed.load_state_dict(state)
    rest = {k: [] for k in range(2)}
    for reports in resumed.run(report_every=1):
        for k, report in reports.items():
            rest[k].append(report["loss"])
    for k in range(2):
        np.testing.assert_allclose(full[k][2:], rest[k], rtol=RTOL)
    # each member's checkpoint is an ordinary Trainer checkpoint
    trainer = Trainer(build(configs[1]), images, np.arange(N_IMAGES), configs[1], DEVICE)
    trainer.load_state_dict(state["members"][1])
    np.testing.assert_allclose([r["loss"] for r in trainer.run(report_every=1)], full[1][2:], rtol=RTOL)


def test_members_of_different_shapes_are_split_into_groups_not_refused(data):
    configs = [small(latent_dim=4, seed=0), small(latent_dim=6, seed=1),
               small(latent_dim=4, seed=2, beta=3.0)]
    assert split_into_packs(configs) == [[0, 2], [1]]
    assert split_into_packs(configs, pack_size=1) == [[0], [2], [1]]
    losses, trainer = packed(configs, data, "vmap")
    assert trainer.vmapped_groups() == [[0, 2]]  # member 1 alone takes the plain path
    for k, config in enumerate(configs):
        np.testing.assert_allclose(losses[k], alone(config, data)[0], rtol=RTOL)


def test_a_member_whose_loss_diverges_stops_alone(data):
    configs = [small(seed=0), small(seed=1, lr=1e9, steps=30)]
    losses, trainer = packed(configs, data, "vmap", report_every=2)
    assert 1 in trainer.errors and "not finite" in trainer.errors[1]
    assert 0 not in trainer.errors
    assert trainer.members[0].step == 3 and len(losses[0]) == 2
    np.testing.assert_allclose(losses[0], alone(configs[0], data, report_every=2)[0], rtol=RTOL)


def test_pack_size_is_bounded_by_memory():
    config = ModelConfig()
    need = member_memory_bytes(config)
    # burgess at batch 64: 4 copies of ~0.3M parameters plus activations; tens of MB
    assert 5e6 < need < 5e8
    assert max_pack_size(config, "cpu", free_bytes=10 * need) == 8
    assert max_pack_size(config, "cpu", free_bytes=need // 2) == 1


def test_bad_mode_and_empty_pack_are_refused(data):
    images, _ = data
    with pytest.raises(ValueError, match="mode: unknown 'fast'"):
        PackedTrainer([small()], images, np.arange(N_IMAGES), device=DEVICE, mode="fast")
    with pytest.raises(ValueError, match="at least one"):
        PackedTrainer([], images, np.arange(N_IMAGES), device=DEVICE)
