"""Download a real dataset file, checked, into the data folder: one command per file.

Run ``python -m data_pipeline.download NAME [--to DIR]`` with NAME one of ``dsprites`` (npz),
``dsprites_hdf5``, ``3dshapes``, ``mpi3d_toy``, ``mpi3d_realistic``, ``mpi3d_real``
(``--list`` shows them, their URLs and checksums, and which are already in DIR). DIR defaults to
``$DISGEN_DATA``, else ``./data``; the sweeps find the files there (``--data-dir DIR``).

The file streams into ``<name>.part`` next to its final place, with a progress bar (bytes, rate,
time left) on stderr when it is a terminal, and a line at the start and the end of the download
when it is not (a log file, ``ray job logs``, CI). An interrupted download resumes from the
partial file with an HTTP Range request where the server honours it, and starts again where it
does not. Transient failures (refused or dropped connections, time-outs, HTTP 5xx) are retried
``--retries`` times with exponential backoff; HTTP 4xx is not retried. When every byte is in, the
file's checksums (see :mod:`data_pipeline.sources`) are checked and only then is it renamed into
place, atomically. A mismatch deletes the partial file and says what was expected and found. So a
file under the final name has always matched its checksum.

A file with more than one published address (MPI3D's moved in 2024; the old one stays as a
mirror) is fetched from the first that works: a missing file (HTTP 4xx), a server that stays
unreachable after the retries, or bytes that fail the checksum move on to the next address, and
only when every address has failed does the command stop, naming each one and what went wrong.
``--url URL`` fetches the file from that address alone, and ``$DISGEN_MIRROR`` (a base URL holding
the files under their published names) from that mirror alone; the checksums stay the same. ``--sha
ALGO:HEX`` checks your own expected digest instead, and with ``--url`` also fetches a file the
table does not know (saved under the URL's last path component).
"""

from __future__ import annotations

import argparse
import errno
import http.client
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from data_pipeline.sources import SOURCES, mismatches, parse_checksum, source

BLOCK = 1 << 20
USER_AGENT = "disgen-download/1"


class DownloadError(RuntimeError):
    """A download that could not finish; the message says why and what to do."""


class _DiskFull(DownloadError):
    """The disk filled up while writing: the next run resumes, from any address."""


class _Transient(Exception):
    """A failure worth retrying (the connection, not the request, went wrong)."""


@dataclass
class Plan:
    """What to fetch, from where (``urls``, tried in order), checked how, into which file."""
    name: str
    urls: tuple[str, ...]
    target: Path
    checksums: tuple[tuple[str, str], ...]

    @property
    def url(self) -> str:
        """The first address."""
        return self.urls[0]

    @property
    def partial(self) -> Path:
        return self.target.with_name(self.target.name + ".part")


def default_folder() -> Path:
    return Path(os.environ.get("DISGEN_DATA") or "data")


def plan(name: str, to=None, url: str | None = None, sha: str | None = None) -> Plan:
    """Resolve NAME, the folder, the URL (``url``, else ``$DISGEN_MIRROR``, else the table's) and
    the checksums (``sha`` replaces the table's). ValueError on bad input."""
    folder = Path(to) if to is not None else default_folder()
    checksums = (parse_checksum(sha),) if sha else None
    try:
        row = source(name)
    except ValueError:
        if not (url and sha):
            raise ValueError(f"unknown dataset file {name!r}; expected one of {', '.join(SOURCES)} "
                             "(or pass --url and --sha for a file of your own)") from None
        filename = Path(urllib.parse.urlparse(url).path).name
        if not filename:
            raise ValueError(f"--url {url!r}: no file name at the end of its path") from None
        return Plan(name, (url,), folder / filename, checksums)
    mirror = os.environ.get("DISGEN_MIRROR")
    if url is None and mirror:
        url = mirror.rstrip("/") + "/" + row.filename
    urls = (url,) if url else row.urls  # an address the user names is the only one tried
    return Plan(row.name, urls, folder / row.filename, checksums or row.checksums)


def on_terminal(stream) -> bool:
    """Whether ``stream`` is a terminal (a progress bar's place), not a log file or a pipe."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Progress:
    """A download's progress on a stream: on a terminal a tqdm bar (bytes done of the total, percent,
    rate, time left); elsewhere (a log file, ``ray job logs``, CI) one line when the download starts
    and one when it ends, so a log says what happened without a frame every 0.2 s."""

    def __init__(self, label: str, url: str, total: int | None, done: int = 0, stream=None):
        self.label, self.total, self.done, self.start_bytes = label, total, done, done
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.monotonic()
        self.bar = None
        if on_terminal(self.stream):
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, desc=label, unit="B", unit_scale=True,
                            unit_divisor=1024, file=self.stream, mininterval=0.2, dynamic_ncols=True)
        else:
            size = f"{_size(total)}" if total else "size unknown"
            resume = f", resuming after {_size(done)}" if done else ""
            print(f"{label}: downloading {size} from {url}{resume}", file=self.stream, flush=True)

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            return
        seconds = max(time.monotonic() - self.started, 1e-9)
        got = self.done - self.start_bytes
        of = f" ({_size(self.done)} of {_size(self.total)})" if self.total and self.done != self.total else ""
        print(f"{self.label}: {_size(got)} in {seconds:.1f} s, {_size(got / seconds)}/s{of}",
              file=self.stream, flush=True)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _fetch_once(job: Plan, url: str, timeout: float, progress: bool) -> None:
    """One attempt from ``url``: append to the partial file (from its current size, if the server
    allows)."""
    offset = job.partial.stat().st_size if job.partial.exists() else 0
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and offset:  # nothing left to send: the partial file may be complete
            return
        if error.code >= 500:
            raise _Transient(f"HTTP {error.code} {error.reason}") from None
        raise DownloadError(f"{url}: HTTP {error.code} {error.reason}; check the URL (or the mirror "
                            "in DISGEN_MIRROR), or pass --url with a working one") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        reason = getattr(error, "reason", error)
        raise _Transient(f"{type(reason).__name__}: {reason}") from None
    with response:
        content_range = response.headers.get("Content-Range") or f"bytes {offset}-"
        if offset and response.status == 206 and not content_range.startswith(f"bytes {offset}-"):
            job.partial.unlink()
            raise _Transient(f"asked for the bytes from {offset:,} but got {content_range!r}; "
                             "the partial file was dropped")
        if offset and response.status == 206:
            mode, done = "ab", offset
        else:
            if offset:
                print(f"{url}: the server does not resume downloads (no Range support); "
                      "starting again from the first byte", file=sys.stderr)
            mode, done = "wb", 0
        length = response.headers.get("Content-Length")
        total = done + int(length) if length is not None else None
        bar = Progress(job.target.name, url, total, done) if progress else None
        try:
            with open(job.partial, mode) as out:
                while True:
                    try:
                        block = response.read(BLOCK)
                    except (OSError, http.client.HTTPException) as error:
                        raise _Transient(f"connection lost after {_size(done)}: {error!r}") from None
                    if not block:
                        break
                    out.write(block)
                    done += len(block)
                    if bar:
                        bar.update(len(block))
        except OSError as error:  # writing (or flushing on close) failed
            if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            saved = job.partial.stat().st_size if job.partial.exists() else 0
            raise _DiskFull(
                f"{job.partial}: no space left on the device while writing {url}; free some space "
                f"(or pick another folder with --to) and run the same command again: it resumes from the "
                f"{saved:,} bytes already saved") from None
        finally:
            if bar:
                bar.close()
        if total is not None and done < total:
            raise _Transient(f"connection closed after {done:,} of {total:,} bytes")


def _fetch_with_retries(job: Plan, url: str, retries: int, backoff: float, timeout: float,
                        progress: bool) -> None:
    """Fetch from ``url`` into the partial file, retrying transient failures with exponential
    backoff; DownloadError once they are used up (or at once, for a non-transient failure)."""
    for attempt in range(retries + 1):
        try:
            _fetch_once(job, url, timeout, progress)
            return
        except _Transient as error:
            if attempt == retries:
                raise DownloadError(
                    f"{url}: {error} (after {retries + 1} tries); check that this machine is online "
                    "and can reach the address, or use a mirror (--url URL or DISGEN_MIRROR=BASE_URL). "
                    "Run the same command again to resume") from None
            wait = backoff * 2 ** attempt
            print(f"{url}: {error}; trying again in {wait:.1f} s ({attempt + 1} of {retries})",
                  file=sys.stderr)
            time.sleep(wait)


def download(name: str, to=None, url: str | None = None, sha: str | None = None, retries: int = 4,
             backoff: float = 1.0, timeout: float = 60.0, progress: bool = True) -> Path:
    """Download NAME into ``to`` (see the module docstring); the checked file's path.

    ValueError on bad input; :class:`DownloadError` when the file cannot be fetched or does not
    match its checksums (then no file is left under its final name).
    """
    job = plan(name, to, url, sha)
    if job.target.exists():
        wrong = mismatches(job.target, job.checksums)
        if wrong:
            raise DownloadError(f"{job.target} exists but does not match ({'; '.join(wrong)}); move it "
                                "away or delete it, then run the command again")
        if progress:
            print(f"{job.target} is already there and matches its checksum", file=sys.stderr)
        return job.target
    job.target.parent.mkdir(parents=True, exist_ok=True)
    failures = []
    for address in job.urls:
        try:
            _fetch_with_retries(job, address, retries, backoff, timeout, progress)
            wrong = mismatches(job.partial, job.checksums)
            if wrong:
                job.partial.unlink()
                raise DownloadError(
                    f"{address}: the downloaded file does not match its checksum ({'; '.join(wrong)}); the "
                    "partial file was deleted. Run the command again; if it keeps failing, the file on the "
                    "server changed (pass --sha ALGO:HEX if you trust it)")
            break
        except _DiskFull:
            raise  # another address would not help: free space, then resume
        except DownloadError as error:
            failures.append(str(error))
            if address != job.urls[-1]:
                print(f"{error}\ntrying the next address of {job.name}: {job.urls[len(failures)]}",
                      file=sys.stderr)
    else:
        if len(failures) == 1:
            raise DownloadError(failures[0])
        raise DownloadError(f"no address of {job.name} worked: " + " | ".join(failures))
    with open(job.partial, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(job.partial, job.target)
    return job.target


def list_sources(folder: Path) -> str:
    lines = [f"data folder: {folder}"]
    for row in SOURCES.values():
        here = "present" if (folder / row.filename).exists() else "absent"
        checks = ", ".join(f"{a} {h}" for a, h in row.checksums)
        addresses = "".join(f"\n{'':16s} {url}" + (" (mirror)" if i else "")
                            for i, url in enumerate(row.urls))
        lines.append(f"{row.name:16s} {row.filename}  [{here}]{addresses}\n{'':16s} {checks}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m data_pipeline.download",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", help=f"one of {', '.join(SOURCES)}")
    parser.add_argument("--to", default=None, help="data folder (default: $DISGEN_DATA, else ./data)")
    parser.add_argument("--list", action="store_true", help="list the files, URLs and checksums")
    parser.add_argument("--url", default=None, help="fetch from this URL instead (a mirror)")
    parser.add_argument("--sha", default=None,
                        help="expected checksum ALGO:HEX (ALGO: md5, sha1, sha256 or git-blob-sha1)")
    parser.add_argument("--retries", type=int, default=4, help="retries of a transient failure (default 4)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds without data before retrying")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    folder = Path(args.to) if args.to else default_folder()
    if args.list:
        print(list_sources(folder))
        return
    if not args.name:
        parser.error(f"name: which file? one of {', '.join(SOURCES)} (or --list)")
    if args.retries < 0 or args.timeout <= 0:
        parser.error("--retries must be at least 0 and --timeout positive")
    try:
        path = download(args.name, folder, args.url, args.sha, retries=args.retries,
                        timeout=args.timeout, progress=not args.quiet)
    except ValueError as error:
        parser.error(str(error))
    except DownloadError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    print(f"{path} ({path.stat().st_size:,} bytes, checksum verified)")


if __name__ == "__main__":
    main()
