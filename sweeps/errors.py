"""Errors the command line reports as one line with exit code 2, the SIGTERM that stops a sweep as
Ctrl-C does (``Terminated``, exit code 143), and what stops a running sweep (``StopSignal``)."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


class UsageError(Exception):
    """Bad input, found before Ray starts; reported as one line, exit code 2."""


class Terminated(KeyboardInterrupt):
    """A SIGTERM that stops the driver at once, as a ``KeyboardInterrupt`` does (not a sweep's first one)."""


def raise_terminated(signum, frame):
    """A SIGTERM handler: raise ``Terminated``, as Python's SIGINT handler raises ``KeyboardInterrupt``."""
    raise Terminated()


def stop_signal(stop: BaseException) -> int:
    """The signal behind a ``KeyboardInterrupt``: SIGTERM for ``Terminated``, else SIGINT."""
    return signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT


def exit_code(signum: int) -> int:
    """A process's exit code when ``signum`` stopped it, as a shell reports it: 128 + the signal."""
    return 128 + int(signum)


@contextmanager
def sigterm_as_interrupt():
    """While in it, a SIGTERM raises ``Terminated``: ``finally`` blocks run, and the command exits 143."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if before is None else before)


class StopSignal:
    """Why a running sweep stops: a Ctrl-C or SIGTERM (``signum``), or a ``request`` (``reason``);
    ``received`` is set either way. While Tune runs, ``sweeps.ray_edge`` hands a signal on to Tune
    (``noted``) and ``interrupt`` ends the run for a request; a context manager, it restores the handlers."""

    def __init__(self):
        self.received = threading.Event()
        self.reason: str | None = None  # why the sweep stops, where it is not a signal
        self.signum: int | None = None  # the signal that stopped it: SIGINT or SIGTERM
        self.interrupt = None  # ends the Tune run now (set while one runs)
        self._before: dict = {}

    def noted(self, signum: int) -> None:
        """A signal that stops the sweep (the first one names it)."""
        self.signum = self.signum or signum
        self.received.set()

    def request(self, reason: str) -> None:
        """Stop the sweep as a Ctrl-C does, for ``reason`` (outside a Tune run, nothing more starts)."""
        if self.reason is None:
            self.reason = reason
        self.received.set()
        if self.interrupt is not None:
            self.interrupt()

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
            signal.signal(signal.SIGTERM, raise_terminated)
        return self

    def __exit__(self, *exc):
        self.interrupt = None
        for signum, handler in self._before.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        self._before = {}
        return False
