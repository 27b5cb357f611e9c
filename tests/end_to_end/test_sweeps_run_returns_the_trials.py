"""``sweeps.run``, the sweep from Python: it runs what the command line runs and returns the
experiment's trials as ``analysis.load_trials`` gives them; bad input is the command line's
one-line error, raised before Ray starts."""

import pandas as pd
import pytest
import yaml
from conftest import TWO_TRIAL_GRID

import sweeps
from sweeps.options import SweepOptions
from sweeps.paper_grid import main, plan_trials
from sweeps.trials import TrialConfig


def one_trial_grid() -> dict:
    """TWO_TRIAL_GRID as data, with one β: one trial of 20 steps."""
    grid = yaml.safe_load(TWO_TRIAL_GRID)
    grid["axes"]["beta"] = [4.0]
    return grid


@pytest.mark.slow  # one tiny trial on the tests' Ray
def test_run_returns_the_trials_that_trials_parquet_holds(ray_session, tmp_path, capsys):
    from analysis import load_trials

    trials = sweeps.run(one_trial_grid(), scale="tiny", storage_path=str(tmp_path), name="exp")
    assert isinstance(trials, pd.DataFrame)
    assert len(trials) == 1 and (trials["status"] == "finished").all()
    assert trials["beta"].tolist() == [4.0] and trials["preset"].astype(str).tolist() == ["exp"]
    pd.testing.assert_frame_equal(trials, load_trials(tmp_path / "exp"))
    pd.testing.assert_frame_equal(trials, pd.read_parquet(tmp_path / "exp" / "trials.parquet"))
    # the same experiment again is refused, as on the command line, and nothing runs twice
    with pytest.raises(sweeps.UsageError, match="already exists; pass --resume to continue it"):
        sweeps.run(one_trial_grid(), scale="tiny", storage_path=str(tmp_path), name="exp")
    capsys.readouterr()
    assert main(["--grid", str(tmp_path / "nowhere.yaml"), "--storage-path", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: --grid {tmp_path / 'nowhere.yaml'}: no such file\n"


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


@pytest.mark.parametrize("signum, code, said", [(2, 130, "Interrupted (Ctrl-C)"),
                                                 (15, 143, "Stopped (SIGTERM, e.g. `ray job stop`)")],
                         ids=["ctrl-c", "sigterm"])
def test_the_demo_runs_each_study_through_sweeps_run_and_stops_at_a_ctrl_c_or_sigterm(
        monkeypatch, tmp_path, capsys, signum, code, said):
    import sweeps.paper_grid
    from sweeps import demo

    calls = []

    def run(grid, **options):  # the sweep itself is the Ray test's above: here, what the demo asks
        calls.append((grid, options))
        if grid == "montero2022":
            raise sweeps.SweepInterrupted(str(tmp_path / "montero2022-demo"), 8, 3, signum=signum)
        return pd.DataFrame({"status": ["finished", "failed"]})

    monkeypatch.setattr(sweeps.paper_grid, "run", run)
    argv = ["--studies", "montero2021,montero2022,dittadi2021", "--storage-path", str(tmp_path), "--no-open"]
    assert demo.main(argv) == code
    assert calls == [(preset, {"scale": "demo", "storage_path": str(tmp_path), "resume": False})
                     for preset in ("montero2021", "montero2022")]
    out = capsys.readouterr().out
    assert "montero2021: 1 of 2 models finished in" in out
    stopped = tmp_path / "montero2022-demo"
    assert f"{said}: 3 of 8 models finished and stored in {stopped}" in out
    assert "run the same python -m sweeps.demo command again" in out
