"""``python -m data_pipeline.prepare ... --out s3://bucket/prefix`` against a real S3-compatible
server (moto's server mode) on loopback, read back with the shard loader."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("moto.server", reason="moto[server] is in the test extra")  # 5.2.1 breaks pyarrow uploads

from data_pipeline import load_procedural  # noqa: E402
from data_pipeline.prepare import read_shards  # noqa: E402

BUCKET = "disgen-test"  # conftest's s3_server creates it


@pytest.mark.slow
def test_prepare_cli_writes_shards_to_s3_that_read_back_equal_the_render(s3_server, tmp_path):
    import boto3

    out = f"s3://{BUCKET}/prepared/simple"
    argv = [sys.executable, "-m", "data_pipeline.prepare", "simple", "--out", out, "--n-images", "300",
            "--rows-per-shard", "100", "--seed", "2", "--num-cpus", "2", "--address", "local"]
    root = str(Path(__file__).resolve().parents[1])
    environment = {**os.environ, **s3_server,
                   "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(argv, env=environment, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert "300 images in 3 shards" in done.stdout

    listed = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix="prepared/simple/")
    keys = sorted(item["Key"].rsplit("/", 1)[1] for item in listed["Contents"])
    assert len(keys) == 4 and keys[0] == "manifest.json" and all(k.startswith("shard-") for k in keys[1:])
    data = read_shards(out)  # through pyarrow's S3 file system, checksums verified
    expected = load_procedural("simple", n_images=300, seed=2)  # the single-process render
    assert np.array_equal(data.classes, expected.classes)
    assert data.images.dtype == np.uint8 and np.array_equal(data.images, expected.images)

    # a shard altered on the server is refused
    first = sorted(k for k in keys if k.startswith("shard-"))[0]
    s3 = boto3.client("s3")
    body = s3.get_object(Bucket=BUCKET, Key=f"prepared/simple/{first}")["Body"].read()
    s3.put_object(Bucket=BUCKET, Key=f"prepared/simple/{first}", Body=body[:-4] + b"\0\0\0\0")
    with pytest.raises(ValueError, match="sha256 differs"):
        read_shards(out)
