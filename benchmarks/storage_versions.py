"""Object versions a sweep leaves in a versioned bucket outside ``checkpoints/`` (issue 51, item 4).

Runs a real tiny sweep (``python -m sweeps.paper_grid``, its own local Ray) on a moto S3 server on
loopback whose bucket ``cluster/iam/create_bucket.py`` made (versioning on, disgen's lifecycle
rules), then lists every object version and delete marker in the bucket and counts them by kind of
file: Tune's driver files (its experiment state and each trial's ``result.json``, ``progress.csv``,
``params``), disgen's records (results parts and tables, plan, lock, errors), TensorBoard files,
and ``checkpoints/``. Prints the counts, per trial and per minute of sweep, as a table::

    python benchmarks/storage_versions.py                  # 4 trials of 200 steps, one at a time
    python benchmarks/storage_versions.py --trials 8 --steps 400

A version outside ``checkpoints/`` is kept 30 days by the lifecycle rule; so the count per minute
is what a month of sweeping keeps (benchmarks/README.md computes the month of D21 from it).
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import moto_server

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "disgen-versions"

GRID = """description: tiny trials for counting object versions
fixed: {{dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 2000, data_seed: 0,
        batch_size: 16, report_every: 25, n_nll: 200, n_metric: 200, metrics: [d_score], lr: 0.001,
        split: blank_side}}
axes:
  beta: {betas}
scales:
  tiny: {{steps: {steps}}}
"""


def kind(key: str) -> str:
    name = key.rsplit("/", 1)[-1]
    if key.endswith("/"):
        return "folder markers (empty keys ending in /)"
    if key.startswith("checkpoints/"):
        return "checkpoints/ (in-training checkpoints, kept 1 day)"
    if "/results-parts/" in key or "/errors-parts/" in key or name in (
            "trials.parquet", "history.parquet", "errors.jsonl", "plan.json", "driver.lock", "optuna.jsonl"):
        return "disgen's records (parts, tables, plan, lock)"
    if "tfevents" in name:
        return "TensorBoard files (the trials')"
    if "/checkpoint_" in key:
        return "final checkpoints (Tune's trial folders)"
    if name.startswith(("experiment_state", "basic-variant-state", "search_gen_state", "tuner.pkl",
                        "trainable.pkl", ".validate_storage_marker")):
        return "Tune's experiment state (driver)"
    if name in ("result.json", "progress.csv", "params.json", "params.pkl"):
        return "Tune's trial records (driver)"
    if name.startswith(".disgen-write-test"):
        return "disgen's records (parts, tables, plan, lock)"  # the start's check that it can write
    return "other: " + name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "cluster" / "iam"))
    import boto3
    from create_bucket import create_bucket

    server, endpoint = moto_server.start()
    env = {**os.environ, "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test",
           "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
    env.pop("RAY_ADDRESS", None)
    try:
        session = boto3.session.Session(aws_access_key_id="test", aws_secret_access_key="test")
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        create_bucket(BUCKET, "us-east-1", session=session)
        with tempfile.TemporaryDirectory() as folder:
            grid = Path(folder) / "grid.yaml"
            betas = [float(b + 1) for b in range(args.trials)]
            grid.write_text(GRID.format(betas=betas, steps=args.steps))
            argv = [sys.executable, "-m", "sweeps.paper_grid", "--grid", str(grid), "--scale", "tiny",
                    "--storage-path", f"s3://{BUCKET}/disgen", "--name", "exp", "--max-concurrent-trials",
                    "1", "--num-cpus", "2", "--checkpoint-minutes", "0.25"]
            started = time.perf_counter()
            done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
            seconds = time.perf_counter() - started
            if done.returncode != 0:
                print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
                return 1
        s3 = session.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        versions, markers = collections.Counter(), collections.Counter()
        keys = collections.defaultdict(set)
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=BUCKET):
            for version in page.get("Versions", []):
                versions[kind(version["Key"])] += 1
                keys[kind(version["Key"])].add(version["Key"])
            for marker in page.get("DeleteMarkers", []):
                markers[kind(marker["Key"])] += 1
    finally:
        server.terminate()
        server.wait()
    minutes = seconds / 60
    print(f"{args.trials} trials of {args.steps} steps, one at a time, in {seconds:.0f} s "
          f"(sweep command, its Ray's start included)")
    print(f"{'kind of file':<52} {'keys':>6} {'versions':>9} {'markers':>8} {'/trial':>8} {'/minute':>8}")
    for name in sorted(set(versions) | set(markers)):
        total = versions[name] + markers[name]
        print(f"{name:<52} {len(keys[name]):>6} {versions[name]:>9} {markers[name]:>8} "
              f"{total / args.trials:>8.1f} {total / minutes:>8.1f}")
    outside = sum(versions[k] + markers[k] for k in set(versions) | set(markers)
                  if not k.startswith("checkpoints/"))
    print(f"outside checkpoints/: {outside} versions and markers, {outside / args.trials:.1f} a trial, "
          f"{outside / minutes:.1f} a minute")
    return 0


if __name__ == "__main__":
    sys.exit(main())
