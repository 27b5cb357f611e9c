"""--search optuna, a whole sweep on the tests' Ray: its trials' β sampled within the range the
default preset declares, not the grid's values."""

import pytest

from sweeps.paper_grid import main


@pytest.mark.slow  # two tiny trials with the default preset's full evaluation: 1-2.5 minutes on 2 cores
def test_optuna_search_samples_beta_within_its_declared_range(ray_session, tmp_path, capsys):
    argv = ["--scale", "tiny", "--search", "optuna", "--num-samples", "2", "--storage-path", str(tmp_path),
            "--name", "optuna"]
    assert main(argv) == 0
    assert "2 of 2 trials finished" in capsys.readouterr().out
    import pandas as pd

    trials = pd.read_parquet(tmp_path / "optuna" / "trials.parquet")
    assert len(trials) == 2 and trials["beta"].between(0.25, 16.0).all()
    assert not trials["beta"].isin([1.0, 4.0]).all()  # sampled, not the grid's values
