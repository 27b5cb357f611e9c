"""cluster.yaml passes Ray's own validator offline, describes the cluster the README promises, and is
closed by default: no Ray port open to the outside, token authentication on, instance profiles
with the policies in cluster/iam, and no AWS secret copied or forwarded."""

import importlib.util
import ipaddress
import json
import pathlib
import re

import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

CLUSTER_YAML = pathlib.Path(__file__).resolve().parents[2] / "cluster.yaml"
_spec = importlib.util.spec_from_file_location("create_profiles",
                                               CLUSTER_YAML.parent / "cluster" / "iam" / "create_profiles.py")
create_profiles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(create_profiles)
_group_spec = importlib.util.spec_from_file_location(
    "create_security_group", CLUSTER_YAML.parent / "cluster" / "iam" / "create_security_group.py")
create_security_group = importlib.util.module_from_spec(_group_spec)
_group_spec.loader.exec_module(create_security_group)
_spec = importlib.util.spec_from_file_location("create_bucket",
                                               CLUSTER_YAML.parent / "cluster" / "iam" / "create_bucket.py")
create_bucket = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(create_bucket)


@pytest.fixture(scope="module")
def cluster():
    return yaml.safe_load(CLUSTER_YAML.read_text())


def test_ray_validator_accepts_it(cluster):
    validate_config(prepare_config(cluster))


def test_cpu_head_gpu_workers_and_a_spot_option(cluster):
    types = cluster["available_node_types"]
    head = types[cluster["head_node_type"]]
    assert cluster["provider"]["type"] == "aws"
    assert head["resources"].get("CPU") == 0  # the head drives the sweep, trials go to workers
    workers = {name: t for name, t in types.items() if name != cluster["head_node_type"]}
    assert all(t["node_config"]["InstanceType"].startswith(("g", "p")) for t in workers.values())
    assert any(t["node_config"].get("InstanceMarketOptions", {}).get("MarketType") == "spot"
               for t in workers.values())


def test_setup_installs_disgen(cluster):
    assert cluster["file_mounts"]["~/disgen"] == "."
    assert any("pip install -e ~/disgen" in command for command in cluster["setup_commands"])


# --- what the nodes run, and how many GPUs -----------------------------------------------------

def _pyproject_requirement(name):
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads pyproject.toml itself")

    project = tomllib.loads((CLUSTER_YAML.parent / "pyproject.toml").read_text())["project"]
    from packaging.requirements import Requirement

    return next(Requirement(r) for r in project["dependencies"] if Requirement(r).name == name)


def test_the_nodes_run_the_ray_image_disgen_pins_with_python_3_10_or_newer_and_cuda_on_gpu_workers(cluster):
    ray_pin = _pyproject_requirement("ray").specifier
    docker = cluster["docker"]
    images = {"head": docker["head_image"], "worker": docker["worker_image"]}
    for role, image in images.items():
        match = re.fullmatch(r"rayproject/ray:(\d+\.\d+\.\d+)-py3(\d+)-(cpu|gpu|cu\d+)", image)
        assert match, f"{role} image {image!r} is not a pinned rayproject/ray release tag"
        version, python_minor, platform = match.groups()
        assert version in ray_pin, f"{image}: Ray {version} is outside pyproject.toml's {ray_pin}"
        assert int(python_minor) >= 10
        if role == "worker":
            assert platform != "cpu", "GPU workers need the CUDA image"
    assert docker["pull_before_run"] is True


def test_every_node_boots_a_current_deep_learning_ami_not_rays_old_default(cluster):
    for name, node_type in cluster["available_node_types"].items():
        image = node_type["node_config"].get("ImageId", "")
        assert image.startswith("resolve:ssm:/aws/service/deeplearning/ami/x86_64/"), name
        assert "ubuntu-22.04" in image and image.endswith("/latest/ami-id")


def test_torch_installs_at_a_version_pyproject_allows(cluster):
    torch_pin = _pyproject_requirement("torch").specifier
    installs = [c for c in cluster["setup_commands"] if re.search(r"pip install .*[\"']?torch[<>=]", c)]
    assert len(installs) == 1
    from packaging.requirements import Requirement

    wanted = Requirement(re.search(r"[\"'](torch[^\"']*)[\"']", installs[0]).group(1)).specifier
    assert wanted == torch_pin, f"cluster.yaml installs torch{wanted}, pyproject.toml needs torch{torch_pin}"


GPUS_PER_INSTANCE = {"g5.xlarge": 1, "g5.2xlarge": 1, "g5.12xlarge": 4, "g5.48xlarge": 8,
                     "g6.xlarge": 1, "p4d.24xlarge": 8, "p5.48xlarge": 8}


def test_the_cluster_can_grow_to_16_gpus(cluster):
    workers = {n: t for n, t in cluster["available_node_types"].items() if n != cluster["head_node_type"]}
    per_node = {n: GPUS_PER_INSTANCE[t["node_config"]["InstanceType"]] for n, t in workers.items()}
    # the global max_workers caps all worker nodes together; each type caps its own
    best = sorted(per_node, key=per_node.get, reverse=True)
    left, gpus = cluster["max_workers"], 0
    for name in best:
        nodes = min(left, workers[name]["max_workers"])
        gpus, left = gpus + nodes * per_node[name], left - nodes
    assert gpus >= 16


def test_a_broken_config_is_rejected(cluster):
    with pytest.raises(ValueError, match="head_node_type"):
        validate_config(prepare_config({**cluster, "head_node_type": "missing"}))


# --- closed by default -------------------------------------------------------------------------

ROOT = CLUSTER_YAML.parent
IAM = ROOT / "cluster" / "iam"
BUCKET_ARNS = {"arn:aws:s3:::DISGEN_BUCKET", "arn:aws:s3:::DISGEN_BUCKET/*"}


def _start_commands(cluster):
    return [c for c in cluster["head_start_ray_commands"] + cluster["worker_start_ray_commands"]
            if "ray start" in c]


def _statements(name):
    document = json.loads((IAM / name).read_text())
    return [{**s, "Action": _as_list(s["Action"]), "Resource": _as_list(s["Resource"])}
            for s in document["Statement"]]


def _as_list(value):
    return [value] if isinstance(value, str) else list(value)


def test_the_dashboard_listens_on_the_heads_loopback_only(cluster):
    assert "0.0.0.0" not in CLUSTER_YAML.read_text()
    head = " ".join(cluster["head_start_ray_commands"])
    hosts = re.findall(r"--dashboard-host[= ](\S+)", head)
    # loopback: `ray dashboard cluster.yaml` forwards localhost:8265 to the head's localhost:8265
    assert hosts and all(ipaddress.ip_address(h).is_loopback for h in hosts)
    for command in _start_commands(cluster):  # nothing else is bound to every interface
        assert not re.search(r"--(node-ip-address|ray-client-server-host)[= ]0", command)


def test_the_security_group_admits_only_the_cluster_and_ssh_from_the_users_address(cluster):
    group = cluster["provider"]["security_group"]
    assert group["GroupName"]
    # beside the group's own members: SSH (for ray up/attach/dashboard) from one address the user
    # sets, nothing else; left as the placeholder, the group is not made
    (rule,) = group["IpPermissions"]
    assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) == ("tcp", 22, 22)
    assert rule["IpRanges"] == [{"CidrIp": "YOUR.ADDRESS/32"}] and "Ipv6Ranges" not in rule
    with pytest.raises(ValueError, match="YOUR.ADDRESS/32.*replace it with the address"):
        create_security_group.cluster_settings()
    for node_type in cluster["available_node_types"].values():  # the script's group, by its id, only
        assert node_type["node_config"]["SecurityGroupIds"] == ["DISGEN_SECURITY_GROUP_ID"]
        assert "NetworkInterfaces" not in node_type["node_config"]


def test_token_authentication_stays_on(cluster):
    text = CLUSTER_YAML.read_text()
    assert "RAY_AUTH_MODE=disabled" not in text and "RAY_AUTH_MODE=0" not in text
    commands = _start_commands(cluster)
    assert len(commands) == 2 and all("RAY_AUTH_MODE=token" in c for c in commands)
    # the shells `ray exec` and `ray attach` open: in the container (test_ray_exec_shells_...)
    assert "-e RAY_AUTH_MODE=token" in cluster["docker"]["run_options"]
    assert cluster["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"


def test_no_aws_secret_is_copied_or_forwarded(cluster, monkeypatch):
    text = CLUSTER_YAML.read_text()
    for secret in ("AWS_SECRET", "AWS_ACCESS_KEY", "AWS_SESSION_TOKEN", "aws_secret", ".aws"):
        assert secret not in text
    assert not any(".aws" in str(local) for local in cluster["file_mounts"].values())
    from analysis import storage

    for name, value in {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret",
                        "AWS_SESSION_TOKEN": "token", "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}.items():
        monkeypatch.setenv(name, value)
    forwarded = storage.worker_environment()  # what Ray's runtime_env (and its dashboard) gets
    assert forwarded == {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}


def test_nodes_get_instance_profiles_from_cluster_iam(cluster):
    profiles = {name: t["node_config"].get("IamInstanceProfile", {}).get("Name")
                for name, t in cluster["available_node_types"].items()}
    head = profiles.pop(cluster["head_node_type"])
    assert head == "disgen-head" and set(profiles.values()) == {"disgen-worker"}
    assert set(create_profiles.ROLES) == {"disgen-head", "disgen-worker"}
    assert all((IAM / f).is_file() for f in create_profiles.ROLES.values())


def test_every_node_answers_instance_metadata_only_with_a_session_token(cluster):
    """IMDSv2 only: a request without a token (IMDSv1, what a server-side request forgery can send)
    gets no credentials of the node's role; two hops, so the docker container reaches it."""
    for node_type in cluster["available_node_types"].values():
        options = node_type["node_config"]["MetadataOptions"]
        assert options["HttpTokens"] == "required" and options["HttpPutResponseHopLimit"] == 2


def test_workers_may_use_the_results_bucket_and_nothing_else():
    statements = _statements("worker-policy.json")
    assert statements and all("Condition" not in s for s in statements)
    # what it may do: the bucket (the Deny statements only narrow it, to keep the driver's keys the
    # driver's: tests/sweeps/test_nothing_unpickled_that_a_worker_can_write.py)
    allows = [s for s in statements if s["Effect"] == "Allow"]
    assert {s["Effect"] for s in statements} == {"Allow", "Deny"}
    assert {r for s in allows for r in s["Resource"]} == BUCKET_ARNS
    actions = {a for s in allows for a in s["Action"]}
    assert all(a.startswith("s3:") and "*" not in a for a in actions)
    assert {"s3:GetObject", "s3:PutObject", "s3:ListBucket"} <= actions


def test_the_head_may_do_what_the_autoscaler_needs_plus_the_bucket(cluster):
    statements = _statements("head-policy.json")
    assert all(s["Effect"] == "Allow" for s in statements)
    s3 = [s for s in statements if any(a.startswith("s3:") for a in s["Action"])]
    assert {r for s in s3 for r in s["Resource"]} == BUCKET_ARNS
    assert all(a.startswith("s3:") for s in s3 for a in s["Action"])  # no bucket rule grants more
    others = {a for s in statements for a in s["Action"] if not a.startswith("s3:")}
    assert others == {"ec2:RunInstances", "ec2:DescribeInstances", "ec2:DescribeInstanceTypes",
                      "ec2:DescribeImages", "ec2:CreateTags", "ec2:TerminateInstances", "iam:PassRole",
                      "iam:CreateServiceLinkedRole", "ssm:GetParameters"}
    launches = [s for s in statements if "ec2:RunInstances" in s["Action"]]
    assert all(s["Resource"] != ["*"] for s in launches)  # no instance but this cluster's
    (instances,) = [s for s in launches if any(":instance/" in r for r in s["Resource"])]
    tag = instances["Condition"]["StringEquals"]["aws:RequestTag/ray-cluster-name"]
    assert tag == cluster["cluster_name"]
    for statement in statements:
        if "ec2:TerminateInstances" in statement["Action"]:  # only this cluster's nodes
            tag = statement["Condition"]["StringEquals"]["aws:ResourceTag/ray-cluster-name"]
            assert tag == cluster["cluster_name"]
        if "iam:PassRole" in statement["Action"]:  # hands workers their role, no other
            assert [r.rsplit(":", 1)[1] for r in statement["Resource"]] == ["role/disgen-worker"]
        if "ssm:GetParameters" in statement["Action"]:  # AWS's public AMI parameters, nothing else
            assert statement["Resource"] == ["arn:aws:ssm:*::parameter/aws/service/deeplearning/ami/*"]
        if "iam:CreateServiceLinkedRole" in statement["Action"]:
            assert statement["Condition"]["StringLike"]["iam:AWSServiceName"] == "spot.amazonaws.com"


def test_the_bucket_is_named_in_one_place(cluster):
    text = CLUSTER_YAML.read_text()
    assert re.findall(r"s3://([^/\s\"']+)", text) and set(re.findall(r"s3://([^/\s\"']+)", text)) == {
        "$DISGEN_BUCKET"}
    for name in ("head-policy.json", "worker-policy.json"):
        assert "DISGEN_BUCKET" in (IAM / name).read_text()
    filled = create_profiles.policy("worker-policy.json", "my-lab-disgen", "123456789012")
    assert "DISGEN_BUCKET" not in json.dumps(filled) and "arn:aws:s3:::my-lab-disgen/*" in json.dumps(filled)


@pytest.fixture
def mocked_aws(monkeypatch):
    moto = pytest.importorskip("moto", reason="moto is in the test extra")
    for name, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with moto.mock_aws():
        yield


def test_create_profiles_makes_both_profiles_with_the_bucket_filled_in(mocked_aws, monkeypatch):
    import boto3

    monkeypatch.setenv("DISGEN_BUCKET", "first-bucket")
    assert create_profiles.main([]) == 0
    assert create_profiles.main(["--bucket", "my-lab-disgen"]) == 0  # again: updates in place
    iam = boto3.session.Session().client("iam")
    for role in ("disgen-head", "disgen-worker"):
        profile = iam.get_instance_profile(InstanceProfileName=role)["InstanceProfile"]
        assert [r["RoleName"] for r in profile["Roles"]] == [role]
        document = json.dumps(iam.get_role_policy(RoleName=role, PolicyName=role)["PolicyDocument"])
        assert "my-lab-disgen" in document and "first-bucket" not in document
        assert "DISGEN_BUCKET" not in document and "ACCOUNT_ID" not in document
        trust = iam.get_role(RoleName=role)["Role"]["AssumeRolePolicyDocument"]
        assert trust["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}


@pytest.mark.parametrize("bucket", ["", "UPPER", "a", "bad_name", "-dash", "x" * 64, "two..dots"])
def test_create_profiles_refuses_a_bad_bucket_name(bucket, monkeypatch, capsys):
    monkeypatch.delenv("DISGEN_BUCKET", raising=False)
    assert create_profiles.main([f"--bucket={bucket}"] if bucket else []) == 2
    assert "bucket" in capsys.readouterr().err


# --- the results bucket: created, versioned, closed ------------------------------------------------

def test_create_bucket_makes_a_versioned_private_bucket_in_the_clusters_region(cluster, mocked_aws,
                                                                              monkeypatch, capsys):
    import boto3

    monkeypatch.setenv("DISGEN_BUCKET", "my-lab-disgen")
    assert create_bucket.main([]) == 0
    assert "created in us-west-2" in capsys.readouterr().out
    s3 = boto3.session.Session().client("s3", region_name="us-west-2")
    region = s3.get_bucket_location(Bucket="my-lab-disgen")["LocationConstraint"]
    assert region == cluster["provider"]["region"]
    assert s3.get_bucket_versioning(Bucket="my-lab-disgen")["Status"] == "Enabled"
    block = s3.get_public_access_block(Bucket="my-lab-disgen")["PublicAccessBlockConfiguration"]
    assert all(block.values()) and len(block) == 4
    everything, checkpoints = s3.get_bucket_lifecycle_configuration(Bucket="my-lab-disgen")["Rules"]
    assert everything["NoncurrentVersionExpiration"]["NoncurrentDays"] == 30
    assert everything["Filter"] == {"Prefix": ""}
    # the in-training checkpoints, rotated every few minutes: their earlier versions go after a day
    from sweeps.checkpoints import CHECKPOINTS

    assert checkpoints["Filter"] == {"Prefix": f"{CHECKPOINTS}/"}
    assert checkpoints["NoncurrentVersionExpiration"]["NoncurrentDays"] == 1
    assert all(r["Expiration"] == {"ExpiredObjectDeleteMarker": True} for r in (everything, checkpoints))
    # what versioning is for: a results part that a driver deleted comes back
    key = "disgen/default/results-parts/a.trials.parquet"
    s3.put_object(Bucket="my-lab-disgen", Key=key, Body=b"rows")
    s3.delete_object(Bucket="my-lab-disgen", Key=key)
    versions = s3.list_object_versions(Bucket="my-lab-disgen", Prefix=key)["Versions"]
    s3.copy_object(Bucket="my-lab-disgen", Key=key,
                   CopySource={"Bucket": "my-lab-disgen", "Key": key, "VersionId": versions[0]["VersionId"]})
    assert s3.get_object(Bucket="my-lab-disgen", Key=key)["Body"].read() == b"rows"
    # again: the bucket is this account's, nothing changes, and an own lifecycle rule stays
    s3.put_bucket_lifecycle_configuration(Bucket="my-lab-disgen", LifecycleConfiguration={"Rules": [
        {"ID": "mine", "Status": "Enabled", "Filter": {"Prefix": "tmp/"}, "Expiration": {"Days": 1}}]})
    assert create_bucket.main(["--bucket", "my-lab-disgen"]) == 0
    out = capsys.readouterr().out
    assert "exists in us-west-2" in out and "put in place" in out
    rules = s3.get_bucket_lifecycle_configuration(Bucket="my-lab-disgen")["Rules"]
    assert [r["ID"] for r in rules] == ["mine", create_bucket.RULE_ID, create_bucket.CHECKPOINT_RULE_ID]
    assert create_bucket.main(["--bucket", "my-lab-disgen"]) == 0  # a third time: nothing to change
    assert "already up to date" in capsys.readouterr().out
    assert s3.get_bucket_lifecycle_configuration(Bucket="my-lab-disgen")["Rules"] == rules


def test_create_bucket_in_us_east_1_and_refusals(mocked_aws, monkeypatch, capsys):
    import boto3

    assert create_bucket.main(["--bucket", "east-disgen", "--region", "us-east-1"]) == 0
    s3 = boto3.session.Session().client("s3")
    assert s3.get_bucket_versioning(Bucket="east-disgen")["Status"] == "Enabled"
    monkeypatch.delenv("DISGEN_BUCKET", raising=False)
    capsys.readouterr()
    assert create_bucket.main([]) == 2 and "DISGEN_BUCKET" in capsys.readouterr().err
    assert create_bucket.main(["--bucket", "Bad_Name"]) == 2 and "bucket" in capsys.readouterr().err
    assert create_bucket.main(["--bucket", "ok-name", "--keep-days", "0"]) == 2


# --- what Ray's autoscaler runs where: the host, or the container ---------------------------------
# Rendered by Ray's own command runner (DockerCommandRunner, over its SSH runner), with a process
# runner that records the commands instead of running them: what `ray up` and `ray exec` would send.


def _provider(config, cluster_name):
    """A node provider that answers just what the command runners ask of one."""
    from ray.autoscaler.node_provider import NodeProvider

    class Provider(NodeProvider):
        def external_ip(self, node_id):
            return "192.0.2.10"

        def internal_ip(self, node_id):
            return "10.0.0.10"

        def is_terminated(self, node_id):
            return False

    return Provider(config, cluster_name)


def _unwrap(script: str) -> str:
    """CMD of Ray's login-shell wrapping ``source ~/.bashrc; export … && (CMD)``."""
    return script.split(" && (", 1)[1].rsplit(")", 1)[0].strip()


class _Recorder:
    """A process runner (Ray's ``subprocess`` stand-in) that records each command; the host answers
    as a deep learning AMI with docker and no container running yet would."""

    DEVNULL, PIPE, STDOUT = -3, -1, -2

    def __init__(self):
        self.commands = []

    def _inner(self, final_cmd) -> str:
        """The command Ray wraps in ``ssh … bash --login -c -i 'source ~/.bashrc; … && (CMD)'``."""
        import shlex

        return _unwrap(shlex.split(final_cmd[-1])[0])

    def check_call(self, final_cmd, *args, **kwargs):
        self.commands.append(self._inner(final_cmd))
        return 0

    def check_output(self, final_cmd, *args, **kwargs):
        command = self._inner(final_cmd)
        self.commands.append(command)
        if "json .Config.Env" in command:
            return b'["PATH=/usr/bin", "HOME=/home/ray"]'
        if "printenv HOME" in command:
            return b"/home/ray"
        if command.startswith("command -v docker"):
            return b"/usr/bin/docker"
        return b"false" if "inspect" in command else b""


def _render(config, as_head: bool, ray_exec: str):
    """What Ray runs on a new node of ``config`` (its updater's order: initialization commands on the
    host, the container started, setup and start commands with run_env "auto"), then what
    ``ray exec`` runs there; [(where, command)], where "host" or the container's name."""
    import shlex

    from ray.autoscaler._private.command_runner import DockerCommandRunner

    recorder = _Recorder()
    provider = _provider(config["provider"], config["cluster_name"])
    runner = provider.get_command_runner("test", "i-0", config["auth"], config["cluster_name"], recorder,
                                         False, config["docker"])
    assert isinstance(runner, DockerCommandRunner)
    # ray/autoscaler/_private/updater.py (Ray 2.60): initialization_commands with run_env="host",
    # then cmd_runner.run_init (docker run), setup_commands and the start commands with "auto"
    for command in config["initialization_commands"]:
        runner.run(command, run_env="host")
    runner.run_init(as_head=as_head, file_mounts=config["file_mounts"], sync_run_yet=True)
    role = "head" if as_head else "worker"
    for command in (config["setup_commands"] + config[f"{role}_setup_commands"]
                    + config[f"{role}_start_ray_commands"]):
        runner.run(command, run_env="auto")
    runner.run(ray_exec, run_env="auto")  # ray/autoscaler/_private/commands.py: exec_cluster's _exec
    rendered = []
    for command in recorder.commands:
        words = shlex.split(command)
        if words[:2] == ["docker", "exec"] and "/bin/bash" in words:  # run in the container
            container = words[words.index("/bin/bash") - 1]
            login_shell = shlex.split(words[-1])  # bash --login -c -i 'source ~/.bashrc; … && (CMD)'
            assert login_shell[:4] == ["bash", "--login", "-c", "-i"]  # reads the container's ~/.bashrc
            rendered.append((container, _unwrap(login_shell[4])))
        else:
            rendered.append(("host", command))
    return rendered


def _container(rendered):
    """The ``docker run`` that starts the node's container: (its name, its -e settings, its -v mounts)."""
    import shlex

    (run,) = [shlex.split(c) for where, c in rendered if where == "host" and c.startswith("docker run")]
    flags = [(run[i], run[i + 1]) for i in range(len(run) - 1)]
    env = dict(value.split("=", 1) for flag, value in flags if flag == "-e")
    mounts = dict(value.split(":", 1) for flag, value in flags if flag == "-v")
    return run[run.index("--name") + 1], env, mounts


@pytest.mark.parametrize("as_head", [True, False], ids=["head", "worker"])
def test_ray_exec_shells_run_in_the_container_with_token_authentication(cluster, as_head):
    command = "cd ~/disgen && python -m sweeps.paper_grid --address auto"
    rendered = _render(prepare_config(cluster), as_head, command)
    name, env, mounts = _container(rendered)
    where, ran = rendered[-1]
    assert where == name == cluster["docker"]["container_name"]  # `ray exec` runs in the container...
    assert "cd /home/ray/disgen && python -m sweeps.paper_grid" in ran
    assert env.get("RAY_AUTH_MODE") == "token"  # ...whose every process (docker exec's included) has it
    assert mounts["/tmp/ray_tmp_mount/disgen/~/.ray/auth_token"] == "/home/ray/.ray/auth_token"  # the token
    assert mounts["/mnt/shared"] == "/mnt/shared"  # the host's shared folder, at the same path
    # the ~/.bashrc that the container's login shells read gets it too, from inside the container
    assert any(where == name and "export RAY_AUTH_MODE=token" in c and ">> /home/ray/.bashrc" in c
               for where, c in rendered)
    # nothing about the token is left to the host's shells, which are not the container's
    host_shells = [c for where, c in rendered if where == "host" and not c.startswith("docker run")]
    assert not any("RAY_AUTH" in c for c in host_shells)
    starts = [c for where, c in rendered if "ray start" in c]
    assert starts and all(where == name for where, c in rendered if "ray start" in c)


def test_the_documented_shared_folder_is_mounted_on_the_host_and_seen_in_the_container(cluster):
    """docs/cluster.md's EFS recipe, applied to cluster.yaml as it says (its initialization_commands
    in place of the []): mounted on the host, before the container starts, which cluster.yaml's
    run_options bind-mount at the same path, so --storage-path /mnt/shared/disgen works in `ray exec`."""
    doc = (ROOT / "docs" / "cluster.md").read_text()
    recipe = yaml.safe_load(doc.split("<!-- shared-folder recipe -->", 1)[1].split("```yaml", 1)[1]
                            .split("```", 1)[0])
    assert set(recipe) == {"initialization_commands"} and cluster["initialization_commands"] == []
    text = CLUSTER_YAML.read_text()  # the same commands, in cluster.yaml's comment where they go
    assert all(f"#     - {c}" in text for c in recipe["initialization_commands"])
    assert "initialization_commands: []" in text and "replace `initialization_commands: []`" in doc
    edited = yaml.safe_load(text.replace("initialization_commands: []", "initialization_commands:\n"
                                         + "".join(f"  - {c}\n" for c in recipe["initialization_commands"])))
    config = edited
    rendered = _render(prepare_config(config), False, "ls /mnt/shared/disgen")
    name, env, mounts = _container(rendered)
    assert mounts["/mnt/shared"] == "/mnt/shared" and env.get("RAY_AUTH_MODE") == "token"
    mount = [i for i, (where, c) in enumerate(rendered) if "mount -t nfs4" in c]
    started = [i for i, (where, c) in enumerate(rendered) if c.startswith("docker run")]
    assert mount and rendered[mount[0]][0] == "host" and mount[0] < started[0]  # mounted before the container
    assert rendered[-1] == (name, "ls /mnt/shared/disgen")


# --- the security group: made before `ray up`, SSH from the user's address only -----------------

def test_create_security_group_opens_ssh_to_the_users_address_only(mocked_aws, tmp_path):
    import boto3

    text = CLUSTER_YAML.read_text()
    mine = tmp_path / "cluster.yaml"
    mine.write_text(text.replace("YOUR.ADDRESS/32", "203.0.113.7/32"))
    region, name, rules = create_security_group.cluster_settings(mine)
    done = create_security_group.create_security_group(region, name, rules)
    ec2 = boto3.session.Session().client("ec2", region_name=region)

    def inbound():
        (group,) = ec2.describe_security_groups(GroupIds=[done["group_id"]])["SecurityGroups"]
        return group["IpPermissions"]

    def cidrs():
        return sorted(r["CidrIp"] for rule in inbound() for r in rule.get("IpRanges", []))

    assert done["created"] and cidrs() == ["203.0.113.7/32"]
    members = [p["GroupId"] for rule in inbound() for p in rule.get("UserIdGroupPairs", [])]
    assert members == [done["group_id"]]  # and all traffic from the cluster's own nodes
    # Ray's own rule, SSH from everywhere (a group Ray made itself): removed by a second run
    ec2.authorize_security_group_ingress(GroupId=done["group_id"], IpPermissions=[
        {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}])
    again = create_security_group.create_security_group(region, name, rules)
    assert not again["created"] and again["removed"] == 1 and cidrs() == ["203.0.113.7/32"]
    # an address open to everyone is refused, as is the placeholder
    mine.write_text(text.replace("YOUR.ADDRESS/32", "0.0.0.0/0"))
    with pytest.raises(ValueError, match="every address"):
        create_security_group.cluster_settings(mine)


@pytest.fixture
def rays_aws_bootstrap(mocked_aws, monkeypatch):
    """Ray's own AWS set-up steps of `ray up` (the subnets, the security groups), run on moto: its
    boto3 resources cached per process are dropped before and after, and the default boto3 session
    they make is set back. Private names of Ray's autoscaler (``_configure_subnet``,
    ``_configure_security_group``), read from Ray 2.60.0, the version pyproject.toml pins: a Ray that
    renames them fails this test, which is then to be read again against its autoscaler."""
    import boto3
    from ray.autoscaler._private.aws import config, utils

    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    for cached in (utils.resource_cache, utils.client_cache):
        cached.cache_clear()
    yield config
    for cached in (utils.resource_cache, utils.client_cache):
        cached.cache_clear()


def _groups_open_to_everyone(region: str) -> list[str]:
    import boto3

    ec2 = boto3.session.Session().client("ec2", region_name=region)
    groups = ec2.describe_security_groups()["SecurityGroups"]
    return [g["GroupName"] for g in groups
            if any(create_security_group._open_to_everyone(rule) for rule in g.get("IpPermissions", []))]


def test_ray_up_stops_before_making_a_group_open_to_everyone_until_the_script_names_its_own(
        rays_aws_bootstrap, tmp_path, capsys):
    """`ray up` on the shipped file stops at Ray's subnet step (no group found by the placeholder id),
    before any node or group is made. A node type without SecurityGroupIds (the control) gets a group
    Ray makes with SSH open to every address: what the placeholder prevents. After the script, every
    node type names its group, and Ray makes none."""
    config = rays_aws_bootstrap
    shipped = prepare_config(yaml.safe_load(CLUSTER_YAML.read_text()))
    region = shipped["provider"]["region"]
    with pytest.raises(AssertionError):
        config._configure_subnet(json.loads(json.dumps(shipped)))
    assert "Failed to detect a security group with id equal to any" in capsys.readouterr().err
    assert _groups_open_to_everyone(region) == []

    control = json.loads(json.dumps(shipped).replace("YOUR.ADDRESS/32", "203.0.113.7/32"))
    for node_type in control["available_node_types"].values():
        del node_type["node_config"]["SecurityGroupIds"]
    config._configure_security_group(config._configure_subnet(control))
    assert _groups_open_to_everyone(region) == ["disgen-cluster"]  # Ray's own group, SSH from 0.0.0.0/0
    import boto3

    ec2 = boto3.session.Session().client("ec2", region_name=region)
    ec2.delete_security_group(GroupName="disgen-cluster")

    mine = tmp_path / "cluster.yaml"
    mine.write_text(CLUSTER_YAML.read_text().replace("YOUR.ADDRESS/32", "203.0.113.7/32"))
    assert create_security_group.main(["--config", str(mine)]) == 0
    said = capsys.readouterr().out
    (group_id,) = re.findall(r"\((sg-[0-9a-f]+)\) created", said)
    assert f"names it in every node type; now: ray up {mine.name}" in said
    written = prepare_config(yaml.safe_load(mine.read_text()))
    node_types = written["available_node_types"].values()
    assert {tuple(t["node_config"]["SecurityGroupIds"]) for t in node_types} == {(group_id,)}
    before = ec2.describe_security_groups()["SecurityGroups"]
    config._configure_security_group(config._configure_subnet(written))
    assert ec2.describe_security_groups()["SecurityGroups"] == before  # Ray made no group and changed none
    assert _groups_open_to_everyone(region) == []
    assert create_security_group.main(["--config", str(mine)]) == 0  # run again: the file already names it
    assert "exists" in capsys.readouterr().out
