"""How long DCI takes: disentanglement_lib's serial GBT fit against disgen's parallel one.

The data is dSprites-like: 5 factors with 3, 6, 40, 32 and 32 classes, drawn uniformly, and 10
codes that are a fixed random linear mix of the factors (each scaled to [0, 1]) plus Gaussian
noise. disentanglement_lib's study size is 10,000 train and 5,000 test points.

It times, in this order:
1. estimator="gbt" with n_jobs=1 (one factor after another, as disentanglement_lib does),
2. estimator="gbt" with the default n_jobs (all cores), and checks the result is the same,
3. estimator="hist_gbt" with the default n_jobs, and how far its D and C are from the GBT's.

Run from the repository root:

    python -m benchmarks.dci_speed                       # full size (minutes)
    python -m benchmarks.dci_speed --n-train 2000 --n-test 1000

Timings depend on the load of the machine; the load average is printed with them. The serial run
also prints its CPU time (``time.process_time``), which other processes on the machine hardly
change; the parallel runs work in child processes, so only their wall time is meaningful.
"""

import argparse
import os
import time

import numpy as np
from joblib import cpu_count

from analysis.metrics.dci import dci

FACTOR_SIZES = (3, 6, 40, 32, 32)
N_CODES = 10


def make_data(n_samples, seed, noise=0.1):
    """Factors drawn uniformly, and codes that mix them linearly, plus noise."""
    rng = np.random.default_rng(seed)
    sizes = np.array(FACTOR_SIZES)
    factors = rng.integers(0, sizes, size=(n_samples, sizes.size))
    mixing = rng.standard_normal((sizes.size, N_CODES))
    codes = (factors / (sizes - 1)) @ mixing + noise * rng.standard_normal((n_samples, N_CODES))
    return codes, factors


def timed(**kwargs):
    start, cpu = time.perf_counter(), time.process_time()
    result = dci(**kwargs)
    timed.cpu = time.process_time() - cpu
    return result, time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-train", type=int, default=10_000, help="training points (default 10,000)")
    parser.add_argument("--n-test", type=int, default=5_000, help="test points (default 5,000)")
    parser.add_argument(
        "--n-jobs", type=int, default=None, help="workers for the parallel runs (default: all cores)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    codes, factors = make_data(args.n_train + args.n_test, args.seed)
    data = {
        "codes": codes[: args.n_train],
        "factors": factors[: args.n_train],
        "codes_test": codes[args.n_train :],
        "factors_test": factors[args.n_train :],
        "random_state": args.seed,
    }
    print(
        f"DCI on {args.n_train} train / {args.n_test} test points, {N_CODES} codes, "
        f"factor sizes {FACTOR_SIZES}; {cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f} at start"
    )

    serial, t_serial = timed(**data, estimator="gbt", n_jobs=1)
    print(
        f"gbt      n_jobs={1!s:<8}  {t_serial:8.1f} s   D={serial['disentanglement']:.4f}  "
        f"(CPU time {timed.cpu:.1f} s; load average now {os.getloadavg()[0]:.1f})"
    )
    parallel, t_parallel = timed(**data, estimator="gbt", n_jobs=args.n_jobs)
    print(
        f"gbt      n_jobs={args.n_jobs!s:<8}  {t_parallel:8.1f} s   D={parallel['disentanglement']:.4f}  "
        f"(load average now {os.getloadavg()[0]:.1f})"
    )
    same = np.array_equal(serial["importance_matrix"], parallel["importance_matrix"])
    print(f"gbt      serial / parallel time: {t_serial / t_parallel:.2f}x; identical result: {same}")

    hist, t_hist = timed(**data, estimator="hist_gbt", n_jobs=args.n_jobs)
    print(
        f"hist_gbt n_jobs={args.n_jobs!s:<8}  {t_hist:8.1f} s   D={hist['disentanglement']:.4f}  "
        f"|dD|={abs(hist['disentanglement'] - serial['disentanglement']):.4f}  "
        f"|dC|={abs(hist['completeness'] - serial['completeness']):.4f}  "
        f"informativeness_test {hist['informativeness_test']:.3f} vs gbt "
        f"{serial['informativeness_test']:.3f}"
    )
    load = os.getloadavg()[0]
    print(f"hist_gbt speed-up over serial gbt: {t_serial / t_hist:.1f}x; load average now {load:.1f}")
    if not same:
        raise SystemExit("parallel and serial importance matrices differ")


if __name__ == "__main__":
    main()
