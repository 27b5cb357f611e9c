"""Small results (issue 32, item 3): what a trial reports to Tune is its metrics and progress, never
its members' settings. Tune writes a trial's config into every result it writes (``result.json``,
``progress.csv``, what the callbacks see) and into its ``experiment_tag``, so the config names the
members by trial key and the settings stay in the plan and the rows. A real sweep of six models in
a pack of four and a pack of two, on a local Ray."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
from sweep_runs import TWO_SHORT_TRIALS

from sweeps.paper_grid import main, parse_options, plan_trials
from sweeps.trials import allowed_keys

# Six β-VAEs that share a pack (one dataset, one model shape); --pack-size 4 makes a pack of four
# and a pack of two.
GRID = TWO_SHORT_TRIALS.replace("beta: [1.0, 4.0]", "beta: [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]")
# A progress report's bound: its loss terms, Tune's own fields and the members' keys. A pack of 32
# whole configs took about 22 KB a report (benchmarks/README.md, "Small results").
PROGRESS_BYTES = 2048
# What a report grows by per member: its key, once in the config and once in the experiment tag.
PER_MEMBER_BYTES = 32


def lines(folder) -> list[dict]:
    with open(os.path.join(folder, "result.json")) as file:
        return [json.loads(line) for line in file if line.strip()]


def settings_in(value, path="") -> list[str]:
    """Where a result holds a trial setting as a key (a member's whole config, or part of one)."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key in SETTINGS:
                found.append(f"{path}/{key}")
            found += settings_in(item, f"{path}/{key}")
    elif isinstance(value, list):
        for k, item in enumerate(value):
            found += settings_in(item, f"{path}/{k}")
    return found


# Every trial setting, except those a report may carry as a result: the steps reached (``step`` is
# a progress field; ``steps``, ``n_images`` and ``bf16`` are settings the run resolves, reported
# per member for its row) and the key that names a member.
SETTINGS = allowed_keys() - {"steps", "n_images", "bf16"}


@pytest.mark.slow
def test_a_packs_reports_carry_its_members_keys_not_their_settings(ray_session, tmp_path, capsys):
    grid = tmp_path / "six.yaml"
    grid.write_text(GRID)
    argv = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp",
            "--pack-size", "4", "--max-failures", "0"]
    assert main(argv) == 0
    assert "Packing 6 trials into 2 packs of up to 4 models" in capsys.readouterr().out
    planned = {t.trial_key: t for t in plan_trials(parse_options(argv)).trials}
    experiment = tmp_path / "exp"
    folders = [experiment / d for d in os.listdir(experiment) if (experiment / d / "result.json").exists()]
    packs = {len(lines(folder)[0]["config"]["members"]): folder for folder in folders}
    assert sorted(packs) == [2, 4]

    progress_bytes = {}
    for size, folder in packs.items():
        with open(folder / "result.json") as file:
            raw = [line for line in file.read().splitlines() if line.strip()]
        reports = [json.loads(line) for line in raw]
        keys = reports[0]["config"]["members"]
        # (a) the config names the members by key; no report holds a member's settings
        assert all(isinstance(key, str) for key in keys) and set(keys) <= set(planned)
        assert all(report["config"] == {"members": keys} for report in reports)
        for report in reports:
            assert settings_in(report) == [], settings_in(report)
        final = [r for r in reports if r.get("done")]
        assert len(final) == 1 and [m["trial_key"] for m in final[0]["members"]] == keys
        assert all("config" not in member for member in final[0]["members"])
        progress = [len(line.encode()) for line, r in zip(raw, reports) if not r.get("done")]
        assert progress and max(progress) < PROGRESS_BYTES, progress
        progress_bytes[size] = max(progress)
        # Tune's own record of the same reports: no settings there either
        csv = pd.read_csv(folder / "progress.csv")
        assert not [c for c in csv.columns if c.split("/")[-1] in SETTINGS]
    # a report does not grow with the members' settings: a pack of four's is a pack of two's and
    # two more keys
    assert progress_bytes[4] - progress_bytes[2] <= 2 * PER_MEMBER_BYTES, progress_bytes

    # (b) each model's row still holds its whole config, from the plan
    trials = pd.read_parquet(experiment / "trials.parquet").set_index("trial_key")
    assert sorted(trials.index) == sorted(planned) and (trials["status"] == "finished").all()
    for key, trial in planned.items():
        row = trials.loc[key]
        assert json.loads(row["config"]) == {**trial.effective_settings(), "bf16": False}  # CPU: float32
        assert row["beta"] == trial.model.beta and row["split"] == trial.data.split
