"""--mlflow and --wandb (sweeps/tracking.py) checked before the sweep starts: a missing URI or
project, W&B not installed, or W&B online without an API key is one line and exit code 2. The
tracked sweeps are tests/end_to_end/test_trackers.py."""

from __future__ import annotations

import importlib.util

import pytest

from sweeps.paper_grid import main

needs_wandb = pytest.mark.skipif(importlib.util.find_spec("wandb") is None,
                                 reason="wandb is an optional extra: pip install -e '.[wandb]'")


def test_mlflow_without_a_uri_is_refused_before_ray_starts(tmp_path, capsys):
    assert main(["--scale", "tiny", "--storage-path", str(tmp_path), "--mlflow", " "]) == 2
    assert "--mlflow: give a tracking URI" in capsys.readouterr().err


@pytest.mark.parametrize("project, message", [
    (" ", "--wandb ' ': give a W&B project"),
    ("a/b/c", "--wandb 'a/b/c': give a W&B project"),
])
def test_wandb_without_a_project_is_refused_before_ray_starts(tmp_path, capsys, project, message):
    assert main(["--scale", "tiny", "--storage-path", str(tmp_path), "--wandb", project]) == 2
    assert message in capsys.readouterr().err


def test_wandb_not_installed_is_one_line_naming_the_extra(tmp_path, capsys, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb"
                        else find_spec(name, *a))
    assert main(["--scale", "tiny", "--storage-path", str(tmp_path), "--wandb", "disgen"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install -e '.[wandb]'" in err, err


@needs_wandb
def test_wandb_online_without_an_api_key_is_one_line_before_the_sweep(tmp_path, monkeypatch):
    from sweeps.errors import UsageError
    from sweeps.tracking import WandbRuns

    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DIR", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc: never logged in
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    with pytest.raises(UsageError, match="--wandb: no W&B API key found; run wandb login or set WANDB_API"):
        WandbRuns("disgen", "tracked").check()
    monkeypatch.setenv("WANDB_MODE", "offline")  # offline: no key needed
    assert WandbRuns("my-team/disgen", "tracked").check().project == "disgen"
