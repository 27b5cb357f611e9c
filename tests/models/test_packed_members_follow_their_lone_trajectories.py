"""Packed training: members trained together follow the trajectories they follow alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from random_images import random_images

import models.packed as packed_module
from models import ModelConfig, Trainer, build
from models.packed import (
    CUDA_PROCESS_BYTES,
    PackedTrainer,
    max_pack_size,
    member_memory_bytes,
    pack_memory_bytes,
    vmap_groups,
)

N_IMAGES = 48


@pytest.fixture(scope="module")
def data():
    return random_images(N_IMAGES)
# On whatever device is present. On a GPU, convolutions may use TF32 and reduce in another order from
# one call to the next, so trajectories agree to a looser tolerance there.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
RTOL = 1e-5 if DEVICE == "cpu" else 2e-3


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
    state = first.pack_state_dict()
    resumed = PackedTrainer(configs, images, np.arange(N_IMAGES), device=DEVICE, mode="vmap")
    resumed.load_pack_state_dict(state)
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
    assert vmap_groups(configs) == [[0, 2], [1]]
    assert vmap_groups(configs, pack_size=1) == [[0], [2], [1]]
    losses, trainer = packed(configs, data, "vmap")
    assert trainer.vmapped_groups() == [[0, 2]]  # member 1 alone takes the plain path
    for k, config in enumerate(configs):
        np.testing.assert_allclose(losses[k], alone(config, data)[0], rtol=RTOL)
    assert losses[1] == alone(configs[1], data)[0] or DEVICE != "cpu"  # the very same step


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


# -- wide packs: members of different splits and run lengths --------------------------------------

def test_members_with_their_own_rows_and_run_lengths_follow_their_trajectories(data):
    images, factors = data
    rows = [np.arange(40), np.arange(8, 32)]  # two "splits": 40 and 24 training rows
    configs = [small(epochs=1.0, seed=0), small(epochs=1.0, seed=1, beta=4.0, lr=3e-4)]  # 5 and 3 steps
    for mode in ("vmap", "loop"):
        trainer = PackedTrainer(configs, images, rows, device=DEVICE, mode=mode)
        assert [m.total_steps for m in trainer.members] == [5, 3]
        reports = list(trainer.run(report_every=2))
        for k, config in enumerate(configs):
            alone_trainer = Trainer(build(config), images, rows[k], config, DEVICE)
            expected = [r["loss"] for r in alone_trainer.run(report_every=2)]
            got = [r[k]["loss"] for r in reports if k in r]
            assert [r[k]["step"] for r in reports if k in r] == ([2, 4, 5] if k == 0 else [2, 3])
            if mode == "loop" and DEVICE == "cpu":
                assert got == expected
            else:
                np.testing.assert_allclose(got, expected, rtol=RTOL)
            # the member that finished first kept its final weights and Adam state while the other
            # trained on
            member = trainer.members[k]
            for mine, theirs in zip(member.model.parameters(), alone_trainer.model.parameters()):
                torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-6)
                ours, alone_state = member.optimizer.state[mine], alone_trainer.optimizer.state[theirs]
                for moment in ("exp_avg", "exp_avg_sq"):
                    torch.testing.assert_close(ours[moment], alone_state[moment], rtol=1e-2, atol=1e-6)


def test_a_checkpoint_taken_after_one_member_finished_resumes(data):
    images, _ = data
    rows = [np.arange(40), np.arange(8, 32)]
    configs = [small(epochs=1.0, seed=0), small(epochs=1.0, seed=1, beta=4.0)]
    whole = PackedTrainer(configs, images, rows, device=DEVICE, mode="vmap")
    expected = [r.get(0, {}).get("loss") for r in whole.run(report_every=1)]
    first = PackedTrainer(configs, images, rows, device=DEVICE, mode="vmap")
    for _ in zip(range(3), first.run(report_every=1)):  # member 1 ends at step 3
        pass
    state = first.pack_state_dict()
    assert [m["step"] for m in state["members"]] == [3, 3]
    resumed = PackedTrainer(configs, images, rows, device=DEVICE, mode="vmap")
    resumed.load_pack_state_dict(state)
    rest = [r[0]["loss"] for r in resumed.run(report_every=1)]
    np.testing.assert_allclose(rest, expected[3:], rtol=RTOL)
    assert resumed.members[1].step == 3
    for mine, theirs in zip(resumed.members[1].model.parameters(), whole.members[1].model.parameters()):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-7)


def test_train_rows_must_be_one_array_or_one_per_member(data):
    images, _ = data
    with pytest.raises(ValueError, match="got 3 arrays of training rows for 2 members"):
        PackedTrainer([small(), small(seed=1)], images, [np.arange(8)] * 3, device=DEVICE)


def test_beta_tcvae_members_group_by_training_set_size():
    configs = [small(objective="beta_tcvae", seed=s) for s in range(3)]
    assert vmap_groups(configs, train_sizes=[40, 24, 40]) == [[0, 2], [1]]
    vae = [small(seed=s) for s in range(3)]
    assert vmap_groups(vae, train_sizes=[40, 24, 40]) == [[0, 1, 2]]


# -- out of memory in a pack's first steps --------------------------------------------------------

def _running_out_when(condition, monkeypatch):
    """Make a vmapped step raise CUDA's out-of-memory error whenever ``condition(group)`` holds."""
    step = packed_module._VmapGroup.train_step

    def train_step(self, rows, schedule, live):
        if condition(self):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return step(self, rows, schedule, live)

    monkeypatch.setattr(packed_module._VmapGroup, "train_step", train_step)


def test_a_pack_out_of_memory_in_its_first_steps_is_halved_and_retried(data, monkeypatch):
    _running_out_when(lambda group: len(group.members) > 2, monkeypatch)
    configs = [small(seed=s, beta=b) for s, b in [(0, 1.0), (1, 2.0), (2, 4.0), (3, 8.0)]]
    losses, trainer = packed(configs, data, "vmap")
    assert trainer.vmapped_groups() == [[0, 1], [2, 3]]
    assert len(trainer.halvings) == 1 and "out of GPU memory" in trainer.halvings[0]
    for k, config in enumerate(configs):  # each member as alone: nothing of the failed try remains
        np.testing.assert_allclose(losses[k], alone(config, data)[0], rtol=RTOL)


def test_halving_down_to_one_member_takes_the_plain_step(data, monkeypatch):
    _running_out_when(lambda group: len(group.members) > 1, monkeypatch)
    configs = [small(seed=0), small(seed=1, beta=4.0)]
    losses, trainer = packed(configs, data, "vmap")
    assert trainer.vmapped_groups() == [[0], [1]]
    for k, config in enumerate(configs):
        assert losses[k] == alone(config, data)[0] or DEVICE != "cpu"


def test_out_of_memory_after_the_first_steps_fails(data, monkeypatch):
    _running_out_when(lambda group: group.members[0].step == 2, monkeypatch)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        packed([small(seed=0), small(seed=1)], data, "vmap")


# -- a member's current weights during training ---------------------------------------------------

def test_current_model_gives_a_members_weights_now_not_at_the_last_checkpoint(data):
    images, _ = data
    configs = [small(seed=0), small(seed=1, beta=4.0)]
    trainer = PackedTrainer(configs, images, np.arange(N_IMAGES), device=DEVICE, mode="vmap")
    initial = [p.detach().clone() for p in trainer.members[1].model.parameters()]
    reference = Trainer(build(configs[1]), images, np.arange(N_IMAGES), configs[1], DEVICE)
    runs = trainer.run(report_every=1)
    next(runs)
    reference.train_step()
    assert all(torch.equal(a, b) for a, b in zip(trainer.members[1].model.parameters(), initial))  # stale
    current = trainer.current_model(1)
    for mine, theirs in zip(current.parameters(), reference.model.parameters()):  # one Adam step of 1e-3
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)
    rest = [r[1]["loss"] for r in runs]  # training goes on from the stack, unchanged
    reference_rest = [reference.advance(1).values[0, 0].item() for _ in range(2)]
    np.testing.assert_allclose(rest, reference_rest, rtol=RTOL)


def test_the_schedule_table_is_the_schedules_step_by_step(data):
    images, _ = data
    config = small(kl_warmup_steps=3, capacity_steps=5, capacity_max=7.0, lr_milestones=(2, 4), lr_decay=0.3,
                   objective="annealed_vae", steps=9)
    trainer = Trainer(build(config), images, np.arange(N_IMAGES), config, DEVICE)
    for start in (0, 3):
        trainer.step = start
        table = trainer.schedule_table(6)
        for row, step in enumerate(range(start, start + 6)):
            trainer.step = step
            assert tuple(table[row]) == (trainer.kl_weight(), trainer.capacity(), trainer.learning_rate())
        trainer.step = start


# -- memory --------------------------------------------------------------------------------------

def test_gpu_pack_size_leaves_room_for_the_process_and_its_dataset():
    config = ModelConfig()
    need, gib = member_memory_bytes(config), 2**30
    free = 20 * gib
    # a 3 GiB dataset fits in half the memory: uploaded, so counted
    assert max_pack_size(config, "cuda", free_bytes=free, dataset=3 * gib) == int(
        (0.8 * free - CUDA_PROCESS_BYTES - 3 * gib) // need)
    # a 12 GiB one does not: it stays in host memory and costs the GPU nothing
    assert max_pack_size(config, "cuda", free_bytes=free, dataset=12 * gib) == int(
        (0.8 * free - CUDA_PROCESS_BYTES) // need)
    assert pack_memory_bytes(config, 10, "cuda", 3 * gib, free) == CUDA_PROCESS_BYTES + 3 * gib + 10 * need
    assert pack_memory_bytes(config, 10, "cpu", 3 * gib, free) == 10 * need
    assert max_pack_size(config, "cuda", free_bytes=gib, dataset=3 * gib) == 1  # never below one


def test_advance_steps_every_member_as_far_as_its_end(data):
    images, _ = data
    rows = [np.arange(40), np.arange(8, 32)]
    configs = [small(epochs=1.0, seed=0), small(epochs=1.0, seed=1, beta=4.0)]  # 5 and 3 steps
    trainer = PackedTrainer(configs, images, rows, device=DEVICE, mode="vmap")
    blocks = trainer.advance(4)
    assert [len(blocks[k].values) for k in (0, 1)] == [4, 3] and [m.step for m in trainer.members] == [4, 3]
    for k, config in enumerate(configs):
        alone_trainer = Trainer(build(config), images, rows[k], config, DEVICE)
        expected = [r["loss"] for r in alone_trainer.run(report_every=1)]
        np.testing.assert_allclose(blocks[k].values[:, 0].cpu().numpy(), expected[:4], rtol=RTOL)
    assert list(trainer.advance(4)) == [0] and trainer.members[0].step == 5
