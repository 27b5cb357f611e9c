"""What each metric of ``analysis.evaluate`` costs on one trained model.

Loads a sweep checkpoint, then times ``evaluate`` with no metric (NLL and encoding only) and with
each metric alone, at ``--n-metric`` codes per side, serially (n_jobs=1, one torch thread).

    python -m benchmarks.evaluate_cost /tmp/an_exp/default-tiny/<trial>/checkpoint_000003/trainer.pt
"""

import argparse
import os
import time

import torch

from analysis.checkpoints import load_checkpoint
from analysis.evaluation import METRICS, evaluate
from data_pipeline import get_split


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--n-metric", type=int, default=1000)
    parser.add_argument("--n-nll", type=int, default=1000)
    parser.add_argument("--mlp", action="store_true", help="time the MLP transfer readout too")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model, config, data = load_checkpoint(args.checkpoint)
    split = get_split(config["dataset"], config["split"])
    print(f"{config['dataset']} {config['split']}, {len(data.images)} images, n_metric={args.n_metric}; "
          f"load average {os.getloadavg()[0]:.1f}")
    kwargs = dict(n_nll=args.n_nll, n_metric=args.n_metric, n_jobs=1)
    start = time.perf_counter()
    evaluate(model, data, split, metrics=(), **kwargs)
    base = time.perf_counter() - start
    print(f"{'NLL + encoding only':28s} {base:6.1f} s")
    total = base
    for metric in METRICS:
        regressors = ("gbt", "mlp") if args.mlp and metric == "transfer" else ("gbt",)
        start = time.perf_counter()
        evaluate(model, data, split, metrics=(metric,), transfer_regressors=regressors, **kwargs)
        extra = time.perf_counter() - start - base
        total += extra
        print(f"{metric + (' (gbt+mlp)' if len(regressors) == 2 else ''):28s} +{extra:5.1f} s")
    print(f"{'all':28s} {total:6.1f} s; load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
