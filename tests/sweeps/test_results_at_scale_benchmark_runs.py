"""``benchmarks/results_at_scale.py`` at its smallest size: it stores D21-shaped completions
through the sweep's own results path, so an API change there breaks it here, not silently."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_results_at_scale_benchmark_stores_five_completions_locally():
    done = subprocess.run([sys.executable, "benchmarks/results_at_scale.py", "--completions", "5", "--stores",
                           "local"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("store=local"))
    assert "completions=5 " in line and "stopped_at_limit_s" not in line
