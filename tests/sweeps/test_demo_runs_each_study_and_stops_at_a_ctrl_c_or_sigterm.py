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

    def run(grid, **options):  # the sweep itself: tests/end_to_end/test_command.py
        calls.append((grid, options))
        if grid == "montero2022":
            raise sweeps.SweepInterrupted(str(tmp_path / "montero2022-demo"), 8, 3, signum=signum)
        return pd.DataFrame({"status": ["finished", "failed"]})

    monkeypatch.setattr(sweeps.paper_grid, "run", run)
    argv = ["--studies", "montero2021,montero2022,dittadi2021", "--storage-path", str(tmp_path), "--no-open"]
    assert demo.main(argv) == code
    asked = {"scale": "demo", "storage_path": str(tmp_path), "resume": False, "budget": 1.0}
    assert calls == [(preset, asked) for preset in ("montero2021", "montero2022")]
    out = capsys.readouterr().out
    assert "montero2021: 1 of 2 models finished in" in out
    stopped = tmp_path / "montero2022-demo"
    assert f"{said}: 3 of 8 models finished and stored in {stopped}" in out
    assert "run the same python -m sweeps.demo command again" in out


def test_the_demo_at_half_budget_asks_for_it_and_keeps_its_experiments_and_report_apart(monkeypatch, tmp_path,
                                                                                      capsys):
    import sweeps.paper_grid
    from sweeps import demo

    calls = []

    def run(grid, **options):
        calls.append((grid, options))
        raise sweeps.SweepInterrupted(str(tmp_path / f"{grid}-demo-budget0.5"), 9, 0, signum=2)

    monkeypatch.setattr(sweeps.paper_grid, "run", run)
    assert demo.main(["--studies", "montero2021", "--budget", "0.5", "--storage-path", str(tmp_path),
                      "--no-open"]) == 130
    assert calls == [("montero2021", {"scale": "demo", "storage_path": str(tmp_path), "resume": False,
                                      "budget": 0.5})]
    assert "--scale demo --storage-path " + str(tmp_path) + " --budget 0.5" in capsys.readouterr().out
    assert demo.experiment("montero2021", str(tmp_path), 0.5).endswith("montero2021-demo-budget0.5")
    assert demo.experiment("montero2021", str(tmp_path)).endswith("montero2021-demo")
    assert demo.report_folder(0.5) == "demo-report-budget0.5" and demo.report_folder() == "demo-report"


@pytest.mark.parametrize("budget", ["0", "-1", "nan", "inf"])
def test_a_budget_that_is_not_a_positive_number_is_refused_before_anything_runs(monkeypatch, tmp_path,
                                                                                budget):
    import sweeps.paper_grid
    from sweeps import demo

    monkeypatch.setattr(sweeps.paper_grid, "run", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(SystemExit, match="--budget must be a finite number > 0"):
        demo.main(["--budget", budget, "--storage-path", str(tmp_path), "--no-open"])
