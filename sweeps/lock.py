"""One driver per experiment folder: ``driver.lock`` holds the running driver's host and pid.

A second driver on the same folder (a second ``--resume``, or the same command run twice) is
refused with the holder's host and pid. A lock whose process is gone (same host, pid not running,
or running but started after the lock was taken: a reused pid) is stale and taken over. A lock from
another host cannot be checked from here: the message says how to remove it.

Taking the lock is one atomic create, so of two drivers started at the same moment exactly one
gets it. On a local folder: the lock is written whole beside its place and hard-linked there
(``os.link`` fails where a lock exists, as an ``O_EXCL`` create does, and no driver reads a lock
half written). On S3: a conditional ``PutObject`` with
``If-None-Match: *`` (through boto3, the ``cloud`` extra: pyarrow's file systems cannot make a
conditional write), and a stale lock is taken over with ``If-Match`` on its ETag, so only one
driver replaces it. Other object stores (``gs://``…) have no such operation in pyarrow: there the
lock is written and read back, which catches all but two drivers started within the same second.
A stale local lock is removed under an ``flock`` (a guard file in the temporary folder), only while it is
still the stale holder's; then each driver tries the atomic create again.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import tempfile
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
        if self._is_s3():
            return self._read_s3()[0]
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
        text = json.dumps(record).encode()
        if self._is_s3():
            return self._put_s3(text, IfNoneMatch="*")
        fs, inner = storage.resolve(self.path)
        fs.create_dir(inner.rsplit("/", 1)[0], recursive=True)
        if not storage.is_remote(self.path):
            # written whole beside it, then linked in place: os.link fails if the lock exists, as
            # an O_EXCL create does, and no driver ever reads a lock still being written
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(inner), prefix=f".{LOCK_FILE}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(text)
                os.link(tmp, inner)
            except FileExistsError:
                return False
            finally:
                os.remove(tmp)
            return True
        if self.read() is not None:
            return False
        storage.write_whole(fs, inner, text)
        return (self.read() or {}).get("token") == record["token"]

    def _take_over(self, holder: dict, record: dict) -> bool:
        """Replace the stale lock of ``holder`` by ``record``, if it is still ``holder``'s (not one a
        faster driver just took); True if this driver now holds the lock. Locally the stale lock
        is moved aside and removed, and the caller creates its own."""
        if self._is_s3():
            current, etag = self._read_s3()
            return current == holder and self._put_s3(json.dumps(record).encode(), IfMatch=etag)
        fs, inner = storage.resolve(self.path)
        if storage.is_remote(self.path):
            if self.read() == holder:
                fs.delete_file(inner)
            return False
        # One driver at a time reads and removes (an flock, released by the kernel if its holder
        # dies): the lock is removed only while it is still the stale holder's, never a lock a
        # faster driver has just created (that one cannot be replaced meanwhile: creating is a
        # link, which fails where a lock exists). Moving the lock aside without this guard let a
        # driver move a newer lock and put it back after a third had created its own.
        # (only this host's drivers judge a lock of this host stale, so the guard can live outside
        # the experiment folder, which it leaves as it was)
        guard_path = os.path.join(tempfile.gettempdir(),
                                  f"disgen-{hashlib.sha1(os.path.abspath(inner).encode()).hexdigest()[:16]}.takeover")
        with open(guard_path, "a") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            try:
                if self.read() == holder:
                    os.remove(inner)
            except FileNotFoundError:
                pass
            finally:
                fcntl.flock(guard, fcntl.LOCK_UN)
        return False

    # -- S3: conditional writes ----------------------------------------------------------------------

    def _is_s3(self) -> bool:
        return self.path.startswith("s3://")

    def _s3(self):
        """(boto3 client, bucket, key) of the lock on S3; the client honours ``AWS_ENDPOINT_URL``."""
        try:
            import boto3
        except ImportError:
            raise UsageError("the driver lock of an s3:// experiment needs boto3 (a conditional write, "
                             "which pyarrow cannot make): pip install 'disgen[cloud]'") from None
        bucket, key = self.path[len("s3://"):].split("/", 1)
        client = boto3.session.Session().client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None)
        return client, bucket, key

    def _read_s3(self) -> tuple[dict | None, str | None]:
        """(the lock's record, its ETag), or (None, None) where there is none."""
        client, bucket, key = self._s3()
        try:
            answer = client.get_object(Bucket=bucket, Key=key)
        except client.exceptions.NoSuchKey:
            return None, None
        try:
            record = json.loads(answer["Body"].read() or b"{}")
        except ValueError:  # foreign content: held by nobody we can check
            record = {}
        return record, answer["ETag"]

    def _put_s3(self, text: bytes, **condition) -> bool:
        """A conditional PutObject of the lock; False if the condition failed (another driver's lock
        is there, or it changed), or another conditional write of it is in flight."""
        client, bucket, key = self._s3()
        try:
            client.put_object(Bucket=bucket, Key=key, Body=text, ContentType="application/json", **condition)
        except client.exceptions.ClientError as error:
            answer = error.response.get("Error", {}).get("Code"), error.response.get(
                "ResponseMetadata", {}).get("HTTPStatusCode")
            if answer[0] in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey") \
                    or answer[1] in (409, 412):
                return False
            raise
        return True

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
            if self._take_over(holder, record):
                self.record = record
                return
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
