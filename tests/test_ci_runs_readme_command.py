"""CI runs README command 2 word for word: ``.ci/run`` takes the command from README.md itself
(``.ci/readme_command.py``), prints it and runs it, so that a green CI means the command a new user
runs passes. Coverage is added around it (``PYTEST_ADDOPTS``), never an option that selects or
orders the tests, and CI runs no tests of its own instead of it."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = (ROOT / ".ci" / "run").read_text()
# what may be added around the command: coverage and the durations table, nothing that picks or orders
ALLOWED_ADDOPTS = re.compile(r"--cov(=\S+)?|--cov-report=\S*|--durations=\d+")


def printed(number: int) -> str:
    """README command ``number`` as a reader sees it: the line after ``# <number>. `` in the
    README's "Two commands" section."""
    section = (ROOT / "README.md").read_text().split("## Two commands", 1)[1]
    return section.split(f"# {number}. ", 1)[1].splitlines()[1].strip()


def extracted(number: int) -> str:
    return subprocess.run([sys.executable, str(ROOT / ".ci" / "readme_command.py"), str(number)],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_command_ci_takes_is_the_one_the_readme_prints():
    for number in (1, 2):
        assert extracted(number) == printed(number)
    assert extracted(2).endswith("python -m pytest -n 2 --dist loadfile")


def test_ci_prints_the_readme_command_and_runs_it_unchanged():
    lines = [line.strip() for line in RUN.splitlines() if line.strip() and not line.strip().startswith("#")]
    take = lines.index('command="$(python3 .ci/readme_command.py 2)"')
    assert lines[take + 1].startswith('echo "README command 2, word for word: $command"')
    runs = [line for line in lines if '"$command"' in line]
    assert runs == ['bash -euo pipefail -c "$command"']  # run as printed, once
    # .ci/run installs nothing and runs no tests of its own: the README's command does both
    assert not [line for line in lines if line.startswith("pip ") or line.startswith("python -m pytest")]


def test_what_ci_adds_around_the_command_neither_selects_nor_orders_tests():
    (addopts,) = re.findall(r'^export PYTEST_ADDOPTS="([^"]*)"$', RUN, re.M)
    assert all(ALLOWED_ADDOPTS.fullmatch(option) for option in shlex.split(addopts)), addopts
