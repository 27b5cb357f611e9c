"""--resume against the plan an experiment keeps (sweeps/plan_record.py): more seeds extend it; a
removed trial, a changed setting or a search other than a plain grid is refused with the difference.
The real drivers that resume are in tests/end_to_end/ (test_resume.py, test_extension.py)."""

import pytest

from sweeps import plan_record
from sweeps.errors import UsageError
from sweeps.trials import TrialConfig


def trial(**settings):
    base = {"dataset": "dsprites", "split": "blank_side", "n_images": 100, "data_seed": 0, "report_every": 5,
            "n_nll": 10, "n_metric": 10, "architecture": "burgess", "objective": "beta_vae", "steps": 10,
            "beta": 1.0, "seed": 0}
    return TrialConfig.complete({**base, **settings})


def test_the_plan_difference_names_added_and_removed_trials_and_the_settings(tmp_path):
    old = plan_record.make_record([trial(seed=0), trial(seed=1)], "grid", "none")
    plan_record.write(str(tmp_path), old)
    assert plan_record.check_resume(str(tmp_path), old) == []
    # more seeds, and the grid renamed (preset) with another report interval: an extension
    more = plan_record.make_record([trial(seed=s, preset="copy", report_every=2) for s in range(3)],
                                   "grid", "none")
    assert plan_record.check_resume(str(tmp_path), more) == [trial(seed=2).trial_key]
    fewer = plan_record.make_record([trial(seed=0)], "grid", "none")
    removed = r"trials removed \(1\): " + trial(seed=1).trial_key + r"(.|\n)*seed: 0, 1 -> 0"
    with pytest.raises(UsageError, match=removed):
        plan_record.check_resume(str(tmp_path), fewer)
    with pytest.raises(UsageError, match=r"only a plain grid search(.|\n)*--scheduler: none -> asha"):
        plan_record.check_resume(str(tmp_path), {**more, "scheduler": "asha"})
    with pytest.raises(UsageError, match="no plan.json"):
        plan_record.check_resume(str(tmp_path / "other"), old)
