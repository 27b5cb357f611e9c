"""cluster.yaml passes Ray's own validator offline and describes the cluster the README promises."""

import pathlib

import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

CLUSTER_YAML = pathlib.Path(__file__).resolve().parents[1] / "cluster.yaml"


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


def test_a_broken_config_is_rejected(cluster):
    with pytest.raises(ValueError, match="head_node_type"):
        validate_config(prepare_config({**cluster, "head_node_type": "missing"}))
