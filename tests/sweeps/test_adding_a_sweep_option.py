"""docs/design.md's "Adding a sweep option", followed literally: declare the option in a copy of
sweeps/, add its test, rewrite the docs table as the page says, and check that everything the page
says follows from the one declaration does: the flag in ``--help``, parsed, checked by
``sweeps.run`` (a bad value refused with its name), in ``run``'s signature, in the ``Sweep``
record, and in the docs table. Without Ray."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

from design_page import after_declaration, steps

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_following_the_page_adds_a_sweep_option_everywhere_it_goes(tmp_path):
    page = steps("Adding a sweep option")
    assert set(page) == {"SweepOptions, after max_failures", "its test", "the docs table"}, set(page)
    shutil.copytree(ROOT / "sweeps", tmp_path / "sweeps", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "sweeps.md", tmp_path / "docs" / "sweeps.md")
    options = tmp_path / "sweeps" / "options.py"
    lines = options.read_text().splitlines(keepends=True)
    assert "max_trial_minutes" not in "".join(lines) + (tmp_path / "docs" / "sweeps.md").read_text()
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": f"{pathlib.Path(sys.executable).parent}:/usr/bin:/bin"}

    # step 1: the declaration, after max_failures'
    at = after_declaration(lines, "max_failures")
    options.write_text("".join(lines[:at]) + page["SweepOptions, after max_failures"] + "".join(lines[at:]))
    # step 3: the docs table, rewritten by the page's command
    done = subprocess.run(["bash", "-c", page["the docs table"]], capture_output=True, text=True, timeout=120,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]

    script = """
import contextlib, inspect, io, sys
sys.modules["ray"] = None  # all of it before Ray: an import of Ray fails
import pytest
import sweeps
from sweeps.errors import UsageError
from sweeps.options import SweepOptions, with_options_table
from sweeps.paper_grid import build_parser, main, parse_options, plan_trials
assert sweeps.__file__.startswith(SWEEPS), sweeps.__file__

# step 2: its test, as the page writes it
exec(TEST)
test_max_trial_minutes_is_a_finite_number_of_at_least_zero()

# what follows from the declaration
assert "--max-trial-minutes MAX_TRIAL_MINUTES" in build_parser().format_help()
err = io.StringIO()
with contextlib.redirect_stderr(err):
    assert main(["--max-trial-minutes", "-2", "--dry-run"]) == 2
said = err.getvalue()
assert said == "error: --max-trial-minutes must be a finite number >= 0; got -2.0\\n", said
with pytest.raises(UsageError, match="--max-trial-minutes must be a number; got '5'"):
    sweeps.run(max_trial_minutes="5")
parameter = inspect.signature(sweeps.run).parameters["max_trial_minutes"]
assert parameter.default is None and parameter.annotation == "float | None"
sweep = plan_trials(parse_options(["--scale", "tiny", "--max-trial-minutes", "30"]))
assert sweep.options.max_trial_minutes == 30.0
docs = open("docs/sweeps.md").read()
assert with_options_table(docs) == docs
assert ("| `--max-trial-minutes` | `max_trial_minutes` | `float \\\\| None` | `None` | finite, ≥ 0 | "
        "stop a trial once it has trained this many minutes (default: no limit) |") in docs
print("ok")
""".replace("SWEEPS", repr(str(tmp_path / "sweeps"))).replace("TEST", repr(page["its test"]))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
