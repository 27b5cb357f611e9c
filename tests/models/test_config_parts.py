"""ModelConfig's settings, each declared once, and its three parts made from the declarations:
together the parts hold every field once, each validates its own fields naming them, each module is
handed its part whole; types are checked on the real type hints, and docs/models.md's settings
table is the declarations'."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from models import LossConfig, ModelConfig, NetworkConfig, OptimisationConfig, build, build_objective
from models.config import PARTS, SETTINGS, at_least, setting, validate, with_settings_table

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_parts_hold_every_field_once_as_declared():
    names = [f.name for part in PARTS.values() for f in dataclasses.fields(part)]
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(ModelConfig))
    assert len(names) == len(set(names))
    for name, part in PARTS.items():
        declared = [s.name for s in SETTINGS.values() if s.part == name]
        assert [f.name for f in dataclasses.fields(part)] == declared
        assert all(getattr(part(), f.name) == SETTINGS[f.name].default for f in dataclasses.fields(part))


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


@pytest.mark.parametrize("field, value, message", [
    ("gamma", "35", "gamma: expected a number, or None; got '35'"),  # float | None
    ("bf16", 1, "bf16: expected true or false, or None; got 1"),  # bool | None
    ("likelihood", 3, "likelihood: expected a name (text), or None; got 3"),  # str | None
    ("lr_milestones", [150, 2.5], "lr_milestones: expected a list of whole numbers; got [150, 2.5]"),
    ("latent_dim", True, "latent_dim: expected a whole number; got True"),
    ("epochs", float("nan"), "epochs: must be a finite number; got nan"),
])
def test_types_are_checked_on_the_type_hints(field, value, message):
    with pytest.raises(TypeError) as refused:
        ModelConfig(**{field: value})
    assert str(refused.value) == f"invalid model config: {message}"


@dataclasses.dataclass(frozen=True)
class Evaluated:
    """A config with an ``int | None`` setting, checked as ModelConfig checks its own."""

    every: int | None = setting("optimisation", None, "steps between evaluations (None: at the end)",
                                at_least(1), unit="steps")

    def __post_init__(self):
        validate(self)


def test_an_int_or_none_setting_refuses_another_type_naming_the_field():
    assert Evaluated().every is None and Evaluated(every=5).every == 5
    for wrong in (2.5, "5", True, [5]):
        with pytest.raises(TypeError) as refused:
            Evaluated(every=wrong)
        assert str(refused.value) == ("invalid model config: every: expected a whole number, or None; "
                                      f"got {wrong!r}")
    with pytest.raises(ValueError) as refused:
        Evaluated(every=0)
    assert str(refused.value) == "invalid model config: every: must be at least 1 or None; got 0"


def test_the_docs_settings_table_is_the_declarations():
    page = (ROOT / "docs" / "models.md").read_text()
    assert with_settings_table(page) == page, (
        "docs/models.md's settings table differs from the declarations in models/config.py; rewrite it: "
        'python -c "from models.config import write_settings_table; write_settings_table()"')
    for name, declared in SETTINGS.items():
        assert f"| `{name}` | {declared.part} |" in page
