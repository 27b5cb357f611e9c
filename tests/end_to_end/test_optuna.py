"""--search optuna, whole sweeps on the tests' Ray: the trials' settings sampled within the range the
grid's search space declares, not its axis values; the study kept in Optuna's own journal in the
experiment (JSON lines), so that a resume (here asking for one more sample) goes on with the study
it learnt: the trials Optuna saw before are in it after, unchanged, and no model gets two rows."""

import json

import optuna
import pandas as pd
import pytest
from sweep_runs import TWO_SHORT_TRIALS

from sweeps.paper_grid import main
from sweeps.search import JOURNAL, STUDY, open_journal

GRID = TWO_SHORT_TRIALS + """search:
  metric: test_nll
  mode: min
  space:
    beta: {loguniform: [0.25, 16.0]}
"""


@pytest.mark.slow  # three tiny trials, one at a time
def test_optuna_samples_its_space_and_a_resume_goes_on_with_its_study(ray_session, tmp_path, capsys):
    grid = tmp_path / "optuna.yaml"
    grid.write_text(GRID)
    argv = ["--grid", str(grid), "--scale", "tiny", "--search", "optuna", "--storage-path", str(tmp_path),
            "--name", "optuna", "--max-concurrent-trials", "1"]
    assert main([*argv, "--num-samples", "2"]) == 0
    assert "2 of 2 trials finished" in capsys.readouterr().out
    experiment = tmp_path / "optuna"
    trials = pd.read_parquet(experiment / "trials.parquet")
    assert len(trials) == 2 and trials["beta"].between(0.25, 16.0).all()
    assert not trials["beta"].isin([1.0, 4.0]).all()  # sampled, not the grid's values
    lines = (experiment / JOURNAL).read_text().splitlines()
    assert lines and all(isinstance(json.loads(line), dict) for line in lines)  # data, not a pickle
    before = optuna.load_study(study_name=STUDY, storage=open_journal(str(experiment))).trials
    assert [t.state.name for t in before] == ["COMPLETE", "COMPLETE"]
    assert sorted(t.value for t in before) == sorted(trials["test_nll"])  # what it learnt: the metric

    assert main([*argv, "--num-samples", "3", "--resume"]) == 0
    assert "Resuming" in capsys.readouterr().out
    after = optuna.load_study(study_name=STUDY, storage=open_journal(str(experiment))).trials
    assert len(after) == 3 and [(t.number, t.params, t.value) for t in after[:2]] == [
        (t.number, t.params, t.value) for t in before]
    rows = pd.read_parquet(experiment / "trials.parquet")
    assert len(rows) == 3 and rows["trial_key"].is_unique and (rows["status"] == "finished").all()
