"""An import blocker: with this folder first on PYTHONPATH, importing a package that the lent GPU
machine's image lacks (``BLOCKED``: Ray, Optuna, boto3, moto, MLflow, W&B: every dependency of
this project, optional or for its tests, that the image's package list in the device tool's
KINDS.md does not hold), or any submodule of one, fails with ModuleNotFoundError, as there.
Python imports ``sitecustomize`` at start-up from the first folder on sys.path that holds one, and
every child process inherits PYTHONPATH, so subprocesses (pytest, multiprocessing's spawned
workers, joblib's) are blocked too.

.ci/gpu_smoke runs every part of benchmarks/gpu.sh --cpu-smoke under it (part 2's ``pytest -m gpu``,
its collection included); tests/test_gpu_harness.py checks that it blocks, and that its list is
benchmarks/gpu_figures.py's ``MISSING_ON_THE_GPU_MACHINE``. ``DISGEN_BLOCKED_IMPORTS``
(comma-separated top-level names) replaces the blocked set. A ``sitecustomize`` this one shadows
(later on sys.path) is still run.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

DEFAULT = "ray,optuna,boto3,moto,mlflow,wandb"
BLOCKED = frozenset(filter(None, (name.strip() for name in
                                  os.environ.get("DISGEN_BLOCKED_IMPORTS", DEFAULT).split(","))))


class BlockImports(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: a blocked name (or a submodule of one) is not found, whatever
    the finders after it would find."""

    def __init__(self, blocked):
        self.blocked = frozenset(blocked)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in self.blocked:
            raise ModuleNotFoundError(f"No module named {fullname!r} (blocked by {__file__})", name=fullname)
        return None


if not any(isinstance(finder, BlockImports) for finder in sys.meta_path):
    sys.meta_path.insert(0, BlockImports(BLOCKED))
    for name in [n for n in sys.modules if n.partition(".")[0] in BLOCKED]:  # none, this early
        del sys.modules[name]


def _run_shadowed() -> None:
    """Run the ``sitecustomize`` that this one hides, if a later folder on sys.path holds one."""
    here = os.path.dirname(os.path.abspath(__file__))
    for folder in sys.path:
        if not folder or os.path.abspath(folder) == here:
            continue
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [folder])
        if spec is not None and spec.origin and os.path.dirname(os.path.abspath(spec.origin)) != here:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


_run_shadowed()
