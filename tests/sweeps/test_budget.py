"""``--budget F`` (``python -m sweeps.paper_grid``, ``sweeps.run(budget=F)``, the demo's
``--budget``): every model's training budget multiplied by F, the run's length and every schedule
counted in steps with it, in an experiment of its own name."""

import dataclasses

import pytest

from models.config import BUDGET_SETTINGS, scaled_budget
from sweeps.errors import UsageError
from sweeps.options import SweepOptions
from sweeps.paper_grid import plan_trials


def _trials(preset: str, scale: str, budget: float = 1.0):
    return plan_trials(SweepOptions(preset=preset, scale=scale, budget=budget))


def test_half_the_budget_halves_the_length_and_every_step_schedule():
    full = [t for t in _trials("montero2022", "smoke").trials if t.get("objective") == "cascade_vae"][0]
    half = [t for t in _trials("montero2022", "smoke", 0.5).trials if t.get("objective") == "cascade_vae"][0]
    # M22's CascadeVAE at smoke: 300 steps, a release every 60, 120 warm-up steps (sweeps/presets.py)
    assert (full.model.total_steps(10**6), full.model.cascade_steps, full.model.discrete_warmup_steps) == \
        (300, 60, 120)
    assert (half.model.total_steps(10**6), half.model.cascade_steps, half.model.discrete_warmup_steps) == \
        (150, 30, 60)
    # a default it did not set is a schedule too: the annealed capacity's 100,000 steps
    assert half.model.capacity_steps == full.model.capacity_steps // 2
    # everything else is the same trial, under another key
    same = {k: v for k, v in full.items() if k not in (*BUDGET_SETTINGS, "trial_key")}
    assert {k: half.get(k) for k in same} == same and half.trial_key != full.trial_key


def test_an_epoch_budget_is_halved_in_epochs_not_in_the_epochs_length():
    # M21's ground-truth decoder as its code ran it: 500 epochs of 10 steps
    full, half = _trials("montero2021", "demo").trials[0], _trials("montero2021", "demo", 0.5).trials[0]
    assert (full.model.epochs, full.model.epoch_length, full.model.total_steps(10**6)) == (500, 10, 5000)
    assert (half.model.epochs, half.model.epoch_length, half.model.total_steps(10**6)) == (250, 10, 2500)


def test_warm_ups_and_milestones_scale_and_off_stays_off():
    config = _trials("dittadi2021", "small").trials[0].model
    scaled = scaled_budget(config, 0.5)
    # D21 at small: 40,000 steps, lr halved at 15,000 and 30,000
    assert scaled["steps"] == 20000 and scaled["lr_milestones"] == (7500, 15000)
    assert scaled_budget(dataclasses.replace(config, kl_warmup_steps=0), 0.5)["kl_warmup_steps"] == 0
    # a schedule that is on never rounds to off
    assert scaled_budget(dataclasses.replace(config, kl_warmup_steps=1), 0.1)["kl_warmup_steps"] == 1
    assert scaled_budget(config, 1.0)["steps"] == config.steps


def test_the_budget_names_its_own_experiment():
    assert _trials("dittadi2021", "demo").name == "dittadi2021-demo"
    assert _trials("dittadi2021", "demo", 0.5).name == "dittadi2021-demo-budget0.5"
    assert _trials("default", "smoke", 2).name == "default-budget2"


@pytest.mark.parametrize("budget", [0, -0.5, float("nan"), float("inf")])
def test_a_budget_that_is_not_a_positive_number_is_refused_naming_the_flag(budget):
    with pytest.raises(UsageError, match="--budget must be a finite number > 0"):
        SweepOptions(preset="default", budget=budget)
