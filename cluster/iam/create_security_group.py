"""Create the cluster's security group before `ray up`, with SSH open only to the addresses you name.

    # in cluster.yaml, provider.security_group.IpPermissions: replace YOUR.ADDRESS/32 with the
    # address (CIDR) that may SSH to the nodes, e.g. your laptop's public address, 203.0.113.7/32
    python cluster/iam/create_security_group.py    # once, before the first `ray up` (needs boto3)

Ray's autoscaler, where a node type names no ``SecurityGroupIds``, makes a group of its own (or takes
the one named in ``provider.security_group``) and opens SSH (22) to every address, 0.0.0.0/0. So
this script makes the group, in the region's default VPC, with two kinds of rules only: all traffic
from the group itself (the cluster's nodes), and cluster.yaml's ``IpPermissions`` (SSH from your
CIDR); then it writes the group's id into cluster.yaml, in place of every node type's
``SecurityGroupIds: [DISGEN_SECURITY_GROUP_ID]``, so Ray uses it and makes none. Until it has,
``ray up`` stops before it starts anything ("Failed to detect a security group with id equal to any
of the configured SecurityGroupIds"). A CIDR left as the placeholder, or one open to everyone
(``0.0.0.0/0``, ``::/0``), is refused. Run again on a group that exists, it adds the rules that are
missing and removes any rule open to everyone (such as one Ray added).
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLUSTER_YAML = HERE.parents[1] / "cluster.yaml"
EVERYONE = {"0.0.0.0/0", "::/0"}
# What cluster.yaml ships in each node type's node_config, until this script writes the group's id
PLACEHOLDER = "SecurityGroupIds: [DISGEN_SECURITY_GROUP_ID]"


def cluster_settings(path: Path = CLUSTER_YAML) -> tuple[str, str, list[dict]]:
    """(region, group name, the SSH rules) cluster.yaml gives; a ValueError for a CIDR that is a
    placeholder or open to everyone."""
    import yaml

    provider = yaml.safe_load(path.read_text())["provider"]
    group = provider["security_group"]
    rules = group.get("IpPermissions") or []
    if not rules:
        raise ValueError(f"{path}: provider.security_group.IpPermissions names no address to allow SSH from")
    for rule in rules:
        for cidr in [r.get("CidrIp") for r in rule.get("IpRanges", [])] + [
                r.get("CidrIpv6") for r in rule.get("Ipv6Ranges", [])]:
            try:
                network = ipaddress.ip_network(cidr)
            except ValueError:
                raise ValueError(f"{path}: IpPermissions names {cidr!r}; replace it with the address that "
                                 "may SSH to the nodes, as a CIDR (e.g. 203.0.113.7/32)") from None
            if str(network) in EVERYONE:
                raise ValueError(f"{path}: IpPermissions opens the nodes to every address ({cidr}); name "
                                 "your own address instead (e.g. 203.0.113.7/32)")
    return provider["region"], group["GroupName"], rules


def _open_to_everyone(rule: dict) -> bool:
    return (any(r.get("CidrIp") in EVERYONE for r in rule.get("IpRanges", []))
            or any(r.get("CidrIpv6") in EVERYONE for r in rule.get("Ipv6Ranges", [])))


def create_security_group(region: str, name: str, rules: list[dict], session=None) -> dict:
    """Make (or mend) the group ``name`` in the default VPC of ``region``: traffic from itself and
    ``rules``, nothing open to everyone; what it did."""
    import boto3

    ec2 = (session or boto3.session.Session()).client("ec2", region_name=region)
    vpc = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    found = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": [name]},
                                                  {"Name": "vpc-id", "Values": [vpc]}])["SecurityGroups"]
    done = {"created": not found, "removed": 0}
    if found:
        group_id, existing = found[0]["GroupId"], found[0].get("IpPermissions", [])
    else:
        group_id = ec2.create_security_group(GroupName=name, VpcId=vpc, Description=(
            "disgen Ray cluster: its own nodes, and SSH from the addresses in cluster.yaml"))["GroupId"]
        existing = []
    wide = [rule for rule in existing if _open_to_everyone(rule)]
    if wide:
        ec2.revoke_security_group_ingress(GroupId=group_id, IpPermissions=wide)
        done["removed"] = len(wide)
    itself = {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group_id}]}
    for rule in [itself, *rules]:
        try:
            ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=[rule])
        except ec2.exceptions.ClientError as error:
            if error.response.get("Error", {}).get("Code") != "InvalidPermission.Duplicate":
                raise
    done["group_id"] = group_id
    return done


def write_group_id(path: Path, group_id: str) -> list[str]:
    """Put ``group_id`` in place of cluster.yaml's placeholder, in every node type; the other group
    ids the node types name (empty where each names ``group_id``), for the caller to report."""
    import yaml

    text = path.read_text()
    if PLACEHOLDER in text:
        text = text.replace(PLACEHOLDER, f"SecurityGroupIds: [{group_id}]")
        path.write_text(text)
    node_types = yaml.safe_load(text)["available_node_types"].values()
    return sorted({g for node_type in node_types for g in node_type["node_config"].get("SecurityGroupIds", [])
                   if g != group_id} | ({"(none)"} if any("SecurityGroupIds" not in t["node_config"]
                                                          for t in node_types) else set()))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python cluster/iam/create_security_group.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CLUSTER_YAML, metavar="CLUSTER_YAML",
                        help="the cluster file to read the rules from and write the group's id into "
                             "(default: the repository's cluster.yaml)")
    return parser


def main(argv: list[str] | None = None) -> int:
    config = build_parser().parse_args(argv).config
    try:
        region, name, rules = cluster_settings(config)
        done = create_security_group(region, name, rules)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    removed = f"; removed {done['removed']} rule(s) open to every address" if done["removed"] else ""
    state = "created" if done["created"] else "exists"
    print(f"security group {name} ({done['group_id']}) {state} in {region}: its own nodes, and SSH from "
          f"{config.name}'s addresses{removed}")
    others = write_group_id(config, done["group_id"])
    if others:
        print(f"error: {config} names other security groups than {done['group_id']} in its node types' "
              f"SecurityGroupIds ({', '.join(others)}); put {done['group_id']} there (a node type without "
              "SecurityGroupIds gets a group Ray makes, with SSH open to every address)", file=sys.stderr)
        return 1
    print(f"{config} names it in every node type; now: ray up {config.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
