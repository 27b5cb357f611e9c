"""Create (or update) the IAM roles and instance profiles that cluster.yaml names.

    export DISGEN_BUCKET=my-lab-disgen        # the results bucket: named here, and only here
    python cluster/iam/create_bucket.py       # the bucket itself, versioned (create_bucket.py)
    python cluster/iam/create_profiles.py     # needs boto3 and IAM rights (once per AWS account)

``disgen-worker`` may read and write the results bucket and nothing else (worker-policy.json).
``disgen-head`` may do what Ray's autoscaler does (launch, list, tag and terminate this cluster's
nodes, and hand workers the ``disgen-worker`` role) plus the same bucket (head-policy.json). Both
are trusted by EC2 only (trust-ec2.json). In the policy files ``DISGEN_BUCKET`` and ``ACCOUNT_ID``
are placeholders, filled in here. Running it again updates the policies (e.g. for a new bucket).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROLES = {"disgen-head": "head-policy.json", "disgen-worker": "worker-policy.json"}
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")  # S3's general-purpose bucket rule


def policy(filename: str, bucket: str, account: str) -> dict:
    """A policy file with its placeholders filled in."""
    text = (HERE / filename).read_text().replace("DISGEN_BUCKET", bucket).replace("ACCOUNT_ID", account)
    return json.loads(text)


def check_bucket(bucket: str | None) -> str:
    if not bucket:
        raise ValueError("no bucket: export DISGEN_BUCKET=<your results bucket> or pass --bucket")
    if not BUCKET_NAME.match(bucket) or ".." in bucket:
        raise ValueError(f"--bucket {bucket!r}: expected an S3 bucket name (3-63 characters: lowercase "
                         "letters, digits, dots and hyphens, starting and ending with a letter or digit)")
    return bucket


def create_profiles(bucket: str, session=None) -> dict[str, dict]:
    """Create or update both roles, their inline policies and instance profiles; the policies."""
    import boto3

    session = session or boto3.session.Session()
    iam = session.client("iam")
    account = session.client("sts").get_caller_identity()["Account"]
    trust = (HERE / "trust-ec2.json").read_text()
    written = {}
    for role, filename in ROLES.items():
        try:
            iam.create_role(RoleName=role, AssumeRolePolicyDocument=trust,
                            Description="disgen Ray cluster nodes (cluster/iam in the disgen repository)")
        except iam.exceptions.EntityAlreadyExistsException:
            iam.update_assume_role_policy(RoleName=role, PolicyDocument=trust)
        written[role] = policy(filename, bucket, account)
        iam.put_role_policy(RoleName=role, PolicyName=role, PolicyDocument=json.dumps(written[role]))
        try:
            iam.create_instance_profile(InstanceProfileName=role)
        except iam.exceptions.EntityAlreadyExistsException:
            pass
        profile = iam.get_instance_profile(InstanceProfileName=role)["InstanceProfile"]
        if role not in [r["RoleName"] for r in profile["Roles"]]:
            iam.add_role_to_instance_profile(InstanceProfileName=role, RoleName=role)
    return written


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python cluster/iam/create_profiles.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--bucket", default=os.environ.get("DISGEN_BUCKET"),
                        help="the results bucket (default: $DISGEN_BUCKET)")
    parser.add_argument("--print", action="store_true", help="print the filled-in policies; create nothing")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        bucket = check_bucket(args.bucket)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.print:
        for role, filename in ROLES.items():
            print(f"# {role}\n{json.dumps(policy(filename, bucket, 'ACCOUNT_ID'), indent=1)}")
        return 0
    create_profiles(bucket)
    print(f"instance profiles {', '.join(ROLES)} ready for bucket {bucket}; now: ray get-auth-token "
          "--generate (once), then ray up cluster.yaml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
