"""One model and a pack answer the same calls (what sweeps/trainable.py drives): a lone
``Trainer`` is a pack of one (its ``members``, ``current_model(k)``, ``errors``, ``member_reports``
and a checkpoint state in the pack's layout), and a pack's members are built as a lone model is
(``models.build_trainer``), so a member starts with the weights it has alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from random_images import random_images

from models import ModelConfig, NonFiniteLossError, Trainer, build, build_trainer
from models.packed import PackedTrainer

N_IMAGES = 32


@pytest.fixture(scope="module")
def data():
    return random_images(N_IMAGES)


CONFIGS = [ModelConfig(steps=4, batch_size=8, lr=1e-3, beta=1.0 + k, seed=k) for k in range(2)]


def trainers(data):
    images, factors = data
    lone = Trainer(build(CONFIGS[0]), images, np.arange(N_IMAGES), CONFIGS[0], "cpu", factors=factors)
    pack = PackedTrainer(CONFIGS, images, np.arange(N_IMAGES), device="cpu", factors=factors, mode="loop")
    return lone, pack


def test_a_lone_trainer_and_a_pack_answer_the_same_calls(data):
    lone, pack = trainers(data)
    for trainer, size in ((lone, 1), (pack, 2)):
        assert len(trainer.members) == size and all(isinstance(m, Trainer) for m in trainer.members)
        assert trainer.errors == {}
        for k, member in enumerate(trainer.members):
            assert trainer.current_model(k) is member.model
        reports = list(trainer.member_reports(report_every=2))
        assert [sorted(r) for r in reports] == [list(range(size))] * 2  # {member index: report}
        assert [r[0]["step"] for r in reports] == [2, 4]
        state = trainer.pack_state_dict()
        assert sorted(state) == ["errors", "members"] and len(state["members"]) == size
        assert state["errors"] == {} and [m["step"] for m in state["members"]] == [4] * size
    assert lone.pack_state_dict()["members"][0].keys() == lone.state_dict().keys()  # a Trainer checkpoint


def test_the_pack_layout_state_resumes_either(data):
    for make in (lambda: trainers(data)[0], lambda: trainers(data)[1]):
        whole, first = make(), make()
        expected = [r[0]["loss"] for r in whole.member_reports(report_every=1)]
        for _ in zip(range(2), first.member_reports(report_every=1)):
            pass
        resumed = make()
        resumed.load_pack_state_dict(first.pack_state_dict())
        assert [r[0]["loss"] for r in resumed.member_reports(report_every=1)] == expected[2:]


def test_errors_from_a_final_checkpoint_fail_a_lone_model_and_mark_a_pack_member(data):
    lone, pack = trainers(data)
    lone.load_errors({})
    with pytest.raises(NonFiniteLossError, match="kl is not finite"):
        lone.load_errors({"0": "step 3: loss term kl is not finite"})
    pack.load_errors({"1": "step 3: loss term kl is not finite"})
    assert pack.errors == {1: "step 3: loss term kl is not finite"}


def test_a_packs_member_is_built_as_the_plain_path_builds_one_model(data):
    images, factors = data
    pack = trainers(data)[1]
    for config, member in zip(CONFIGS, pack.members):
        plain = build_trainer(config, images, factors, None, np.arange(N_IMAGES), "cpu")
        assert type(member) is type(plain) and member.total_steps == plain.total_steps
        for (name, a), (_, b) in zip(member.model.state_dict().items(), plain.model.state_dict().items()):
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
