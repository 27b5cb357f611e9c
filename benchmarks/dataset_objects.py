"""Object-store bytes each trial pulls: one object per dataset (now) against one object holding
every dataset (before: ``tune.with_parameters(train_trial, datasets=...)`` with the whole dict).

Runs a real sweep twice, ``--mode per-dataset`` (disgen's code) and ``--mode whole`` (the same code
with the datasets handed to ``with_parameters`` as one dict, as before), on a local cluster of a
head node and two 1-CPU worker nodes (``ray.cluster_utils.Cluster``; each node its own object
store), and asks every raylet how many bytes its object store created meanwhile
(``GetNodeStats``' ``cumulative_created_bytes``: the copies a node pulled for its trials). It
prints, per mode, the bytes pulled into each worker node and the dataset sizes. ``--estimate``
prints, without running anything, the bytes per trial of a preset at a scale (e.g. montero2022
full), from its datasets' factor grids.

    python benchmarks/dataset_objects.py                       # 2-dataset grid, both modes
    python benchmarks/dataset_objects.py --estimate --preset montero2022 --scale full
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

TWO_DATASETS = """
description: one short trial on each of two datasets
fixed: {architecture: burgess, objective: beta_vae, data_seed: 0, batch_size: 8, report_every: 5,
        n_nll: 50, n_metric: 50, dci_estimator: none, metrics: [d_score], lr: 0.001, beta: 1.0}
axes:
  data:
    - {dataset: dsprites, split: blank_side, n_images: %(n)d}
    - {dataset: shapes3d, split: shape2ohue, n_images: %(n)d}
scales:
  tiny: {steps: %(steps)d}
"""


def created_bytes() -> dict[str, int]:
    """node id → bytes ever created in that node's object store (its own objects and the copies
    it pulled from other nodes), for every live node."""
    import ray
    from ray._private.internal_api import node_stats

    return {node["NodeID"]: node_stats(node["NodeManagerAddress"], node["NodeManagerPort"],
                                       include_memory_info=False).store_stats.cumulative_created_bytes
            for node in ray.nodes() if node["Alive"]}


def run(mode: str, grid_file: str, storage_path: str, name: str, head: str) -> dict:
    """One sweep with the datasets shipped per dataset (disgen) or as one dict (before); the bytes
    each worker node pulled into its object store meanwhile."""
    from sweeps import paper_grid, tuner

    args = paper_grid.build_parser().parse_args(
        ["--grid", grid_file, "--scale", "tiny", "--storage-path", storage_path, "--name", name,
         "--max-failures", "0"])
    plan = paper_grid.plan(args)
    real = getattr(tuner, "_dataset_refs", None)
    if mode == "whole":
        tuner._dataset_refs = lambda datasets: datasets  # with_parameters puts the whole dict once
    before = created_bytes()
    try:
        summary = tuner.run_sweep(args, plan)
    finally:
        if real is not None:
            tuner._dataset_refs = real
    after = created_bytes()
    pulled = {node: after[node] - before.get(node, 0) for node in after if node != head}
    sizes = {key[1]: int(data.images.nbytes + data.classes.nbytes) for key, data in plan["datasets"].items()}
    return {"mode": mode, "finished": summary["finished"], "pulled_per_node": pulled, "datasets": sizes}


def estimate(preset: str, scale: str) -> None:
    from data_pipeline import dataset_channels, factor_space
    from sweeps.grid import get_spec, trial_configs

    trials = trial_configs(get_spec(preset), preset, scale, [0])
    sizes = {}
    for trial in trials:
        data = trial.data
        images = data.n_images or factor_space(data.dataset).n_images
        sizes[data.key] = images * dataset_channels(data.dataset) * trial.model.image_size ** 2
    total = sum(sizes.values())
    print(f"{preset} {scale}: {len(sizes)} datasets, {total / 2**30:.1f} GiB of images in all (uint8)")
    for key, size in sorted(sizes.items(), key=lambda item: -item[1]):
        print(f"  {key[1]:<10} {key[2] or 'full grid'!s:>10} images  {size / 2**30:6.2f} GiB   "
              f"a trial on it skips {(total - size) / 2**30:5.1f} GiB")
    mean_saving = sum(total - sizes[t.data.key] for t in trials) / len(trials)
    print(f"per trial, on average: {mean_saving / 2**30:.1f} GiB less to pull into its node's object store")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--estimate", action="store_true",
                        help="print the per-trial sizes of a preset and exit")
    parser.add_argument("--preset", default="montero2022")
    parser.add_argument("--scale", default="full")
    parser.add_argument("--n-images", type=int, default=20000, help="images per dataset in the measured grid")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--mode", choices=["both", "per-dataset", "whole"], default="both")
    args = parser.parse_args()
    if args.estimate:
        estimate(args.preset, args.scale)
        return
    import json

    import ray
    from ray.cluster_utils import Cluster

    # A head that runs no trial (the driver's objects live there) and one 1-CPU node per dataset:
    # each trial runs on a worker node, which pulls the objects the trial fetches.
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    head = ray.get_runtime_context().get_node_id()
    try:
        with tempfile.TemporaryDirectory() as folder:
            grid = os.path.join(folder, "two.yaml")
            with open(grid, "w") as f:
                f.write(TWO_DATASETS % {"n": args.n_images, "steps": args.steps})
            for mode in ["whole", "per-dataset"] if args.mode == "both" else [args.mode]:
                result = run(mode, grid, folder, f"exp-{mode}", head)
                mib = {k: round(v / 2**20, 1) for k, v in result["pulled_per_node"].items()}
                print(f"{mode:>12}: {result['finished']} trials; MiB pulled into each worker node's object "
                      f"store: {sorted(mib.values())}; datasets (MiB): "
                      f"{ {k: round(v / 2**20, 1) for k, v in result['datasets'].items()} }", flush=True)
                print("RESULT " + json.dumps(result), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
