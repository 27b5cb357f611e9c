"""One driver per experiment folder: ``driver.lock`` holds the running driver's host and pid.

A second driver on the same folder (a second ``--resume``, or the same command run twice) is
refused with the holder's host and pid. A lock whose process is gone (same host, pid not running,
or running but started after the lock was taken: a reused pid) is stale and taken over. A lock from
another host cannot be checked from here: the message says how to remove it.

On a local folder the lock is created with ``O_CREAT | O_EXCL``, which is atomic. An object store
has no such operation in pyarrow: the lock is written and read back, which catches all but two
drivers started within the same second.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid

from analysis import storage
from sweeps.errors import UsageError

LOCK_FILE = "driver.lock"


def _me() -> dict:
    import psutil

    return {"host": socket.gethostname(), "pid": os.getpid(),
            "started": psutil.Process().create_time(), "token": uuid.uuid4().hex}


def is_stale(holder: dict) -> bool:
    """True where the holder is known to be gone: same host, and its pid is not running (or is a
    newer process that reuses it)."""
    import psutil

    if holder.get("host") != socket.gethostname():
        return False
    try:
        process = psutil.Process(int(holder["pid"]))
        return abs(process.create_time() - float(holder.get("started", process.create_time()))) > 1.0
    except (psutil.NoSuchProcess, KeyError, ValueError, TypeError):
        return True


def holder_text(holder: dict, path: str) -> str:
    return (f"{path} is in use by another driver (host {holder.get('host')}, pid {holder.get('pid')}, "
            f"since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(float(holder.get('started', 0))))})")


class ExperimentLock:
    """``with ExperimentLock(experiment_dir):`` holds the folder for this process."""

    def __init__(self, experiment_dir: str):
        self.experiment_dir = experiment_dir
        self.path = storage.join(experiment_dir, LOCK_FILE)
        self.record: dict | None = None

    # -- the file ----------------------------------------------------------------------------------

    def read(self) -> dict | None:
        fs, inner = storage.resolve(self.path)
        try:
            with fs.open_input_stream(inner) as stream:
                return json.loads(stream.read() or b"{}")
        except FileNotFoundError:
            return None
        except ValueError:  # torn or foreign content: treat as held by nobody we can check
            return {}

    def _create(self, record: dict) -> bool:
        """Write the lock if there is none; False if another holds it."""
        fs, inner = storage.resolve(self.path)
        fs.create_dir(inner.rsplit("/", 1)[0], recursive=True)
        text = json.dumps(record).encode()
        if not storage.is_remote(self.path):
            try:
                fd = os.open(inner, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as f:
                f.write(text)
            return True
        if self.read() is not None:
            return False
        with fs.open_output_stream(inner) as stream:
            stream.write(text)
        return (self.read() or {}).get("token") == record["token"]

    def _remove_stale(self, holder: dict) -> None:
        """Remove the lock if it is still ``holder``'s (not one a faster driver just took)."""
        fs, inner = storage.resolve(self.path)
        if storage.is_remote(self.path):
            if self.read() == holder:
                fs.delete_file(inner)
            return
        aside = f"{inner}.stale-{uuid.uuid4().hex}"
        try:
            os.replace(inner, aside)  # atomic: exactly one driver moves the file
        except FileNotFoundError:
            return
        with open(aside, "rb") as f:
            moved = json.loads(f.read() or b"{}")
        if moved == holder:
            os.remove(aside)
        elif not os.path.exists(inner):  # we moved a newer lock: put it back
            os.replace(aside, inner)

    # -- taking and giving back ----------------------------------------------------------------------

    def check_free(self) -> None:
        """A UsageError if a live driver holds the folder (nothing is taken)."""
        holder = self.read()
        if holder is not None and not is_stale(holder):
            raise UsageError(self._refusal(holder))

    def _refusal(self, holder: dict) -> str:
        text = holder_text(holder, self.experiment_dir)
        if holder.get("host") != socket.gethostname():
            return (f"{text}; wait for it to finish, or, if that driver is surely gone, delete "
                    f"{self.path} and run again")
        return f"{text}; wait for it to finish (or stop it), then run again"

    def acquire(self) -> None:
        record = _me()
        for _ in range(3):
            if self._create(record):
                self.record = record
                return
            holder = self.read()
            if holder is None:
                continue  # released meanwhile: try again
            if not is_stale(holder):
                raise UsageError(self._refusal(holder))
            print(f"note: taking over a stale lock on {self.experiment_dir} (host {holder.get('host')}, "
                  f"pid {holder.get('pid')} is no longer running)", flush=True)
            self._remove_stale(holder)
        raise UsageError(f"{self.experiment_dir}: could not take the driver lock {self.path} (other drivers "
                         "keep taking it); run again")

    def release(self) -> None:
        if self.record is None:
            return
        if (self.read() or {}).get("token") == self.record["token"]:
            fs, inner = storage.resolve(self.path)
            fs.delete_file(inner)
        self.record = None

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()
