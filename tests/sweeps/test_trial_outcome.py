"""A trial's outcome crosses Tune as plain data and comes back whole (sweeps/outcome.py): the
trainable's ``TrialOutcome.to_report`` names each model by its trial key, never its settings, and
the driver's ``from_report`` (with the plan's trials) gives back the outcome the trainable had."""

import json

import pytest

from sweeps.outcome import ModelOutcome, TrialOutcome
from sweeps.trials import TrialConfig


def trial(seed, beta=1.0):
    return TrialConfig.complete({"dataset": "dsprites", "split": "blank_side", "n_images": 100,
                                 "data_seed": 0, "report_every": 5, "n_nll": 10, "n_metric": 10,
                                 "objective": "beta_vae", "steps": 10, "beta": beta, "seed": seed})


def trained(member, **metrics):
    return ModelOutcome(member, step=10, steps=10, n_images=100, bf16=False, train_seconds=2.5,
                        train_started_at=1.7e9, train_ended_at=1.7e9 + 5, data_uri="generator:dsprites",
                        data_content_id="abc123", metrics=metrics)


FACTS = {"node_id": "n1", "device": "cpu", "device_name": "cpu", "disgen_version": "0.1", "git_commit": None,
         "git_dirty": None, "python_version": "3.11", "torch_version": "2.4", "ray_version": "2.60"}

OUTCOMES = {
    "a lone model, evaluated": TrialOutcome(
        [trained(trial(0), test_nll=12.5, eval_seconds=1.0, eval_started_at=1.7e9 + 6)], step=10, facts=FACTS,
        results_part="part-1"),
    "a pack, one member diverged": TrialOutcome(
        [trained(trial(0), test_nll=12.5), ModelOutcome(trial(1), step=7, error="loss term kl is not finite"),
         trained(trial(2), test_nll=9.0, mig=float("nan"))], step=10, facts=FACTS, results_part="part-2"),
    "a pack, its evaluation deferred": TrialOutcome(
        [trained(trial(0)), trained(trial(1))], step=10, facts=FACTS, evaluated=False,
        data_reference={"uri": "generator:dsprites", "content_id": "abc123"}, cpus_per_trial=2.0),
    "no room for the data": TrialOutcome(
        [ModelOutcome(trial(0), step=0, error="NodeCacheFull: 2 GiB needed")], step=0,
        facts={"node_id": "n1"}),
}


@pytest.mark.parametrize("name", OUTCOMES)
def test_an_outcome_goes_through_its_report_and_back_whole(name):
    outcome = OUTCOMES[name]
    report = json.loads(json.dumps(outcome.to_report()))  # as Tune writes it into result.json
    assert report["done"] is True
    assert [m["trial_key"] for m in report["members"]] == [t.trial_key for t in outcome.trials]
    assert all("config" not in m and "beta" not in m for m in report["members"])  # no settings
    assert not any(isinstance(v, dict) and "beta" in v for v in report.values())
    back = TrialOutcome.from_report({**report, "trial_id": "abc_00000", "time_total_s": 3.0}, outcome.trials)
    assert back.trial_id == "abc_00000"  # Tune's, put in every result
    assert repr(back.members) == repr(outcome.members)  # NaN metrics compare by their text
    assert back.trials == outcome.trials and all(a is b for a, b in zip(back.trials, outcome.trials))
    for name in ("step", "facts", "evaluated", "results_part", "data_reference", "cpus_per_trial"):
        assert getattr(back, name) == getattr(outcome, name), name


def test_a_lone_models_report_holds_its_values_at_the_top_for_tune():
    report = OUTCOMES["a lone model, evaluated"].to_report()
    assert report["test_nll"] == 12.5 and report["train_seconds"] == 2.5 and "trial_key" not in report
    assert "test_nll" not in OUTCOMES["a pack, its evaluation deferred"].to_report()


def test_an_older_result_whose_members_carry_their_settings_is_read():
    member = {"config": trial(3).to_dict(), "test_nll": 1.0, "step": 10,
              "history": [{"step": 5, "loss": 2.0}]}
    outcome = TrialOutcome.from_report({"done": True, "step": 10, "members": [member]})
    assert outcome.trials == [trial(3)] and outcome.members[0].metrics == {"test_nll": 1.0}
    assert outcome.members[0].history == [{"step": 5, "loss": 2.0}]


def test_a_member_out_of_its_place_is_refused():
    report = OUTCOMES["a pack, one member diverged"].to_report()
    with pytest.raises(ValueError, match="not its config's member there"):
        TrialOutcome.from_report(report, [trial(1), trial(0), trial(2)])
