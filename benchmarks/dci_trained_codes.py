"""Does the histogram-GBT DCI agree with the standard GBT DCI on a trained model's codes?

Trains a burgess β-VAE on procedural dSprites for ``--steps`` steps (one thread), or loads a
sweep checkpoint (``--checkpoint .../trainer.pt``), encodes ``--n-train`` + ``--n-test`` training
images to their posterior means, and computes DCI with estimator="gbt" and estimator="hist_gbt".
The target is |ΔD| ≤ 0.05.

    python -m benchmarks.dci_trained_codes --steps 600 --n-train 2000 --n-test 1000
"""

import argparse
import os
import time

import numpy as np
import torch

from analysis.metrics.dci import dci
from data_pipeline import get_split, load_procedural
from models import ModelConfig, Trainer, build, encode_means


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--beta", type=float, default=4.0)
    parser.add_argument("--checkpoint", help="a trainer.pt from a sweep instead of training here")
    parser.add_argument("--n-images", type=int, default=20_000)
    parser.add_argument("--n-train", type=int, default=2000)
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--n-jobs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", help="write the trained model's state_dict here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"load average at start {os.getloadavg()[0]:.1f}")

    if args.checkpoint:
        from analysis.checkpoints import load_checkpoint

        model, config, data = load_checkpoint(args.checkpoint)
        split = get_split(config["dataset"], config["split"])
    else:
        data = load_procedural("dsprites", args.n_images, seed=args.seed)
        split = get_split("dsprites", "leave1out")
        config = ModelConfig(steps=args.steps, beta=args.beta, batch_size=64, lr=1e-3, seed=args.seed)
        train_rows, _ = split.train_test_indices(data.classes, data.factor_space)
        trainer = Trainer(build(config), data.images, train_rows, config, "cpu")
        start = time.perf_counter()
        for progress in trainer.run(report_every=max(1, args.steps // 4)):
            print(f"  step {progress['step']}: loss {progress.get('loss', float('nan')):.1f}")
        print(f"trained {args.steps} steps in {time.perf_counter() - start:.0f} s")
        model = trainer.model
        if args.save:
            torch.save(model.state_dict(), args.save)
    train_rows, _ = split.train_test_indices(data.classes, data.factor_space)
    rng = np.random.default_rng(args.seed)
    rows = rng.choice(train_rows, args.n_train + args.n_test, replace=False)
    codes, factors = encode_means(model, data.images, rows), data.classes[rows]
    kwargs = dict(
        codes=codes[: args.n_train],
        factors=factors[: args.n_train],
        codes_test=codes[args.n_train :],
        factors_test=factors[args.n_train :],
        n_jobs=args.n_jobs,
        random_state=args.seed,
    )
    results = {}
    for estimator in ("gbt", "hist_gbt"):
        start = time.perf_counter()
        results[estimator] = dci(estimator=estimator, **kwargs)
        r = results[estimator]
        print(
            f"{estimator:8s} {time.perf_counter() - start:7.1f} s  D={r['disentanglement']:.4f} "
            f"C={r['completeness']:.4f} I={r['informativeness_test']:.3f}"
        )
    delta_d = abs(results["gbt"]["disentanglement"] - results["hist_gbt"]["disentanglement"])
    delta_c = abs(results["gbt"]["completeness"] - results["hist_gbt"]["completeness"])
    print(
        f"|dD| = {delta_d:.4f}  |dC| = {delta_c:.4f}  (target |dD| <= 0.05: "
        f"{'met' if delta_d <= 0.05 else 'NOT met'}); load average now {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
