"""``python -m sweeps.demo`` (sweeps/demo.py): each study at its demo scale through ``sweeps.run``
(replaced here: what the demo asks for, not the sweep), stopped by a Ctrl-C or SIGTERM with the
command to continue."""

import pandas as pd
import pytest


@pytest.mark.parametrize("signum, code, said", [(2, 130, "Interrupted (Ctrl-C)"),
                                                 (15, 143, "Stopped (SIGTERM, e.g. `ray job stop`)")],
                         ids=["ctrl-c", "sigterm"])
def test_the_demo_runs_each_study_through_sweeps_run_and_stops_at_a_ctrl_c_or_sigterm(
        monkeypatch, tmp_path, capsys, signum, code, said):
    import sweeps.paper_grid
    from sweeps import demo

    calls = []

    def run(grid, **options):  # the sweep itself: tests/end_to_end/test_sweeps_run_returns_the_trials.py
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
