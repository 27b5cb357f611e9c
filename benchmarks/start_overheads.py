"""Two fixed costs that every sweep paid, before and after their fixes (2026-11-29), each timed in a
fresh process (they are first-call costs: imports, a process pool) and repeated:

- **the FLOP count of a network** (``sweeps.costs.training_flops_per_image``, which the driver's
  plan and live view call as they start): PyTorch's FLOP counter on the meta device, as before,
  against the forward hooks that count layer shapes now. The first imports ``torch._dynamo``.
- **the D-score's lasso fits** (``analysis.metrics.dci.dci(..., estimator="lasso_m21")``, in every
  model's evaluation): asked for every core (``n_jobs=None``, as ``score_d_score`` asked before),
  which started a loky pool of worker processes, against the evaluation's own process now.

    python benchmarks/start_overheads.py [--repeats 3]

Prints the median seconds of each, and the ratio. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FLOPS_BEFORE = """
import time, torch
from torch.utils.flop_counter import FlopCounterMode
from models import VAE, ModelConfig
started = time.perf_counter()
with torch.device("meta"):
    model = VAE(ModelConfig(architecture="burgess", image_size=64, channels=1, latent_dim=10).network)
    batch = torch.empty(4, 1, 64, 64)
with FlopCounterMode(display=False) as counter:
    codes, _ = model.encode(batch)
    model.decode(codes)
print(time.perf_counter() - started)
"""

FLOPS_AFTER = """
import time, torch
from sweeps import costs
started = time.perf_counter()
costs.training_flops_per_image("burgess", 64, 1, 10)
print(time.perf_counter() - started)
"""

DSCORE = """
import sys, time
import numpy as np
from analysis.metrics.dci import dci
D = sys.modules["analysis.metrics.dci"]  # the module: the package's ``dci`` is the function
if OLD:  # the fits' dispatch as it was: a process pool wherever more than one core was asked for
    from joblib import Parallel, delayed, effective_n_jobs
    def old_run(tasks, n_jobs):
        workers = min(effective_n_jobs(-1 if n_jobs is None else n_jobs), len(tasks))
        if workers <= 1:
            return [D._fit_one(*task) for task in tasks]
        return Parallel(n_jobs=workers)(delayed(D._fit_one)(*task) for task in tasks)
    D._run = old_run
rng = np.random.default_rng(0)
codes, factors = rng.normal(size=(300, 10)), rng.integers(0, 6, size=(300, 5))
started = time.perf_counter()
dci(codes, factors, estimator="lasso_m21", random_state=0, n_jobs=N_JOBS)
print(time.perf_counter() - started)
"""


def timed(code: str, repeats: int) -> float:
    seconds = [float(subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True,
                                    text=True).stdout.split()[-1]) for _ in range(repeats)]
    return statistics.median(seconds)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per measurement")
    args = parser.parse_args(argv)
    pairs = {
        "FLOP count, first call": (FLOPS_BEFORE, FLOPS_AFTER),
        "D-score lasso fits, first call": (DSCORE.replace("N_JOBS", "None").replace("OLD", "True"),
                                           DSCORE.replace("N_JOBS", "1").replace("OLD", "False")),
    }
    for name, (before, after) in pairs.items():
        old, new = timed(before, args.repeats), timed(after, args.repeats)
        print(f"{name}: before {old:.2f} s, after {new:.2f} s ({old / new:.1f}x), median of {args.repeats}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
