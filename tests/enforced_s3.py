"""A moto S3 server on loopback that enforces IAM (moto's ``INITIAL_NO_AUTH_ACTION_COUNT``): the
first requests, unauthenticated, make the bucket and two IAM users carrying the policies as shipped,
``cluster/iam/head-policy.json`` (the driver's) and ``worker-policy.json`` (a worker's); from then
on every request must be signed by one of them and is judged by its policy, so a request the policy
denies fails here as it would on AWS. ``EnforcedS3.env(role)``: the ``AWS_*`` environment of the
head or a worker."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import start_moto_server

POLICIES = Path(__file__).resolve().parents[1] / "cluster" / "iam"
BUCKET = "disgen-enforced"
SETUP_REQUESTS = 7  # the bucket; per user: the user, its policy, its access key


def as_moto_reads_it(policy: str) -> str:
    """The policy with moto's name for one S3 action beside AWS's: moto judges a HeadBucket request
    as the action ``s3:HeadBucket``, which does not exist in IAM; AWS authorises HeadBucket by
    ``s3:ListBucket`` (the HeadBucket API reference, "Permissions"). So wherever the policy allows
    ``s3:ListBucket``, moto is told to allow ``s3:HeadBucket`` too: the same permission, as AWS reads it."""
    document = json.loads(policy)
    for statement in document["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if statement["Effect"] == "Allow" and "s3:ListBucket" in actions:
            statement["Action"] = [*actions, "s3:HeadBucket"]
    return json.dumps(document)


class EnforcedS3:
    def __init__(self, port: int):
        self.endpoint = f"http://127.0.0.1:{port}"
        self.server = start_moto_server(
            port, {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_REQUESTS)})
        import boto3

        setup = dict(endpoint_url=self.endpoint, aws_access_key_id="setup", aws_secret_access_key="setup",
                     region_name="us-east-1")
        boto3.session.Session().client("s3", **setup).create_bucket(Bucket=BUCKET)
        iam = boto3.session.Session().client("iam", **setup)
        self.keys = {}
        for role in ("head", "worker"):
            iam.create_user(UserName=role)
            shipped = (POLICIES / f"{role}-policy.json").read_text().replace("DISGEN_BUCKET", BUCKET)
            policy = as_moto_reads_it(shipped)
            iam.put_user_policy(UserName=role, PolicyName=f"disgen-{role}", PolicyDocument=policy)
            key = iam.create_access_key(UserName=role)["AccessKey"]
            self.keys[role] = (key["AccessKeyId"], key["SecretAccessKey"])

    def env(self, role: str) -> dict[str, str]:
        key_id, secret = self.keys[role]
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": key_id,
                "AWS_SECRET_ACCESS_KEY": secret, "AWS_DEFAULT_REGION": "us-east-1"}

    def close(self) -> None:
        self.server.terminate()
        self.server.wait()
