"""Tune's own experiment state is uploaded rarely on remote storage (``sweeps.ray_edge``): Tune
re-uploads its whole staging folder at every save, unchanged files included, and on a versioned
bucket each upload is a new version of every trial's record, kept 30 days; disgen reads none of it
back. Measured by benchmarks/storage_versions.py (benchmarks/README.md)."""

import os

import pytest

from sweeps import ray_edge


@pytest.mark.parametrize("storage, expected", [("s3://bucket/disgen", "900"), ("/mnt/shared/disgen", None)])
def test_on_remote_storage_tune_saves_its_state_every_15_minutes(storage, expected, monkeypatch):
    monkeypatch.delenv(ray_edge.STATE_UPLOADS, raising=False)
    with ray_edge._state_uploads(storage):
        assert os.environ.get(ray_edge.STATE_UPLOADS) == expected
    assert ray_edge.STATE_UPLOADS not in os.environ  # as it was


def test_a_period_the_user_set_is_kept(monkeypatch):
    monkeypatch.setenv(ray_edge.STATE_UPLOADS, "60")
    with ray_edge._state_uploads("s3://bucket/disgen"):
        assert os.environ[ray_edge.STATE_UPLOADS] == "60"
    assert os.environ[ray_edge.STATE_UPLOADS] == "60"

