"""Does the histogram-GBT DCI agree with the standard GBT DCI on trained models' codes?

For each ``--model DATASET:BETA:STEPS[:OBJECTIVE]`` it trains a burgess VAE (objective
``beta_vae`` unless named) on that procedural dataset (one torch thread; dSprites on the training
part of its leave1out split, other datasets on every image), encodes ``--n-train`` + ``--n-test``
training images to their posterior means, and computes DCI with estimator="gbt" and
estimator="hist_gbt". ``--checkpoint .../trainer.pt`` adds a model from a sweep instead. The
target is |ΔD| ≤ 0.05 on every model; the models are chosen to span a range of D values: a β-VAE
on dSprites after a few hundred steps is barely disentangled (D ≈ 0.03–0.06, as is one on Simple
after 1,500 steps); Ada-GVAE, weakly supervised with pairs of images that differ in one factor,
separates Simple's posX, posY and shape much sooner.

    python -m benchmarks.dci_trained_codes                                 # both default models
    python -m benchmarks.dci_trained_codes --model dsprites:4:600 --n-train 2000 --n-test 1000
"""

import argparse
import os
import time

import numpy as np
import torch

from analysis.metrics.dci import dci
from data_pipeline import get_split, load_procedural
from models import ModelConfig, Trainer, build, encode_means

DEFAULT_MODELS = ("dsprites:4:600", "simple:1:600:ada_gvae")


def trained_model(spec, n_images, seed):
    """(model, dataset, training rows) for a DATASET:BETA:STEPS[:OBJECTIVE] spec."""
    try:
        dataset, beta, steps, *objective = spec.split(":")
        beta, steps = float(beta), int(steps)
        (objective,) = objective or ["beta_vae"]
    except ValueError:
        raise SystemExit(
            f"--model {spec!r}: expected DATASET:BETA:STEPS[:OBJECTIVE], e.g. dsprites:4:600") from None
    data = load_procedural(dataset, n_images, seed=seed)
    if dataset == "dsprites":
        train_rows, _ = get_split("dsprites", "leave1out").train_test_indices(data.classes, data.factor_space)
    else:
        train_rows = np.arange(len(data.images))
    config = ModelConfig(steps=steps, beta=beta, batch_size=64, lr=1e-3, seed=seed, channels=data.channels,
                         objective=objective)
    trainer = Trainer(build(config), data.images, train_rows, config, "cpu", factors=data.classes)
    start = time.perf_counter()
    for progress in trainer.run(report_every=max(1, steps // 2)):
        print(f"  step {progress['step']}: loss {progress.get('loss', float('nan')):.1f}")
    print(f"  trained {steps} steps in {time.perf_counter() - start:.0f} s")
    return trainer.model, data, train_rows


def compare(model, data, train_rows, args):
    rng = np.random.default_rng(args.seed)
    n = min(args.n_train + args.n_test, len(train_rows))
    n_train = round(n * args.n_train / (args.n_train + args.n_test))
    rows = rng.choice(train_rows, n, replace=False)
    codes, factors = encode_means(model, data.images, rows), data.classes[rows]
    kwargs = dict(codes=codes[:n_train], factors=factors[:n_train], codes_test=codes[n_train:],
                  factors_test=factors[n_train:], n_jobs=args.n_jobs, random_state=args.seed)
    results = {}
    for estimator in ("gbt", "hist_gbt"):
        start = time.perf_counter()
        results[estimator] = r = dci(estimator=estimator, **kwargs)
        print(
            f"  {estimator:8s} {time.perf_counter() - start:7.1f} s  D={r['disentanglement']:.4f} "
            f"C={r['completeness']:.4f} I={r['informativeness_test']:.3f}  ({n_train} / {n - n_train} points)"
        )
    delta_d = abs(results["gbt"]["disentanglement"] - results["hist_gbt"]["disentanglement"])
    delta_c = abs(results["gbt"]["completeness"] - results["hist_gbt"]["completeness"])
    print(f"  |dD| = {delta_d:.4f}  |dC| = {delta_c:.4f}  (target |dD| <= 0.05: "
          f"{'met' if delta_d <= 0.05 else 'NOT met'})")
    return results["gbt"]["disentanglement"], delta_d


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append",
                        help=f"DATASET:BETA:STEPS[:OBJECTIVE] (default {DEFAULT_MODELS})")
    parser.add_argument("--checkpoint", action="append", default=[], help="a trainer.pt from a sweep")
    parser.add_argument("--n-images", type=int, default=20_000, help="grid points rendered (at most all)")
    parser.add_argument("--n-train", type=int, default=2000)
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--n-jobs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    started = time.perf_counter()
    print(f"load average at start {os.getloadavg()[0]:.1f}")
    rows = []
    for spec in args.model or ([] if args.checkpoint else DEFAULT_MODELS):
        print(f"{spec}:")
        model, data, train_rows = trained_model(spec, args.n_images, args.seed)
        rows.append((spec, *compare(model, data, train_rows, args)))
    for path in args.checkpoint:
        from analysis.trained_models import load_checkpoint

        print(f"{path}:")
        model, config, data = load_checkpoint(path)
        train_rows, _ = get_split(config["dataset"], config["split"]).train_test_indices(
            data.classes, data.factor_space)
        rows.append((path, *compare(model, data, train_rows, args)))
    print(f"{'model':40s} {'D (gbt)':>8s} {'|dD|':>7s}")
    for name, d, delta in rows:
        print(f"{name[-40:]:40s} {d:8.4f} {delta:7.4f}")
    worst = max(delta for _, _, delta in rows)
    print(f"largest |dD| {worst:.4f} (target <= 0.05: {'met' if worst <= 0.05 else 'NOT met'}); "
          f"{time.perf_counter() - started:.0f} s in all; load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
