"""The numbers a refactor must not move: one fixed-seed run of every objective and task, and a pack.

    python benchmarks/numbers_fingerprint.py OUT.json            # record
    python benchmarks/numbers_fingerprint.py NEW.json --compare OLD.json

For every objective (and the ground-truth decoder and composition tasks) it trains a small model
for 50 steps on 2,000 procedural dSprites images and records each loss term of the last report,
at full float precision, plus a checksum of the trained weights. It also trains one pack of three
β-VAEs (different β, seed and learning rate) in loop mode and in vmap mode. ``--compare`` prints
every value that differs and the largest relative difference; exit code 1 if any is above 1e-6.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch

# the checkout this script is in, whatever copy of disgen is installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STEPS = 50


def _weights_checksum(model) -> float:
    return float(sum(p.detach().double().abs().sum() for p in model.parameters()))


def _data():
    from data_pipeline import get_split, load_procedural

    data = load_procedural("dsprites", 2000, seed=0)
    train, _ = get_split("dsprites", "leave1out").train_test_indices(data.classes, data.factor_space)
    return data, train


def _config(**overrides):
    from models import ModelConfig

    base = dict(architecture="burgess", latent_dim=10, batch_size=16, lr=1e-3, steps=STEPS, seed=3)
    return ModelConfig(**{**base, **overrides})


CASES = {
    "vae": dict(objective="vae"),
    "beta_vae": dict(objective="beta_vae", beta=4.0, kl_warmup_steps=20, grad_clip_norm=1.0),
    "annealed_vae": dict(objective="annealed_vae", gamma=100.0, capacity_max=5.0, capacity_steps=40),
    "factor_vae": dict(objective="factor_vae", gamma=20.0),
    "beta_tcvae": dict(objective="beta_tcvae", beta=6.0),
    "wae_mmd": dict(objective="wae_mmd"),
    "ada_gvae": dict(objective="ada_gvae", beta=2.0),
    "wae_gan": dict(objective="wae_gan"),
    "cascade_vae": dict(objective="cascade_vae", cascade_steps=10),
    "lie_group_vae": dict(objective="lie_group_vae"),
    "noise_and_milestones": dict(objective="beta_vae", input_noise_subpixel_std=0.05,
                                 input_noise_greyscale_std=0.05, lr_milestones=(20, 40)),
    "ground_truth_decoder": dict(task="ground_truth_decoder", architecture="higgins"),
    "composition": dict(task="composition", objective="vae"),
}


def record() -> dict:
    from models import build_trainer
    from models.packed import PackedTrainer

    torch.set_num_threads(1)
    data, train = _data()
    out = {}
    for name, overrides in CASES.items():
        trainer = build_trainer(_config(**overrides), data.images, data.classes, data.factor_space, train)
        reports = list(trainer.run(report_every=25))
        last = {k: v for k, v in reports[-1].items() if k != "images_per_second"}
        out[name] = {**last, "weights": _weights_checksum(trainer.model)}
        print(name, out[name], flush=True)
    configs = [_config(objective="beta_vae", beta=b, seed=s, lr=lr)
               for b, s, lr in ((1.0, 0, 1e-3), (4.0, 1, 5e-4), (8.0, 2, 1e-3))]
    for mode in ("loop", "vmap"):
        pack = PackedTrainer(configs, data.images, train, device="cpu", mode=mode, factors=data.classes)
        reports = list(pack.run(report_every=25))
        final = {}
        for report in reports:
            for k, r in report.items():
                final[k] = r
        out[f"pack_{mode}"] = {str(k): {**{n: v for n, v in final[k].items() if n != "images_per_second"},
                                        "weights": _weights_checksum(pack.members[k].model)}
                               for k in sorted(final)}
        print(f"pack_{mode}", out[f"pack_{mode}"], flush=True)
    return out


def _flatten(tree, prefix=""):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def compare(new: dict, old: dict, tolerance: float = 1e-6) -> int:
    a, b = dict(_flatten(new)), dict(_flatten(old))
    worst, bad, exact = 0.0, 0, 0
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            print(f"{key}: only in {'new' if key in a else 'old'}")
            bad += 1
            continue
        x, y = float(a[key]), float(b[key])
        if x == y or (math.isnan(x) and math.isnan(y)):
            exact += 1
            continue
        relative = abs(x - y) / max(abs(y), 1e-12)
        worst = max(worst, relative)
        print(f"{key}: {y!r} -> {x!r} (relative {relative:.2e})")
        bad += relative > tolerance
    print(f"{exact} of {len(set(a) | set(b))} values bit-identical; largest relative difference {worst:.2e}")
    return 1 if bad else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="JSON file to write")
    parser.add_argument("--compare", metavar="OLD", help="a JSON file recorded earlier to compare with")
    args = parser.parse_args(argv)
    np.seterr(all="ignore")
    values = record()
    with open(args.out, "w") as f:
        json.dump(values, f, indent=1, sort_keys=True)
    if args.compare:
        with open(args.compare) as f:
            return compare(values, json.load(f))
    return 0


if __name__ == "__main__":
    sys.exit(main())
