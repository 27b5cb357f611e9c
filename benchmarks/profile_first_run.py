"""Where the first run's time goes: the default study's phases, one by one, in one process.

    python benchmarks/profile_first_run.py [--scale smoke] [--steps N]

The phases of ``python -m sweeps.paper_grid`` (the ``default`` preset), each timed alone, wall
and CPU seconds (this process's CPU time, plus its children's for Ray):

1. **imports**: torch, Ray, Tune, the sweep code;
2. **rendering**: the preset's dataset rendered into the node cache (``data_pipeline.node_cache``);
3. **Ray start-up**: ``ray.init`` of a private local Ray, as a plain run does, then shutdown;
4. **training**: one trial's training (``PackedTrainer`` with the trial's config, one thread, as
   a trial with one CPU runs), and its images per second;
5. **evaluation**: that trial's evaluation (``analysis.evaluation.evaluate``: NLL and
   the preset's disentanglement metrics), each metric's seconds from its own report where given.

The CLI runs 4 trials, 2 at a time on 2 cores, so its wall time is about imports + rendering +
Ray start-up + 2 × (training + evaluation) + Tune's bookkeeping; the script prints that estimate.
CPU time is what to compare before/after a change on a shared machine; wall time needs a quiet one.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


class Phase:
    """Wall and CPU seconds of a block (CPU: this process and its reaped children)."""

    rows: list[tuple[str, float, float]] = []

    def __init__(self, name: str):
        self.name = name

    @staticmethod
    def _cpu() -> float:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), self._cpu()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall, self._cpu() - self.cpu
        Phase.rows.append((self.name, self.wall, self.cpu))
        print(f"{self.name:<28} wall {self.wall:7.1f} s   CPU {self.cpu:7.1f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="smoke", help="the default preset's scale (default: smoke)")
    parser.add_argument("--steps", type=int, default=None, help="steps to train (default: the scale's)")
    parser.add_argument("--split", default="blank_side", help="the profiled trial's split")
    args = parser.parse_args(argv)
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)

    with Phase("imports"):
        import numpy as np
        import ray
        import torch
        from ray import tune  # noqa: F401

        from analysis.evaluation import evaluate
        from data_pipeline.node_cache import open_reference
        from data_pipeline.splits import get_split
        from models.packed import PackedTrainer
        from sweeps.data import plan_data
        from sweeps.grid import get_spec, trial_configs

    trials = trial_configs(get_spec("default"), "default", args.scale, [0])
    trial = next(t for t in trials if t.data.split == args.split)
    if args.steps:
        trial = trial.replace(steps=args.steps)
    with Phase("rendering (node cache)"):
        data = open_reference(plan_data(trials)[trial.data.key], trial.data.n_images, trial.data.data_seed)
    with Phase("Ray start-up + shutdown"):
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        ray.shutdown()

    torch.set_num_threads(1)  # a trial reserves one CPU
    split = get_split(trial.data.dataset, trial.data.split)
    train_rows, _ = split.train_test_indices(data.classes, data.factor_space)
    trainer = PackedTrainer([trial.model], data.images, train_rows, factors=data.classes,
                            factor_space=data.factor_space)
    with Phase(f"training ({trainer.members[0].total_steps} steps)") as training:
        for _ in trainer.run(report_every=trial.evaluation.report_every):
            pass
    images = trainer.members[0].total_steps * trial.model.batch_size
    print(f"{'':<28} {images / training.wall:.0f} images/s on one thread", flush=True)

    evaluation = trial.evaluation
    with Phase("evaluation") as evaluating:
        metrics = evaluate(trainer.members[0], data, split, evaluation, seed=trial.model.seed, n_jobs=1)
    timings = {k: v for k, v in metrics.items() if k.endswith("_seconds")}
    if timings:
        print(f"{'':<28} " + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(timings.items())), flush=True)

    walls = {name.split(" ")[0]: wall for name, wall, _ in Phase.rows}
    estimate = (walls["imports"] + walls["rendering"] + walls["Ray"]
                + np.ceil(len(trials) / 2) * (training.wall + evaluating.wall))
    print(f"estimated CLI wall time ({len(trials)} trials, 2 at a time, before Tune's bookkeeping): "
          f"{estimate:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
