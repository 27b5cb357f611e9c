"""``sweeps.run``, the sweep from Python: it runs what the command line runs and returns the
experiment's trials as ``analysis.load_trials`` gives them. Its bad input, refused before Ray starts,
is tests/sweeps/test_sweeps_run_plans_and_refuses_bad_input.py."""

import pandas as pd
import pytest
import yaml
from conftest import TWO_TRIAL_GRID

import sweeps
from sweeps.paper_grid import main


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
