"""The process-state check (tests/process_state.py) fails a test that leaves process-wide state
changed; state that a library changes on its own, at a moment no test controls, must not reach it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None,
                    reason="mlflow is an optional extra: pip install -e '.[mlflow]'")
def test_importing_mlflow_outside_a_test_changes_no_variable_of_the_test_process():
    # as at collection: no PYTEST_CURRENT_TEST, which MLflow reads as "a test runs, no telemetry"
    environment = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    script = ("import os; before = dict(os.environ); import mlflow; "
              "print(sorted(set(os.environ) ^ set(before)))")
    out = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]", out
