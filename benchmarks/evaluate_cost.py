"""What each metric of ``analysis.evaluate`` costs on one trained model.

Loads a sweep checkpoint, then times ``evaluate`` with no metric (NLL and encoding only) and with
each metric alone, at ``--n-metric`` codes per side, serially (n_jobs=1, one torch thread). The
BetaVAE and FactorVAE scores share one pool of rendered and encoded full-grid points, so they are
also timed together ("beta_vae + factor_vae"); "all" counts that pair once. Each line gives the
wall time and the CPU time of this process (``time.process_time``); everything here runs on one
thread, so on a quiet machine the two agree, and on a busy one the CPU time is the figure to trust.
``--metrics`` times only the metrics named.

    python -m benchmarks.evaluate_cost /tmp/an_exp/default-tiny/<trial>/checkpoint_000003/trainer.pt
"""

import argparse
import os
import time

import torch

from analysis.evaluation import METRICS, EvaluationConfig, evaluate
from analysis.trained_models import load_checkpoint
from data_pipeline import get_split


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--n-metric", type=int, default=1000)
    parser.add_argument("--n-nll", type=int, default=1000)
    parser.add_argument("--mlp", action="store_true", help="time the MLP transfer readout too")
    parser.add_argument("--metrics", nargs="+", choices=METRICS, help="time only these (default: all)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model, config, data = load_checkpoint(args.checkpoint)
    split = get_split(config["dataset"], config["split"])
    print(f"{config['dataset']} {config['split']}, {len(data.images)} images, n_metric={args.n_metric}; "
          f"load average {os.getloadavg()[0]:.1f}")
    sizes = dict(n_nll=args.n_nll, n_metric=args.n_metric)
    start, cpu = time.perf_counter(), time.process_time()
    evaluate(model, data, split, EvaluationConfig(metrics=(), **sizes), n_jobs=1)
    base, base_cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"{'NLL + encoding only':28s} {base:6.1f} s wall {base_cpu:6.1f} s CPU")
    total, total_cpu = base, base_cpu
    pair = ("beta_vae", "factor_vae")
    chosen_metrics = args.metrics or METRICS
    timed = [*chosen_metrics, pair] if set(pair) <= set(chosen_metrics) else chosen_metrics
    for metric in timed:
        regressors = ("gbt", "mlp") if args.mlp and metric == "transfer" else ("gbt",)
        chosen = metric if isinstance(metric, tuple) else (metric,)
        start, cpu = time.perf_counter(), time.process_time()
        config = EvaluationConfig(metrics=chosen, transfer_regressors=regressors, **sizes)
        evaluate(model, data, split, config, n_jobs=1)
        extra, extra_cpu = time.perf_counter() - start - base, time.process_time() - cpu - base_cpu
        if metric == pair or metric not in pair or pair not in timed:
            total, total_cpu = total + extra, total_cpu + extra_cpu
        name = " + ".join(chosen) + (" (gbt+mlp)" if len(regressors) == 2 else "")
        print(f"{name:28s} +{extra:5.1f} s wall +{extra_cpu:5.1f} s CPU")
    print(f"{'all timed':28s} {total:6.1f} s wall {total_cpu:6.1f} s CPU; "
          f"load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
