"""The training engine (models/engine.py), on tiny models and a few steps, each checked against a
computation of its own: one step is one Adam step on the step's (clipped) gradients, at learning
rate 0 it changes nothing, clipping scales the gradients to the bound, the learning rate, KL warm-up and
capacity follow their schedules, a checkpoint resumes to exactly the uninterrupted run, and a NaN
or infinite loss term stops training naming its step and term. Packs of models are tested in
tests/models/test_packed_members_follow_their_lone_trajectories.py, the GPU path in
tests/models/test_gpu_path.py."""

import io

import numpy as np
import pytest
import torch
from dataset_files import blobs

from models import ModelConfig, NonFiniteLossError, Trainer, add_input_noise, build
from models.engine import clip_gradients

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def beta_vae(**settings) -> Trainer:
    config = ModelConfig(**{"steps": 10, "batch_size": 4, "latent_dim": 4, "seed": 1, **settings})
    images, _ = blobs(8)
    return Trainer(build(config), images, np.arange(8), config, "cpu")


def parameters(trainer: Trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.model.parameters()]


def gradients_at_the_update(trainer: Trainer) -> list[torch.Tensor]:
    """The gradients the optimiser steps with, recorded as ``train_step`` calls its ``step``."""
    seen, step = [], trainer.optimizer.step

    def record(*args, **kwargs):
        seen.extend(p.grad.detach().clone() for p in trainer.model.parameters())
        return step(*args, **kwargs)

    trainer.optimizer.step = record
    return seen


# ---------------------------------------------------------------------------------------------
# the step


def test_a_step_at_learning_rate_0_changes_no_parameter():
    # the config refuses lr 0; the step takes its rate from the schedule, set to 0 here
    trainer = beta_vae(lr=1e-3)
    trainer.learning_rate = lambda: 0.0
    before = parameters(trainer)
    grads = gradients_at_the_update(trainer)
    terms = trainer.train_step()
    assert trainer.step == 1 and torch.isfinite(terms["loss"])
    assert any(g.abs().max() > 0 for g in grads)  # there was something to step along
    assert all(torch.equal(a, b) for a, b in zip(before, parameters(trainer)))


def test_the_first_step_is_one_adam_step_on_the_steps_gradients():
    # Adam's first step, bias-corrected: m̂ = g, v̂ = g², so each parameter moves by
    # lr·g / (|g| + eps): by at most lr, and by almost exactly lr where |g| ≫ eps
    lr, eps = 1e-3, 1e-8
    trainer = beta_vae(lr=lr)
    before = parameters(trainer)
    grads = gradients_at_the_update(trainer)
    trainer.train_step()
    for p0, g, p1 in zip(before, grads, parameters(trainer)):
        expected = p0 - lr * g / (g.abs() + eps)
        rounding = 2 * torch.finfo(p0.dtype).eps * max(1.0, p0.abs().max().item())  # float32 at |p|
        torch.testing.assert_close(p1, expected, rtol=0, atol=rounding)
        assert (p1 - p0).abs().max() <= lr + rounding


def test_clipping_scales_the_steps_gradients_to_the_bound():
    max_norm = 0.01
    free, clipped = beta_vae(lr=1e-3), beta_vae(lr=1e-3, grad_clip_norm=max_norm)
    free_grads, clipped_grads = gradients_at_the_update(free), gradients_at_the_update(clipped)
    free.train_step()
    clipped.train_step()  # the same weights, batch and noise: the same gradients before clipping
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in free_grads]))
    assert norm > 100 * max_norm  # the bound bites
    scale = max_norm / (norm + 1e-6)
    for g, c in zip(free_grads, clipped_grads):
        torch.testing.assert_close(c, g * scale, rtol=1e-5, atol=1e-12)
    clipped_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in clipped_grads]))
    assert clipped_norm <= max_norm * (1 + 1e-5)


def test_clip_gradients_leaves_gradients_within_the_bound_alone():
    p = torch.nn.Parameter(torch.zeros(2))
    p.grad = torch.tensor([3.0, 4.0])  # norm 5
    clip_gradients([p], None)
    assert p.grad.tolist() == [3.0, 4.0]
    clip_gradients([p], 10.0)
    assert p.grad.tolist() == [3.0, 4.0]
    clip_gradients([p], 1.0)
    assert p.grad.tolist() == pytest.approx([0.6, 0.8], rel=1e-5)


# ---------------------------------------------------------------------------------------------
# schedules, checkpoints and the input noise


@pytest.mark.parametrize("objective", ["beta_vae", "factor_vae", "ada_gvae"])
def test_resume_from_a_checkpoint_follows_the_same_trajectory(objective):
    config = ModelConfig(
        objective=objective,
        steps=10,
        lr=1e-3,
        batch_size=8,
        seed=3,
        kl_warmup_steps=6,
        lr_milestones=(4, 8),
        grad_clip_norm=5.0,
        input_noise_subpixel_std=0.05,
        input_noise_greyscale_std=0.05,
        discriminator_width=32,
    )
    images, factors = blobs(32)
    rows = np.arange(32)
    straight = Trainer(build(config), images, rows, config, "cpu", factors=factors)
    uninterrupted = list(straight.run(report_every=1))

    first = Trainer(build(config), images, rows, config, "cpu", factors=factors)
    reports = list(first.run(until_step=5, report_every=1))
    state = first.state_dict()
    other = ModelConfig(**{**config.to_dict(), "seed": 99})
    resumed = Trainer(build(other), images, rows, config, "cpu", factors=factors)
    # differently initialised: the checkpoint must fix it
    resumed.objective = type(resumed.objective)(config.loss, config.latent_dim)
    resumed.load_state_dict(state)
    reports += list(resumed.run(report_every=1))
    drop = "images_per_second"
    assert [{k: v for k, v in r.items() if k != drop} for r in reports] == [
        {k: v for k, v in r.items() if k != drop} for r in uninterrupted
    ]


def test_schedules_lr_halving_kl_warmup_and_capacity():
    images, _ = blobs(8)
    config = ModelConfig(
        lr=1e-3,
        lr_milestones=(2, 4),
        kl_warmup_steps=4,
        capacity_max=20.0,
        capacity_steps=10,
        batch_size=4,
        steps=5,
    )
    trainer = Trainer(build(config), images, np.arange(8), config, "cpu")
    seen = []
    for _ in range(5):
        seen.append((trainer.learning_rate(), trainer.kl_weight(), trainer.capacity()))
        trainer.train_step()
    assert [s[0] for s in seen] == pytest.approx([1e-3, 1e-3, 5e-4, 5e-4, 2.5e-4])
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(2.5e-4)
    assert [s[1] for s in seen] == pytest.approx([0, 0.25, 0.5, 0.75, 1.0])
    assert [s[2] for s in seen] == pytest.approx([0, 2, 4, 6, 8])


def test_input_noise_has_both_components():
    x = torch.zeros(4, 3, 64, 64)
    generator = torch.Generator().manual_seed(0)
    assert torch.equal(add_input_noise(x, 0.0, 0.0, generator), x)
    subpixel = add_input_noise(x, 0.1, 0.0, generator)
    assert subpixel.std().item() == pytest.approx(0.1, rel=0.05)
    assert abs(torch.corrcoef(torch.stack([subpixel[:, 0].flatten(), subpixel[:, 1].flatten()]))[0, 1]) < 0.05
    greyscale = add_input_noise(x, 0.0, 0.2, generator)
    assert torch.equal(greyscale[:, 0], greyscale[:, 1]) and torch.equal(greyscale[:, 1], greyscale[:, 2])
    # drawn at 1/16 resolution and upsampled: neighbouring pixels almost equal, far ones independent
    assert (greyscale[..., 1:] - greyscale[..., :-1]).abs().mean() < 0.1 * greyscale.abs().mean()
    assert greyscale.std().item() > 0.05


def test_a_checkpoint_saved_and_loaded_as_data_resumes_to_the_same_weights_exactly():
    straight = beta_vae(lr=1e-3, kl_warmup_steps=4, lr_milestones=(3,), grad_clip_norm=1.0,
                        input_noise_subpixel_std=0.05)
    list(straight.run(report_every=5))
    first = beta_vae(lr=1e-3, kl_warmup_steps=4, lr_milestones=(3,), grad_clip_norm=1.0,
                     input_noise_subpixel_std=0.05)
    list(first.run(until_step=4, report_every=2))
    saved = io.BytesIO()
    torch.save(first.state_dict(), saved)
    saved.seek(0)
    resumed = beta_vae(lr=1e-3, kl_warmup_steps=4, lr_milestones=(3,), grad_clip_norm=1.0,
                       input_noise_subpixel_std=0.05, seed=7)  # other weights: the checkpoint sets them
    resumed.load_state_dict(torch.load(saved, weights_only=True))
    assert resumed.step == 4
    list(resumed.run(report_every=5))
    assert resumed.step == straight.step == 10
    assert all(torch.equal(a, b) for a, b in zip(parameters(resumed), parameters(straight)))


# ---------------------------------------------------------------------------------------------
# a loss that is not finite, and bf16 off a GPU


def test_a_nan_loss_stops_with_the_step_and_term():
    config = ModelConfig(steps=5, batch_size=8)
    model = build(config)
    with torch.no_grad():
        model.decoder.deconv[-1].bias.fill_(float("nan"))
    images, _ = blobs(16)
    trainer = Trainer(model, images, np.arange(16), config, "cpu")
    with pytest.raises(NonFiniteLossError, match=r"step 1: loss term .*reconstruction"):
        list(trainer.run(report_every=3))


def test_a_loss_that_turns_infinite_mid_window_names_its_step():
    config = ModelConfig(steps=10, batch_size=4)
    images, _ = blobs(8)
    trainer = Trainer(build(config), images, np.arange(8), config, "cpu")
    real_step = trainer.train_step

    def step(rows=None):
        terms = real_step(rows)
        if trainer.step == 4:
            terms["kl"] = torch.tensor(float("inf"))
        return terms

    trainer.train_step = step
    with pytest.raises(NonFiniteLossError, match=r"step 4: loss term kl is not finite"):
        list(trainer.run(report_every=10))


def test_bf16_off_gpu_warns_and_trains_in_float32():
    images, _ = blobs(8)
    config = ModelConfig(steps=4, batch_size=4, bf16=True)
    with pytest.warns(UserWarning, match="bf16"):
        trainer = Trainer(build(config), images, np.arange(8), config, "cpu")
    reports = list(trainer.run(report_every=2))
    assert not trainer.bf16 and [r["step"] for r in reports] == [2, 4]
