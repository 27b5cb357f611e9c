"""Shared fixtures. One local Ray instance serves every test that needs Ray (ray.init costs ~6 s)."""

import os

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # ray.init would otherwise write a token to ~/.ray
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def ray_session():
    import ray

    # address="local": always a fresh instance, even if another Ray runs on this machine.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
