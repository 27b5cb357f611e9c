"""Secrets reach the nodes as files readable by their owner only, never in a Ray runtime_env (which
Ray's dashboard shows): the W&B API key goes to its logging actor as a 0600 file on the driver's
node (``sweeps.tracking.actor_environment``), and every node makes Ray's token file 0600
(cluster.yaml)."""

import os
import stat
from pathlib import Path

import yaml

from sweeps import tracking

CLUSTER_YAML = Path(__file__).resolve().parents[2] / "cluster.yaml"


def test_the_wandb_key_goes_as_a_private_file_not_in_the_runtime_env(tmp_path, monkeypatch):
    driver = {"WANDB_API_KEY": "secret-key-123", "WANDB_MODE": "online", "HOME": "/home/me"}
    env = tracking.actor_environment(driver, str(tmp_path))
    assert "secret-key-123" not in repr(env) and "WANDB_API_KEY" not in env
    assert env["WANDB_MODE"] == "online" and "HOME" not in env
    path = env[tracking.KEY_FILE]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # set, then removed: monkeypatch records the variable either way, so that the key take_api_key
    # sets is removed after the test (a delenv of an absent variable records nothing to undo)
    monkeypatch.setenv("WANDB_API_KEY", "")
    monkeypatch.delenv("WANDB_API_KEY")
    for name, value in env.items():  # the actor's process
        monkeypatch.setenv(name, value)
    tracking.take_api_key()
    assert os.environ["WANDB_API_KEY"] == "secret-key-123" and tracking.KEY_FILE not in os.environ


def test_without_a_key_no_file_is_written(tmp_path):
    assert tracking.actor_environment({"WANDB_MODE": "offline"}, str(tmp_path)) == {"WANDB_MODE": "offline"}
    assert not list(tmp_path.iterdir())


def test_every_node_makes_the_token_file_private():
    cluster = yaml.safe_load(CLUSTER_YAML.read_text())
    token = next(remote for remote in cluster["file_mounts"] if remote.endswith("auth_token"))
    # setup_commands run on every node (head and workers), after the file mounts are copied
    assert f"chmod 600 {token}" in cluster["setup_commands"]
