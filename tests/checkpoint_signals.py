"""Checkpoint signals: the points where a test acts while a sweep runs (kills a trial's worker, its
node or the driver), with nothing racing.

Inside a test that uses the ``checkpoint_signals`` fixture (tests/conftest.py), the folder named by
``DISGEN_CHECKPOINT_SIGNAL_DIR`` exists, and the Ray workers of every sweep signal there and wait:

- a trial's worker, once the checkpoint of a step is whole on storage (written by
  ``sweeps.checkpoints.CheckpointWriter`` and sealed): the file ``<trial's whole name>-<step>``
  (``sweeps.packing.dirname(members, full=True)``: the name ends in the whole trial key or pack id);
- an evaluation task (``sweeps.evaluation.evaluate_saved``), before it reads its checkpoint: the
  file ``evaluation-<trial key>``.

Each file holds the process's pid, and the process waits (at most 60 s) until the file is deleted.
Outside such a test the folder is gone and nothing waits.

disgen itself has no hook for this: conftest sets ``RAY_RUNTIME_ENV_HOOK`` to ``runtime_env_hook``,
so that every ``ray.init`` of a test (the tests' shared Ray, a sweep's driver in a subprocess, a
multi-node cluster's) gives its workers ``install`` as their ``worker_process_setup_hook``, and
``install`` wraps ``CheckpointWriter.save`` and ``evaluate_saved`` as ``sweeps.checkpoints`` and
``sweeps.evaluation`` are imported there.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import os
import sys
import threading
import time

FOLDER = "DISGEN_CHECKPOINT_SIGNAL_DIR"
WAIT_SECONDS = 60


class CheckpointSignals:
    """The signals of a test's sweeps (see the module docstring), in ``folder``: ``hold`` keeps the
    one a test wants and releases every other."""

    def __init__(self, folder):
        self.folder = folder
        folder.mkdir()

    def current(self) -> dict[str, int]:
        """The signals now waiting: file name -> pid."""
        return {p.name: int(p.read_text()) for p in self.folder.iterdir() if not p.name.endswith(".tmp")}

    def hold(self, wanted, timeout: float, alive=lambda: True, keep=()) -> tuple[str, int]:
        """Release every signal (but those named in ``keep``) until one whose name ``wanted(name)``
        accepts arrives; return its (name, pid) with that worker still waiting."""
        deadline = time.monotonic() + timeout
        while True:
            for name, pid in self.current().items():
                if wanted(name):
                    return name, pid
                if name not in keep:
                    (self.folder / name).unlink(missing_ok=True)
            assert time.monotonic() < deadline and alive(), "no checkpoint signal arrived"
            time.sleep(0.05)

    def release_all(self) -> list[str]:
        """Release every signal waiting; their names. A signal still being written (its ``.tmp``)
        is left to arrive (deleting it there failed the worker's rename, and with it the trial)."""
        released = []
        for path in self.folder.iterdir():
            if not path.name.endswith(".tmp"):
                path.unlink(missing_ok=True)
                released.append(path.name)
        return released

    @contextlib.contextmanager
    def releasing(self):
        """Release every signal as it arrives, for as long as the block runs; the block is given
        the list of the names released, which grows as they arrive."""
        stop = threading.Event()
        released: list[str] = []

        def release():
            while not stop.is_set():
                released.extend(self.release_all())
                stop.wait(0.05)

        thread = threading.Thread(target=release, daemon=True)
        thread.start()
        try:
            yield released
        finally:
            stop.set()
            thread.join()


# -- in the drivers and workers ------------------------------------------------------------------------


def runtime_env_hook(runtime_env):
    """``RAY_RUNTIME_ENV_HOOK``, called by each ``ray.init`` of a process the tests started: the job's
    runtime environment, with ``install`` as its workers' setup hook. ``install`` is pickled by
    value, so the workers need not find this file."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return {**(runtime_env or {}), "worker_process_setup_hook": install}


def install() -> None:
    """In each Ray worker: signal at checkpoints and evaluations, once ``sweeps.trainable`` and
    ``sweeps.evaluation`` are imported."""
    sys.meta_path.insert(0, _AfterImport({"sweeps.checkpoints": _at_checkpoints,
                                          "sweeps.evaluation": _at_evaluations}))


def signal(name: str) -> None:
    """Where the signal folder exists, write this process's pid to ``<folder>/<name>`` and wait until
    the file is deleted (at most ``WAIT_SECONDS``); then leave no stale signal behind."""
    folder = os.environ.get(FOLDER)
    if not folder or not os.path.isdir(folder):
        return
    path = os.path.join(folder, name)
    partial = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"  # this writer's own
    with open(partial, "w") as file:
        file.write(str(os.getpid()))
    os.replace(partial, path)  # the test reads whole files only
    deadline = time.monotonic() + WAIT_SECONDS
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    if os.path.exists(path):
        os.remove(path)


def _at_checkpoints(checkpoints) -> None:
    """A trial's in-training checkpoint signals ``<trial's whole name>-<step>`` once it is whole on
    storage (the worker waits for its writer first, so it trains no further meanwhile)."""
    writer = checkpoints.CheckpointWriter
    save = writer.save

    @functools.wraps(save)
    def saving(self, trainer_state, histories):
        save(self, trainer_state, histories)
        self.wait()
        trial = os.path.basename(self.folder.rstrip("/"))  # the trial's name with its whole key
        signal(f"{trial}-{checkpoints._reach(histories)}")

    writer.save = saving


def _at_evaluations(evaluation) -> None:
    """An evaluation task signals ``evaluation-<trial key>`` as it starts. The driver sends the task
    by reference to ``sweeps.evaluation.evaluate_saved``, which a worker finds wrapped."""
    evaluate = evaluation.evaluate_saved

    @functools.wraps(evaluate)
    def evaluate_saved(job: dict) -> dict:
        signal(f"evaluation-{evaluation.TrialConfig(job['config']).trial_key}")
        return evaluate(job)

    evaluation.evaluate_saved = evaluate_saved


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds the modules named in ``patches`` as the other finders do, and calls each one's patch
    on the module once it has run."""

    def __init__(self, patches: dict):
        self.patches = patches

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.patches:
            return None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None and spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader, self.patches[fullname])
                    return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    """A module's loader, then its patch."""

    def __init__(self, loader, patch):
        self.loader, self.patch = loader, patch

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        self.patch(module)

    def __getattr__(self, name):  # get_source, get_code…: the module's own loader's
        return getattr(self.loader, name)
