"""A sweep on S3 checks, as it starts, that its bucket keeps storage bounded and results
recoverable (what cluster/iam/create_bucket.py puts in place: versioning, and earlier versions
expiring, sooner under checkpoints/), and warns, naming the script, where it does not; the head's
policy as shipped may read those settings."""

import importlib.util
from pathlib import Path

import boto3
import pytest
from enforced_s3 import BUCKET

from analysis.storage import retention_warning
from sweeps.checkpoints import CHECKPOINTS

_spec = importlib.util.spec_from_file_location(
    "create_bucket", Path(__file__).resolve().parents[2] / "cluster" / "iam" / "create_bucket.py")
create_bucket = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(create_bucket)
PREFIX = CHECKPOINTS + "/"


@pytest.mark.slow  # a moto server
def test_a_bucket_without_disgens_rules_is_named_with_the_fix(s3_server):
    experiment = "s3://disgen-test/runs/exp"
    s3 = boto3.session.Session().client("s3", endpoint_url=s3_server["AWS_ENDPOINT_URL"])

    def rules_are(*rules):
        s3.put_bucket_lifecycle_configuration(Bucket="disgen-test",
                                              LifecycleConfiguration={"Rules": list(rules)})

    warning = retention_warning(experiment, PREFIX)
    assert "versioning is off" in warning
    assert warning.endswith("python cluster/iam/create_bucket.py --bucket disgen-test (docs/cluster.md)")
    s3.put_bucket_versioning(Bucket="disgen-test", VersioningConfiguration={"Status": "Enabled"})
    assert "earlier versions never expire" in retention_warning(experiment, PREFIX)
    everywhere, checkpoints = create_bucket.lifecycle_rules(30)
    for rules in ([{**everywhere, "Filter": {"Prefix": "disgen/"}}],  # not the whole bucket
                  [{**everywhere, "Status": "Disabled"}, checkpoints]):
        rules_are(*rules)
        assert "earlier versions never expire" in retention_warning(experiment, PREFIX)
    rules_are(everywhere)
    assert f"no rule of its own expires the rotated checkpoints' earlier versions under {PREFIX}" in \
        retention_warning(experiment, PREFIX)
    rules_are(everywhere, checkpoints)
    assert retention_warning(experiment, PREFIX) is None
    assert retention_warning("/tmp/runs/exp", PREFIX) is None  # a folder: nothing to check


@pytest.mark.slow  # a moto server of its own
def test_the_heads_policy_may_read_the_buckets_rules(enforced_s3, monkeypatch):
    for name, value in enforced_s3.env("head").items():
        monkeypatch.setenv(name, value)
    warning = retention_warning(f"s3://{BUCKET}/disgen/exp", PREFIX)
    assert "versioning is off" in warning  # read, not refused
    for name, value in enforced_s3.env("worker").items():
        monkeypatch.setenv(name, value)
    assert "could not read" in retention_warning(f"s3://{BUCKET}/disgen/exp", PREFIX)  # not the worker's job
