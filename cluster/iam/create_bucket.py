"""Create the results bucket that cluster.yaml's nodes write to, versioned and closed to the public.

    export DISGEN_BUCKET=my-lab-disgen        # the results bucket: named here, and only here
    python cluster/iam/create_bucket.py       # needs boto3 and S3 rights (once per bucket)

The bucket is made in cluster.yaml's region (``--region`` to choose another), with versioning on,
so that a results part, checkpoint or table that is deleted or overwritten can be recovered
(``aws s3api list-object-versions``), and two lifecycle rules so that such earlier versions do not
pile up: one removes them after ``--keep-days`` days (and unfinished multipart uploads after 7);
the other, for the ``checkpoints/`` prefix that holds the trials' in-training checkpoints (written
every few minutes, the newest two kept: sweeps/checkpoints.py), after 1 day. Both also remove a
delete marker left with no versions behind it (``ExpiredObjectDeleteMarker``), so that deleted
checkpoints leave nothing to list. Where two rules cover an object S3 applies the shorter expiry.
Public access is blocked. Running it again on a bucket you own turns versioning and the public
access block on and brings disgen's two rules up to date; other lifecycle rules are kept.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLUSTER_YAML = HERE.parents[1] / "cluster.yaml"
RULE_ID = "disgen: expire earlier versions"
CHECKPOINT_RULE_ID = "disgen: expire rotated checkpoints"
CHECKPOINTS_PREFIX = "checkpoints/"  # sweeps.checkpoints.CHECKPOINTS, at the bucket's top
CHECKPOINT_KEEP_DAYS = 1


def lifecycle_rules(keep_days: int) -> list[dict]:
    """disgen's lifecycle rules for the bucket."""
    return [
        {"ID": RULE_ID, "Status": "Enabled", "Filter": {"Prefix": ""},
         "Expiration": {"ExpiredObjectDeleteMarker": True},
         "NoncurrentVersionExpiration": {"NoncurrentDays": keep_days},
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7}},
        {"ID": CHECKPOINT_RULE_ID, "Status": "Enabled", "Filter": {"Prefix": CHECKPOINTS_PREFIX},
         "Expiration": {"ExpiredObjectDeleteMarker": True},
         "NoncurrentVersionExpiration": {"NoncurrentDays": CHECKPOINT_KEEP_DAYS}},
    ]


def _check_bucket(bucket: str | None) -> str:
    """create_profiles.py's check of the name (one rule for both scripts)."""
    spec = importlib.util.spec_from_file_location("disgen_create_profiles", HERE / "create_profiles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.check_bucket(bucket)


def cluster_region() -> str:
    """The region cluster.yaml starts its nodes in (the bucket belongs beside them)."""
    import yaml

    return yaml.safe_load(CLUSTER_YAML.read_text())["provider"]["region"]


def create_bucket(bucket: str, region: str, keep_days: int = 30, session=None) -> dict:
    """Create ``bucket`` in ``region`` (or take it as it is, if this account owns it), turn on
    versioning and the public access block, and put disgen's lifecycle rules beside any others
    (``lifecycle_rules``); what it did."""
    import boto3

    session = session or boto3.session.Session()
    s3 = session.client("s3", region_name=region)
    done = {"created": False, "lifecycle": False}
    options = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    try:
        s3.create_bucket(Bucket=bucket, **options)
        done["created"] = True
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    except s3.exceptions.BucketAlreadyExists:
        raise ValueError(f"bucket {bucket} belongs to another AWS account (bucket names are global); "
                         "choose another name for DISGEN_BUCKET") from None
    done["region"] = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint") or "us-east-1"
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration={
        "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True,
        "RestrictPublicBuckets": True})
    try:
        existing = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    except s3.exceptions.ClientError as error:
        if error.response.get("Error", {}).get("Code") != "NoSuchLifecycleConfiguration":
            raise
        existing = []
    ours = lifecycle_rules(keep_days)
    ids = {rule["ID"] for rule in ours}
    if [rule for rule in existing if rule.get("ID") in ids] != ours:
        others = [rule for rule in existing if rule.get("ID") not in ids]
        s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": others + ours})
        done["lifecycle"] = True
    return done


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python cluster/iam/create_bucket.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--bucket", default=os.environ.get("DISGEN_BUCKET"),
                        help="the results bucket (default: $DISGEN_BUCKET)")
    parser.add_argument("--region", default=None, help="default: cluster.yaml's provider region")
    parser.add_argument("--keep-days", type=int, default=30,
                        help="days a deleted or overwritten object's earlier version is kept (default 30)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        bucket = _check_bucket(args.bucket)
        if args.keep_days < 1:
            raise ValueError(f"--keep-days must be at least 1; got {args.keep_days}")
        region = args.region or cluster_region()
        done = create_bucket(bucket, region, args.keep_days)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if done["region"] != region:
        print(f"note: bucket {bucket} is in {done['region']}, the cluster in {region}: traffic between "
              "regions is slower and billed", file=sys.stderr)
    kept = (" (lifecycle rules for earlier versions and rotated checkpoints put in place)"
            if done["lifecycle"] else " (its lifecycle rules were already up to date)")
    print(f"bucket {bucket} {'created' if done['created'] else 'exists'} in {done['region']}: versioning "
          f"on{kept}, public access blocked; now: python cluster/iam/create_profiles.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
