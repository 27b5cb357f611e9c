"""A real sweep on Ray whose results store keeps failing: the driver tries each write again, then
stops the sweep as a Ctrl-C does, says why and prints the resume command; the resume, with the
store healthy again, stores every model's row and history exactly once."""

import pandas as pd
import pytest
from sweep_runs import TWO_SHORT_TRIALS

from analysis import storage
from analysis.schema import HISTORY_FILE, TRIALS_FILE
from analysis.storage import PARTS_DIR, read_results
from sweeps import results
from sweeps.paper_grid import main


@pytest.mark.slow
def test_a_store_that_keeps_failing_stops_the_sweep_and_the_resume_stores_every_row_once(
        ray_session, tmp_path, monkeypatch, capsys):
    grid = tmp_path / "two.yaml"
    grid.write_text(TWO_SHORT_TRIALS)
    args = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp",
            "--max-concurrent-trials", "1"]
    experiment = tmp_path / "exp"
    monkeypatch.setattr(results, "WRITE_ATTEMPTS", 3)
    monkeypatch.setattr(results, "WRITE_BACKOFF_S", 0.05)
    tries = []

    def failing(*args, **kwargs):
        tries.append(args)
        raise OSError("AWS Error SLOW_DOWN during PutObject operation: Please reduce your request rate.")

    # the driver's writes fail (the trials write their history in processes of their own)
    with monkeypatch.context() as patch:
        patch.setattr(storage, "_write_part", failing)
        code = main(args)
    out = capsys.readouterr().out
    assert code == 1, out[-3000:]
    assert len(tries) == 3  # the first commit, tried three times; then nothing more is written
    assert out.count("trying again in") == 2
    assert f"Stopped: the results could not be written to {experiment}" in out
    assert f"Resume with:  python -m sweeps.paper_grid {' '.join(args)} --resume" in out
    assert read_results(str(experiment), TRIALS_FILE).empty
    assert list((experiment / PARTS_DIR).glob("*." + HISTORY_FILE))  # kept for the resume: no compaction

    # a resume while the store still fails: it stops again at its first write, and says no model is done
    with monkeypatch.context() as patch:
        patch.setattr(storage, "_write_part", failing)
        code = main([*args, "--resume"])
    out = capsys.readouterr().out
    assert code == 1 and len(tries) == 6 and "Resume with:" in out, out[-3000:]
    assert "done " not in out and read_results(str(experiment), TRIALS_FILE).empty

    assert main([*args, "--resume"]) == 0
    trials = read_results(str(experiment), TRIALS_FILE)
    assert len(trials) == 2 and trials["trial_key"].is_unique and set(trials["status"]) == {"finished"}
    history = pd.read_parquet(experiment / HISTORY_FILE)
    assert not history.duplicated(["trial_key", "step"]).any()
    assert history.groupby("trial_key").size().to_dict() == dict.fromkeys(trials["trial_key"], 2)
    assert not (experiment / PARTS_DIR).exists()
