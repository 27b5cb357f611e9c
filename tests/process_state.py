"""The process-wide state a test may not leave changed, so that the suite passes in any order.

Two test processes (``-n 2``) each run many test files, in an order that depends on the machine's
speed (``--dist loadfile``) or on a seed (``-p randomly``). A test that leaves Ray running, a torch
flag flipped, an environment variable set, the working directory moved or a signal handler replaced
changes what every later test in that process sees. ``tests/conftest.py`` compares this state before
and after each test (:func:`snapshot`, :func:`changes`) and fails the test that changed it, by name,
after setting it back: the next such leak is caught where it is made, whatever the order.
"""

from __future__ import annotations

import os
import signal
import sys

import torch

# torch's process-wide switches: (read, write) by name
_TORCH = {
    "torch.backends.cuda.matmul.allow_tf32": (
        lambda: torch.backends.cuda.matmul.allow_tf32,
        lambda v: setattr(torch.backends.cuda.matmul, "allow_tf32", v)),
    "torch.backends.cudnn.allow_tf32": (
        lambda: torch.backends.cudnn.allow_tf32, lambda v: setattr(torch.backends.cudnn, "allow_tf32", v)),
    "torch.backends.cudnn.benchmark": (
        lambda: torch.backends.cudnn.benchmark, lambda v: setattr(torch.backends.cudnn, "benchmark", v)),
    "torch.backends.cudnn.deterministic": (
        lambda: torch.backends.cudnn.deterministic,
        lambda v: setattr(torch.backends.cudnn, "deterministic", v)),
    "torch.get_float32_matmul_precision()": (
        torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
    "torch.are_deterministic_algorithms_enabled()": (
        torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms),
    "torch.get_default_dtype()": (torch.get_default_dtype, torch.set_default_dtype),
    "torch.get_num_threads()": (torch.get_num_threads, torch.set_num_threads),
    "torch.is_grad_enabled()": (torch.is_grad_enabled, torch.set_grad_enabled),
}
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Variables set by their owners, the same whichever test comes first, so never a test's leak: pytest
# per phase; torch's compiler (its cache folder); scikit-learn on import (OpenMP's); Ray on import and on
# ray.init; sweeps.ray_edge on import (its Tune settings, os.environ.setdefault)
_NOT_A_TESTS = {"PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR", "KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK",
                "RAY_CLIENT_MODE", "PYTHONBREAKPOINT",
                "RAY_USAGE_STATS_ENABLED", "TUNE_DISABLE_STRICT_METRIC_CHECKING"}


def torch_flags() -> dict:
    """torch's process-wide switches, by name."""
    return {name: read() for name, (read, _) in _TORCH.items()}


def restore_torch_flags(saved: dict) -> None:
    """Set torch's switches back to ``saved`` (from :func:`torch_flags`), each by its own setter:
    plain assignment, never ``monkeypatch``'s attribute undo, which torch's backend modules refuse."""
    for name, value in saved.items():
        read, write = _TORCH[name]
        if read() != value:
            write(value)


def ray_is_up() -> bool:
    """Whether this process is connected to Ray (without importing Ray where no test did)."""
    ray = sys.modules.get("ray")
    return bool(ray is not None and getattr(ray, "is_initialized", lambda: False)())


def boto3_default_session():
    """boto3's module-wide session, which ``boto3.client(...)`` makes on first use and keeps: it
    resolves the ``AWS_*`` credentials once, so every later ``boto3.client`` in the process signs
    with the first test's keys whatever its own environment says (an enforcing S3 server then answers
    InvalidAccessKeyId). A test makes its clients from a ``boto3.session.Session()`` of its own."""
    boto3 = sys.modules.get("boto3")
    return getattr(boto3, "DEFAULT_SESSION", None)


def snapshot() -> dict:
    """The state compared around each test."""
    environment = {k: v for k, v in os.environ.items() if k not in _NOT_A_TESTS}
    return {"torch": torch_flags(), "environment": environment, "cwd": os.getcwd(),
            "signals": {s: signal.getsignal(s) for s in _SIGNALS}, "ray": ray_is_up(),
            "boto3": boto3_default_session()}


def changes(before: dict, after: dict, *, may_start_ray: bool) -> list[str]:
    """What differs between two snapshots, one line each. Starting Ray is allowed where the test asked
    for the session's Ray (``ray_session``), which stays up for the process's later tests."""
    out = [f"{name}: {before['torch'][name]!r} -> {value!r}"
           for name, value in after["torch"].items() if value != before["torch"][name]]
    old, new = before["environment"], after["environment"]
    out += [f"${name} set to {new[name]!r}" for name in sorted(set(new) - set(old))]
    out += [f"${name} unset (was {old[name]!r})" for name in sorted(set(old) - set(new))]
    out += [f"${name}: {old[name]!r} -> {new[name]!r}" for name in sorted(set(old) & set(new))
            if old[name] != new[name]]
    if after["cwd"] != before["cwd"]:
        out.append(f"working directory: {before['cwd']} -> {after['cwd']}")
    out += [f"the {signal.Signals(s).name} handler replaced by {after['signals'][s]!r}" for s in _SIGNALS
            if after["signals"][s] != before["signals"][s] and not _rays_own(after["signals"][s])]
    if after["boto3"] is not before["boto3"]:
        out.append("boto3's default session made (boto3.client(...)): it keeps the AWS keys it first "
                   "read for every later client in the process; use boto3.session.Session().client(...)")
    if before["ray"] and not after["ray"]:
        out.append("Ray stopped (ray.shutdown) where it was running: later tests lose the session's Ray")
    if after["ray"] and not before["ray"] and not may_start_ray:
        out.append("Ray left running: use the ray_session fixture, or stop the Ray the test started")
    return out


def _rays_own(handler) -> bool:
    """A handler ``ray.init`` installs in a driver (its SIGTERM handler), which it keeps after
    ``ray.shutdown``: Ray's, the same in every order, not a test's."""
    return str(getattr(handler, "__module__", "") or "").startswith("ray.")


def restore(before: dict) -> None:
    """Set back what can be set back: torch's switches, the environment, the directory, the handlers,
    boto3's default session."""
    restore_torch_flags(before["torch"])
    if "boto3" in sys.modules:
        sys.modules["boto3"].DEFAULT_SESSION = before["boto3"]
    for name in set(os.environ) - set(before["environment"]) - _NOT_A_TESTS:
        del os.environ[name]
    os.environ.update(before["environment"])
    os.chdir(before["cwd"])
    for s, handler in before["signals"].items():
        if handler is not None:
            signal.signal(s, handler)
