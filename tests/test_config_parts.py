"""ModelConfig's three parts: together they hold every field once, each validates its own fields
naming them, and each module is handed its part whole."""

from __future__ import annotations

import dataclasses

import pytest

from models import LossConfig, ModelConfig, NetworkConfig, OptimisationConfig, build, build_objective
from models.config import PARTS


def test_the_parts_hold_every_field_once():
    names = [f.name for part in PARTS.values() for f in dataclasses.fields(part)]
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(ModelConfig))
    assert len(names) == len(set(names))


def test_the_parts_carry_the_normalised_values():
    config = ModelConfig(objective="factorvae", task="gt_decoder", lr_milestones=[3, 5], latent_dim=4)
    assert isinstance(config.network, NetworkConfig) and config.network.task == "ground_truth_decoder"
    assert isinstance(config.loss, LossConfig) and config.loss.objective == config.objective == "factor_vae"
    assert isinstance(config.optimisation, OptimisationConfig)
    assert config.optimisation.lr_milestones == config.lr_milestones == (3, 5)
    assert set(config.to_dict()) == {f.name for f in dataclasses.fields(ModelConfig)}  # no part in the record
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.loss.beta = 2.0


@pytest.mark.parametrize("part, field, value", [
    ("network", "latent_dim", 0), ("network", "channels", 2), ("loss", "beta", -1.0),
    ("loss", "discrete_categories", 1), ("optimisation", "lr", 0.0), ("optimisation", "lr_decay", 2.0),
])
def test_each_part_validates_its_own_fields(part, field, value):
    values = {f.name: getattr(getattr(ModelConfig(), part), f.name) for f in dataclasses.fields(PARTS[part])}
    with pytest.raises(ValueError, match=f"^invalid model config: {field}: "):
        PARTS[part](**{**values, field: value})
    with pytest.raises(ValueError, match=f"{field}: "):
        ModelConfig(**{field: value})


def test_modules_take_their_part():
    config = ModelConfig(objective="factor_vae", latent_dim=4, discriminator_width=8)
    assert build(config).network is config.network
    objective = build_objective(config, dataset_size=10)
    assert objective.config is config.loss and objective.latent_dim == 4 and objective.dataset_size == 10
