"""What ran a model: disgen's version and git commit, the Python, torch and Ray versions, and the device; a
trial's own (from its worker) in its final result, the driver's on rows of models that did not finish."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import subprocess

# It fills analysis/schema.py's PROVENANCE_FIELDS but node_id, which comes from Ray.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the folder above sweeps/


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    """A git command's output in disgen's folder, or None where git or the checkout is missing."""
    try:
        done = subprocess.run(["git", "-C", CHECKOUT, *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout disgen runs from; (None, None) outside its own checkout."""
    top = _git("rev-parse", "--show-toplevel")
    if top is None or os.path.realpath(top) != os.path.realpath(CHECKOUT):
        return None, None
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return commit, (None if commit is None or status is None else bool(status))


@functools.cache
def software() -> dict:
    import torch
    commit, dirty = git_state()
    return {"disgen_version": _version("disgen"), "git_commit": commit, "git_dirty": dirty,
            "python_version": platform.python_version(), "torch_version": torch.__version__,
            "ray_version": _version("ray")}


def device_name(device) -> str | None:
    """The CUDA device's name (``NVIDIA H100 80GB HBM3``); None for any other device."""
    import torch
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def provenance(device) -> dict:
    """Every provenance column of this process, for a model trained on ``device``."""
    return {**software(), "device": torch_device_type(device), "device_name": device_name(device)}


def torch_device_type(device) -> str:
    """cpu, cuda or mps: the device's kind, without its index."""
    import torch
    return torch.device(device).type
