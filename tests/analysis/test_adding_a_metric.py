"""docs/analysis.md, "Adding a metric", followed literally: apply the page's steps to a copy of
analysis/ as written there, run the page's tests, and check that the new metric reaches evaluate's
output, the results schema and parquet (analysis.storage.write_results → analysis.load_trials)."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "analysis.md"
TABLE = "METRICS: dict[str, Metric] = {\n"


def blocks() -> dict[str, str]:
    """The page's code blocks that follow an ``<!-- label -->`` comment, by label."""
    return {label: code for label, code in
            re.findall(r"<!-- ([^>]+?) -->\n```[a-z]*\n(.*?)```", PAGE.read_text(), re.S)}


def test_the_page_has_every_step_and_the_registry_has_their_places():
    steps = blocks()
    assert {"file: analysis/metrics/active_units.py", "registry: import", "registry: table",
            "file: tests/test_metrics_active_units.py"} <= set(steps)
    registry = (ROOT / "analysis" / "metrics" / "registry.py").read_text()
    assert TABLE in registry and "from analysis.metrics." in registry
    assert "active_units" not in registry  # the page adds a metric disgen does not ship
    assert all(len(line) <= 110 for code in steps.values() for line in code.splitlines())


@pytest.mark.slow
def test_following_the_page_adds_a_metric_that_reaches_the_results(tmp_path):
    steps = blocks()
    analysis = tmp_path / "analysis"
    shutil.copytree(ROOT / "analysis", analysis, ignore=shutil.ignore_patterns("__pycache__"))
    # step 1: the module, as the page writes it
    (analysis / "metrics" / "active_units.py").write_text(steps["file: analysis/metrics/active_units.py"])
    # step 2: the import with the others, and one line in METRICS
    registry = analysis / "metrics" / "registry.py"
    lines = registry.read_text().splitlines(keepends=True)
    first_import = next(i for i, line in enumerate(lines) if line.startswith("from analysis.metrics."))
    lines.insert(first_import, steps["registry: import"])
    table_end = next(i for i in range(lines.index(TABLE), len(lines)) if lines[i] == "}\n")
    lines.insert(table_end, steps["registry: table"])
    registry.write_text("".join(lines))
    # step 3: its tests
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_metrics_active_units.py").write_text(
        steps["file: tests/test_metrics_active_units.py"])

    script = """
import math, sys
import numpy as np
import analysis
sys.path.insert(0, TESTS)
import planted
import test_metrics_active_units as page_tests
from analysis import load_trials
from analysis.evaluation import EvaluationConfig, evaluate
from analysis.metrics.registry import METRICS
from analysis.schema import TRIALS_SCHEMA
from analysis.storage import write_results
assert analysis.__file__.startswith(ANALYSIS), analysis.__file__
for name in dir(page_tests):
    if name.startswith("test_"):
        getattr(page_tests, name)()
assert "active_units" in METRICS and "active_units" in EvaluationConfig().chosen_metrics

def three_and_a_constant(classes):
    return np.column_stack([planted.factors_as_codes(classes), np.full(len(classes), 2.0)])

dataset, split = planted.dataset(), planted.split()
model = planted.PlantedModel(three_and_a_constant, 4)
rows = [evaluate(model, dataset, split, EvaluationConfig(n_nll=20, n_metric=100, metrics=chosen))
        for chosen in (("active_units",), ("mig",))]
assert rows[0]["active_units"] == 3, rows[0]  # the constant unit is not in use
assert rows[1]["active_units"] is None and not math.isnan(rows[1]["mig"])  # not run: null
column = TRIALS_SCHEMA.field("active_units")
assert str(column.type) == "int64", column
write_results(EXPERIMENT, [{**row, "experiment": "e", "trial_key": f"t{i}"} for i, row in enumerate(rows)])
df = load_trials(EXPERIMENT).set_index("trial_key")
assert str(df["active_units"].dtype) == "Int64", df["active_units"].dtype
assert df.loc["t0", "active_units"] == 3 and df["active_units"].isna().loc["t1"], df["active_units"]
print("ok")
""".replace("TESTS", repr(str(tmp_path / "tests"))).replace("ANALYSIS", repr(str(analysis))).replace(
        "EXPERIMENT", repr(str(tmp_path / "experiment")))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240,
                          env={"PYTHONPATH": f"{tmp_path}:{ROOT}:{ROOT / 'tests'}", "PATH": "/usr/bin:/bin"},
                          cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
