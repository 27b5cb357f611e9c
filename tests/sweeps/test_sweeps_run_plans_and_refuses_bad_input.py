"""``sweeps.run``'s input, before Ray starts: a list of trials plans what the grid that makes them
plans, and bad input raises the command line's one-line error. The sweep it runs is
tests/end_to_end/test_command.py."""

import pytest
import yaml
from conftest import TWO_TRIAL_GRID

import sweeps
from sweeps.options import SweepOptions
from sweeps.paper_grid import plan_trials
from sweeps.trials import TrialConfig


def test_a_list_of_trials_plans_the_trials_a_grid_makes():
    grid = yaml.safe_load(TWO_TRIAL_GRID)
    from_grid = plan_trials(SweepOptions(grid=grid, scale="tiny", name="two")).trials
    settings = [dict(t) for t in from_grid]  # mappings of settings, completed again
    for given in (from_grid, settings):
        planned = plan_trials(SweepOptions(name="two"), given)
        assert planned.trials == from_grid and planned.name == "two"
    assert plan_trials(SweepOptions(), from_grid).name == "two-tiny"  # named by their preset and scale


@pytest.mark.parametrize("call, message", [
    (lambda: sweeps.run("montero2023"), "unknown preset 'montero2023'; choose one of"),
    (lambda: sweeps.run("grid.yaml"), "--grid grid.yaml: no such file"),
    (lambda: sweeps.run({"axes": {"beta": []}}), "grid: axis 'beta' is empty"),
    (lambda: sweeps.run(scale="huge"), "unknown scale 'huge' for preset 'default'"),
    (lambda: sweeps.run(cpus_per_trial="2"), "--cpus-per-trial must be a number; got '2'"),
    (lambda: sweeps.run(max_failures=1.5), "--max-failures must be a whole number; got 1.5"),
    (lambda: sweeps.run(search="random"), "--search: unknown 'random'; choose one of grid, optuna"),
    (lambda: sweeps.run(seeds=[0, 0]), "a seed is listed twice"),
    (lambda: sweeps.run([]), "trials: give a non-empty list of trial configs"),
    (lambda: sweeps.run([{"beta": 1.0}]), "trials[0]: dataset: not set"),
    (lambda: sweeps.run(two_trials(), seeds=3), "--seeds makes trials from a grid"),
    (lambda: sweeps.run(two_trials(), search="optuna"), "--search optuna samples a grid's search space"),
    (lambda: sweeps.run(two_trials() * 2), "trials: 2 trial(s) repeat another"),
    (lambda: sweeps.run(pack_size=0), "--pack-size: must be a whole number >= 1 or 'auto'; got 0"),
])
def test_bad_input_raises_the_command_lines_one_line_error(call, message):
    with pytest.raises(sweeps.UsageError) as raised:
        call()
    assert message in str(raised.value) and "\n" not in str(raised.value)


def two_trials() -> list[TrialConfig]:
    return list(plan_trials(SweepOptions(grid=yaml.safe_load(TWO_TRIAL_GRID), scale="tiny")).trials)
