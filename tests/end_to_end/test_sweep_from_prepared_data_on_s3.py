"""Prepared data in an object store: ``python -m data_pipeline.prepare dsprites --out s3://…`` (Ray Data
blocks), then ``python -m sweeps.paper_grid --data-source prepared --data-dir s3://…``, against a real
S3-compatible server (moto's server mode) on loopback. The node caches the data once and each row
names the prepared dataset it read
(tests/end_to_end/test_sweep_on_real_files.py resumes from a prepared folder)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("moto.server", reason="moto[server] is in the test extra")  # 5.2.1 breaks pyarrow uploads

from data_pipeline import load_procedural, prepared  # noqa: E402
from data_pipeline.node_cache import materialisations, open_reference, prepared_reference  # noqa: E402

BUCKET = "disgen-test"  # conftest's s3_server creates it
ROOT = str(Path(__file__).resolve().parents[2])
ONE_TRIAL = """
description: one tiny dSprites trial
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 2000, data_seed: 0,
        batch_size: 32, report_every: 5, n_nll: 100, n_metric: 200, metrics: [d_score], lr: 0.001,
        split: blank_side}
axes:
  beta: [1.0]
scales:
  tiny: {steps: 10}
"""


def _run(argv, environment, cwd):
    done = subprocess.run([sys.executable, "-m", *argv], env=environment, capture_output=True, text=True,
                          timeout=300, cwd=cwd)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_prepared_on_s3_feeds_a_sweep_that_caches_it_once_per_node(s3_server, tmp_path):
    import boto3

    data_dir = f"s3://{BUCKET}/prepared"
    cache = tmp_path / "node-cache"
    environment = {**os.environ, **s3_server, "DISGEN_CACHE": str(cache),
                   "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    out = _run(["data_pipeline.prepare", "dsprites", "--out", f"{data_dir}/dsprites", "--n-images", "2000",
                "--rows-per-block", "700", "--num-cpus", "2", "--address", "local"], environment, tmp_path)
    assert "2,000 images in 3 blocks" in out
    listed = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix="prepared/dsprites/")["Contents"]
    # every file whole, no temporary left (data_pipeline.prepared.write_whole); pyarrow's S3 move
    # leaves an empty folder marker (the key ending in "/"), which nothing reads
    keys = sorted(item["Key"].rsplit("/", 1)[1] for item in listed if not item["Key"].endswith("/"))
    assert keys == ["classes.npy", "images-000000000.npy", "images-000000700.npy", "images-000001400.npy",
                    "manifest.json"]
    manifest = prepared.read_manifest(f"{data_dir}/dsprites")
    assert manifest["built_by"] == "ray.data"
    # the generator's own draw of 2,000 points: a trial with n_images 2000, data_seed 0 reads every
    # row, the same images the procedural trial renders
    data = open_reference(prepared_reference(f"{data_dir}/dsprites"), 2000, 0, cache_dir=tmp_path / "mine")
    expected = load_procedural("dsprites", n_images=2000, seed=0)
    assert np.array_equal(np.asarray(data.images), expected.images)
    assert np.array_equal(data.classes, expected.classes)

    grid = tmp_path / "one.yaml"
    grid.write_text(ONE_TRIAL)
    sweep = ["sweeps.paper_grid", "--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path),
             "--name", "exp", "--data-source", "prepared", "--data-dir", data_dir, "--num-cpus", "1"]
    assert "1 of 1 trials finished" in _run(sweep, environment, tmp_path)
    (record,) = materialisations(cache)  # the node copied it from S3 once
    assert record["kind"] == "prepared" and record["uri"] == f"{data_dir}/dsprites"
    (row,) = pd.read_parquet(tmp_path / "exp" / "trials.parquet").to_dict("records")
    assert row["data_source"] == "prepared" and json.loads(row["config"])["data_source"] == "prepared"
    assert row["data_uri"] == f"{data_dir}/dsprites"  # the row names the prepared dataset
    assert row["data_content_id"] == manifest["content_id"] and np.isfinite(row["test_nll"])

    # a real file converted straight to S3 (prepare --from-file) reads back the same
    from data_pipeline import factor_space, render
    from data_pipeline.prepare import main as prepare

    space = factor_space("circles")
    np.savez(tmp_path / "circles.npz", images=render("circles", space.all_classes()),
             factor_values=space.raw_values(space.all_classes()), factor_sizes=np.array(space.sizes))
    prepare(["circles", "--from-file", str(tmp_path / "circles.npz"), "--out", f"{data_dir}/circles",
             "--rows-per-block", "300", "--single-process"])  # one process: this test process starts no Ray
    circles = open_reference(prepared_reference(f"{data_dir}/circles"), cache_dir=tmp_path / "mine")
    assert len(circles.images.blocks) == 4 and np.array_equal(circles.classes, space.all_classes())
    assert np.array_equal(circles.images[np.arange(1024)][:, 0], render("circles", space.all_classes()))

    # a block altered on the server is refused by a node that has not cached it yet
    s3 = boto3.client("s3")
    body = s3.get_object(Bucket=BUCKET, Key="prepared/dsprites/images-000000700.npy")["Body"].read()
    s3.put_object(Bucket=BUCKET, Key="prepared/dsprites/images-000000700.npy", Body=body[:-4] + b"\1\1\1\1")
    with pytest.raises(ValueError, match="images-000000700.npy: sha256 differs"):
        open_reference(prepared_reference(f"{data_dir}/dsprites"), cache_dir=tmp_path / "fresh")
