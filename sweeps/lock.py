"""One driver per experiment folder: ``driver.lock`` is a lease the running driver holds and renews every
``RENEW_S`` seconds; a refused renewal stops the sweep, and so does a store that has not answered a
renewal for ``LEASE_S - RENEW_S`` seconds by the driver's own clock (it stops before its lease runs
out). A renewal refused because S3 applied it and lost the answer is told apart by reading the lock.
A lock is stale, and taken over, where its holder ran here and its process is gone, or where it was
renewed more than ``LEASE_S`` ago by the store's own clock (docs/cluster.md, "The driver's lease").
Taking it is one atomic create: a hard link locally, a conditional ``PutObject`` on S3 (boto3), a
write read back on other stores."""

from __future__ import annotations

import email.utils
import fcntl
import json
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable

from analysis import storage
from sweeps.errors import UsageError

LOCK_FILE = "driver.lock"
LEASE_S = 120.0  # a lock not renewed for this long (by the store's clock) is stale
RENEW_S = 30.0  # how often the driver renews it: a quarter of the lease
LEASE_VARIABLE = "DISGEN_LEASE_SECONDS"  # another lease (seconds), for every driver of the experiment


def lease_seconds() -> float:
    """The lease: ``$DISGEN_LEASE_SECONDS`` where set (every driver of an experiment must use the same),
    else ``LEASE_S``."""
    text = os.environ.get(LEASE_VARIABLE)
    if not text:
        return LEASE_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 8 <= value <= 86400:
        raise UsageError(f"${LEASE_VARIABLE}={text!r}: give the driver lock's lease in seconds, from 8 to "
                         f"86400 (the default is {LEASE_S:.0f}), or unset it")
    return value


def boot_id() -> str:
    """This machine's boot id: another for every boot, and for every machine."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as file:
            return file.read().strip()
    except OSError:
        import psutil
        return f"{socket.gethostname()}@{psutil.boot_time():.0f}"


def pid_namespace() -> str | None:
    """This process's PID namespace (``pid:[4026531836]``): containers on one kernel share its boot
    id but each has a namespace of its own, in which another container's pids mean nothing."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _me() -> dict:
    import psutil
    return {"host": socket.gethostname(), "boot_id": boot_id(), "pid_namespace": pid_namespace(),
            "pid": os.getpid(), "started": psutil.Process().create_time(), "token": uuid.uuid4().hex}


def _same_machine(holder: dict) -> bool:
    """Whether the holder's pid can be looked up here: the same boot of the same kernel, and the same
    PID namespace (another container's driver is judged by its lease, as another machine's is)."""
    if "boot_id" in holder:
        here = pid_namespace()  # a lock from before namespaces were recorded: judged by boot id alone
        return holder["boot_id"] == boot_id() and holder.get("pid_namespace", here) == here
    return holder.get("host") == socket.gethostname()  # a lock from before boot ids


def process_gone(holder: dict) -> bool:
    """True where the holder ran on this machine and its process is gone (or its pid reused)."""
    import psutil
    if not _same_machine(holder):
        return False
    try:
        process = psutil.Process(int(holder["pid"]))
        return abs(process.create_time() - float(holder.get("started", process.create_time()))) > 1.0
    except (psutil.NoSuchProcess, KeyError, ValueError, TypeError):
        return True


def holder_text(holder: dict, path: str) -> str:
    return (f"{path} is in use by another driver (host {holder.get('host')}, pid {holder.get('pid')}, "
            f"since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(float(holder.get('started', 0))))})")


class LeaseLost(RuntimeError):
    """A write refused because this driver may no longer hold the folder: its lease was taken, or
    its own deadline passed with no renewal (it was paused, or the store did not answer)."""


class ExperimentLock:
    """Holds the folder, renewing its lease every ``renew_s`` s; a refused renewal calls ``on_lost``."""

    def __init__(self, experiment_dir: str, lease_s: float | None = None, renew_s: float | None = None,
                 on_lost: Callable[[str], None] | None = None):
        self.experiment_dir = experiment_dir
        self.path = storage.join(experiment_dir, LOCK_FILE)
        self.lease_s = lease_seconds() if lease_s is None else lease_s
        self.renew_s = self.lease_s * RENEW_S / LEASE_S if renew_s is None else renew_s
        self.on_lost = on_lost
        self.record: dict | None = None
        self.lost: str | None = None
        self._etag: str | None = None
        self._renewals = 0
        self._valid_until = 0.0  # by the monotonic clock: renewed last + lease - one renewal
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the file ----------------------------------------------------------------------------------
    def read(self) -> dict | None:
        return self._read()[0]

    def _read(self) -> tuple[dict | None, float | None]:
        """(the lock's record, its age by the store's clock), or (None, None); a lock not JSON is ``{}``."""
        if self._is_s3():
            record, _, age = self._read_s3()
            return record, age
        fs, inner = storage.resolve(self.path)
        try:
            with fs.open_input_stream(inner) as stream:
                content = stream.read()
            modified = fs.get_file_info(inner).mtime
        except FileNotFoundError:
            return None, None
        try:
            record = json.loads(content or b"{}")
        except ValueError:  # torn or foreign content: treat as held by nobody we can check
            record = {}
        if _same_machine(record) or not modified:  # judged by its process, not its lease
            return record, None
        return record, self._store_now(fs, inner) - modified.timestamp()

    @staticmethod
    def _store_now(fs, inner: str) -> float:
        """The store's clock now: the modification time of a file written beside ``inner``."""
        probe = f"{inner.rsplit('/', 1)[0]}/.{LOCK_FILE}.{uuid.uuid4().hex}.clock"
        with fs.open_output_stream(probe) as stream:
            stream.write(b"")
        try:
            return fs.get_file_info(probe).mtime.timestamp()
        finally:
            fs.delete_file(probe)

    def _create(self, record: dict) -> bool:
        """Write the lock if there is none; False if another holds it."""
        text = json.dumps(record).encode()
        if self._is_s3():
            self._etag = self._put_s3(text, IfNoneMatch="*")
            return bool(self._etag)
        fs, inner = storage.resolve(self.path)
        fs.create_dir(inner.rsplit("/", 1)[0], recursive=True)
        if not storage.is_remote(self.path):
            # written whole beside it, then linked in place: os.link fails where a lock exists (as O_EXCL)
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

    def _is_stale(self, holder: dict, age: float | None) -> bool:
        """A holder on this machine: stale once its process is gone; elsewhere, once its lease ran out."""
        return process_gone(holder) if _same_machine(holder) else age is not None and age > self.lease_s

    def _take_over(self, holder: dict, record: dict) -> bool:
        """Replace the stale lock of ``holder`` by ``record`` if it is still ``holder``'s; True if this
        driver now holds it (locally it is removed, and the caller creates its own)."""
        if self._is_s3():
            current, etag, age = self._read_s3()
            if current != holder or not self._is_stale(current, age):
                return False
            self._etag = self._put_s3(json.dumps(record).encode(), IfMatch=etag)
            return bool(self._etag)
        fs, inner = storage.resolve(self.path)
        if storage.is_remote(self.path):
            current, age = self._read()
            if current == holder and self._is_stale(current, age):
                fs.delete_file(inner)
            return False
        # one driver here at a time removes the lock, only while it is still the stale one: an flock
        # on the experiment's folder, which leaves no file behind
        guard = os.open(os.path.dirname(os.path.abspath(inner)), os.O_RDONLY)
        try:
            fcntl.flock(guard, fcntl.LOCK_EX)
            current, age = self._read()
            if current == holder and self._is_stale(current, age):
                os.remove(inner)
        except FileNotFoundError:
            pass
        finally:
            os.close(guard)  # and with it the flock
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

    def _read_s3(self) -> tuple[dict | None, str | None, float | None]:
        """(record, ETag, age by the ``Date`` of the store's answer), or (None, None, None)."""
        client, bucket, key = self._s3()
        try:
            answer = client.get_object(Bucket=bucket, Key=key)
        except client.exceptions.NoSuchKey:
            return None, None, None
        try:
            record = json.loads(answer["Body"].read() or b"{}")
        except ValueError:  # foreign content: held by nobody we can check
            record = {}
        date = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        age = None
        if date and answer.get("LastModified"):
            age = (email.utils.parsedate_to_datetime(date) - answer["LastModified"]).total_seconds()
        return record, answer["ETag"], age

    def _put_s3(self, text: bytes, **condition) -> str | None:
        """A conditional PutObject of the lock: its new ETag, or None where the condition failed."""
        client, bucket, key = self._s3()
        try:
            answer = client.put_object(Bucket=bucket, Key=key, Body=text, ContentType="application/json",
                                       **condition)
        except client.exceptions.ClientError as error:
            answer = error.response.get("Error", {}).get("Code"), error.response.get(
                "ResponseMetadata", {}).get("HTTPStatusCode")
            if answer[0] in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey") \
                    or answer[1] in (409, 412):
                return None
            raise
        return answer["ETag"]

    # -- the lease -----------------------------------------------------------------------------------
    def renew(self) -> bool:
        """True if this driver still holds the lock (now renewed), False if not; a silent store raises."""
        if self.record is None:
            return False
        self._renewals += 1
        if self._is_s3():
            text = json.dumps({**self.record, "renewals": self._renewals}).encode()
            etag = self._put_s3(text, IfMatch=self._etag)
            if etag is None:  # refused; or applied, its answer lost, and the SDK's retry refused
                current, etag, _ = self._read_s3()
                if (current or {}).get("token") != self.record["token"]:
                    return False
            self._etag = etag
            return True
        current = self.read()
        if (current or {}).get("token") != self.record["token"]:
            return False
        fs, inner = storage.resolve(self.path)
        if not storage.is_remote(self.path):
            os.utime(inner)  # the store's clock: its modification time now
        else:
            storage.write_whole(fs, inner, json.dumps({**self.record, "renewals": self._renewals}).encode())
        return True

    def fence(self, destructive: bool = False) -> None:
        """Raise ``LeaseLost`` unless this driver still holds the folder: its lease not lost and its
        local deadline (the last renewal, plus the lease less one renewal) not passed, which a driver
        paused past it (SIGSTOP, a frozen machine) finds as it wakes, before its next write. Before a
        ``destructive`` step (compaction's deletes) the lock is also read back: it must hold our token."""
        if self.record is None:
            return
        if self.lost is not None:
            raise LeaseLost(self.lost)
        late = time.monotonic() - self._valid_until
        if late > 0:
            since = late + self.lease_s - self.renew_s
            raise LeaseLost(f"the driver lock {self.path} was last renewed {since:.0f} s ago: past this "
                            "driver's deadline, another driver may hold the folder now")
        if destructive and (self.read() or {}).get("token") != self.record["token"]:
            raise LeaseLost(f"another driver holds the driver lock {self.path} now")

    def _renewed(self) -> float:
        now = time.monotonic()
        self._valid_until = now + self.lease_s - self.renew_s
        return now

    def _renewing(self) -> None:
        renewed = time.monotonic()
        while not self._stop.wait(self.renew_s):
            try:
                held = self.renew()
            except Exception as error:  # the store does not answer: the next renewal tries again, ...
                silent = time.monotonic() - renewed
                if silent < self.lease_s - self.renew_s:
                    print(f"warning: could not renew the driver lock {self.path} ({error}); trying again in "
                          f"{self.renew_s:.0f} s", flush=True)
                    continue
                # ... until the lease would run out before the next one: another driver may take the
                # folder over then, so this one stops first, by its own clock
                self._lose(f"could not renew the driver lock {self.path} for {silent:.0f} s ({error}); "
                           f"stopping before its {self.lease_s:.0f} s lease runs out and another driver "
                           "may take the folder over")
                return
            if not held:
                self._lose(f"another driver took over the driver lock {self.path} (this driver's lease "
                           "was not renewed in time, or the lock was removed)")
                return
            renewed = self._renewed()

    def _lose(self, reason: str) -> None:
        self.lost = reason
        if self.on_lost is not None:
            self.on_lost(reason)

    # -- taking and giving back ----------------------------------------------------------------------
    def check_free(self) -> None:
        """A UsageError if a live driver holds the folder (nothing is taken)."""
        holder, age = self._read()
        if holder is not None and not self._is_stale(holder, age):
            raise UsageError(self._refusal(holder, age))

    def _refusal(self, holder: dict, age: float | None) -> str:
        text = holder_text(holder, self.experiment_dir)
        if not _same_machine(holder):
            left = self.lease_s - (age or 0.0)
            return (f"{text}; its lease was renewed {max(0.0, age or 0.0):.0f} s ago: wait for it to finish, "
                    f"or, if that driver is gone, its lease runs out in {max(1.0, left):.0f} s and the "
                    "same command then takes the folder over")
        return f"{text}; wait for it to finish (or stop it), then run again"

    def acquire(self) -> None:
        record = _me()
        for _ in range(3):
            if self._create(record):
                self._hold(record)
                return
            holder, age = self._read()
            if holder is None:
                continue  # released meanwhile: try again
            if not self._is_stale(holder, age):
                raise UsageError(self._refusal(holder, age))
            why = ("is no longer running" if _same_machine(holder)
                   else f"has not renewed its lease for {age:.0f} s")
            print(f"note: taking over a stale lock on {self.experiment_dir} (host {holder.get('host')}, "
                  f"pid {holder.get('pid')} {why})", flush=True)
            if self._take_over(holder, record):
                self._hold(record)
                return
        raise UsageError(f"{self.experiment_dir}: could not take the driver lock {self.path} (other drivers "
                         "keep taking it); run again")

    def _hold(self, record: dict) -> None:
        self.record, self.lost = record, None
        self._renewed()
        self._stop.clear()
        self._thread = threading.Thread(target=self._renewing, name="disgen-driver-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
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
