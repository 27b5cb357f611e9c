"""How results are committed in a real sweep: a driver that dies between a finished trial's two
writes (its history part, written by the trial, and its trials rows, the commit) shows no
half-stored trial, and the resume stores it. The store's parts, merges and compaction without Ray
are checked in tests/analysis/test_results_parts_merge_and_compact.py, the driver's commits in
tests/sweeps/test_results_commit_by_the_driver.py."""

import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
from sweep_runs import TWO_SHORT_TRIALS

from analysis.schema import HISTORY_FILE, TRIALS_FILE
from analysis.storage import PARTS_DIR, read_results
from sweeps.paper_grid import main

CRASH_BETWEEN_THE_WRITES = textwrap.dedent("""
    # The driver dies as it commits a finished trial's rows: the trial has written its history part.
    import os, sys
    from analysis.storage import ResultsStore
    def die(self, part, rows):
        print("dying between the writes", flush=True)
        os._exit(3)
    ResultsStore.commit = die
    from sweeps.paper_grid import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.slow
def test_a_crash_between_the_two_writes_shows_no_half_trial_and_the_resume_stores_it(ray_session, tmp_path):
    grid = tmp_path / "two.yaml"
    grid.write_text(TWO_SHORT_TRIALS)
    args = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp",
            "--max-concurrent-trials", "1", "--max-failures", "0"]
    env = {**os.environ, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address}
    crashed = subprocess.run([sys.executable, "-c", CRASH_BETWEEN_THE_WRITES, *args], env=env,
                             capture_output=True, text=True, timeout=300)
    assert crashed.returncode == 3, crashed.stdout[-3000:] + crashed.stderr[-3000:]
    experiment = tmp_path / "exp"
    # the history landed, the trials row did not
    (part,) = (experiment / PARTS_DIR).glob("*." + HISTORY_FILE)
    assert len(pd.read_parquet(part)) == 2 and not list((experiment / PARTS_DIR).glob("*." + TRIALS_FILE))
    assert not (experiment / TRIALS_FILE).exists()
    # what readers see: no trial, and no history without its trial
    assert read_results(str(experiment), TRIALS_FILE).empty
    assert read_results(str(experiment), HISTORY_FILE).empty

    # The resume, in this process and joined to the same Ray (only the crash needed a process of its
    # own). The trial's last recorded checkpoint is gone, so Tune's restore of it fails once (no retries:
    # a trial keeps the --max-failures of the run that made it) and it runs again from the start.
    assert main([*args, "--resume"]) == 0
    trials = read_results(str(experiment), TRIALS_FILE)
    assert len(trials) == 2 and trials["trial_key"].is_unique
    history = pd.read_parquet(experiment / HISTORY_FILE)
    assert not history.duplicated(["trial_key", "step"]).any()
    assert history.groupby("trial_key").size().to_dict() == dict.fromkeys(trials["trial_key"], 2)
