"""Errors the command line reports as one line with exit code 2, and the SIGTERM that stops a
sweep as Ctrl-C does (``Terminated``, exit code 143)."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


class UsageError(Exception):
    """Bad input, found before Ray starts; reported as one line, exit code 2."""


class Terminated(KeyboardInterrupt):
    """A SIGTERM (``ray job stop``, a batch scheduler ending the job) where it stops the driver at
    once, as a Ctrl-C's ``KeyboardInterrupt`` does: before the sweep started, or a second SIGTERM
    while the sweep stops. The first SIGTERM of a running sweep stops it cleanly, as a first Ctrl-C
    does (``sweeps.console.StopSignal``)."""


def raise_terminated(signum, frame):
    """A SIGTERM handler: raise ``Terminated``, as Python's own SIGINT handler raises
    ``KeyboardInterrupt``."""
    raise Terminated()


def stop_signal(stop: BaseException) -> int:
    """The signal behind a ``KeyboardInterrupt``: SIGTERM for ``Terminated``, else SIGINT."""
    return signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT


def exit_code(signum: int) -> int:
    """A process's exit code when ``signum`` stopped it, as a shell reports one it killed: 128 + the
    signal (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + int(signum)


@contextmanager
def sigterm_as_interrupt():
    """While in it (on the main thread), a SIGTERM raises ``Terminated``: the ``finally`` blocks run
    (the experiment's lock is released) and the command line exits 143, where the default action
    would kill the process where it stands."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if before is None else before)
