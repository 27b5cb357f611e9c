"""Throughput of ``data_pipeline.download`` from an HTTP server on loopback (no internet needed).

Run: ``python benchmarks/download_loopback.py [--mib 512] [--drop-at 0.5]``. Serves ``--mib`` MiB
of random bytes from the standard library's HTTP server (in a thread, Range supported) and times
one full download: streaming to the partial file, the md5 check and the rename. With
``--drop-at F`` the server also cuts the first connection after that fraction, so the figure
includes one resume. Prints MiB/s for the whole command and for the checksum pass alone.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data_pipeline import download as dl  # noqa: E402
from data_pipeline.sources import file_checksum  # noqa: E402


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        body, start, status = self.server.body, 0, 200
        wanted = self.headers.get("Range")
        if wanted:
            start, status = int(wanted.removeprefix("bytes=").split("-")[0]), 206
        self.send_response(status)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        view = memoryview(body)[start:]
        if self.server.drop_at is not None:
            cut, self.server.drop_at = int(self.server.drop_at * len(view)), None
            self.wfile.write(view[:cut])
            self.close_connection = True
            return
        for offset in range(0, len(view), 1 << 20):
            self.wfile.write(view[offset:offset + (1 << 20)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--drop-at", type=float, default=None, help="cut the first connection here (0..1)")
    args = parser.parse_args(argv)
    body = os.urandom(args.mib << 20)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.body, server.drop_at = body, args.drop_at
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/blob.bin"
    md5 = hashlib.md5(body).hexdigest()
    print(f"nproc {os.cpu_count()}, load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        path = dl.download("blob", folder, url=url, sha=f"md5:{md5}", backoff=0.0, progress=False)
        seconds = time.perf_counter() - start
        start = time.perf_counter()
        file_checksum(path, "md5")
        check = time.perf_counter() - start
    server.shutdown()
    print(f"{args.mib} MiB in {seconds:.2f} s: {args.mib / seconds:,.0f} MiB/s end to end "
          f"(md5 pass alone {check:.2f} s, {args.mib / check:,.0f} MiB/s)"
          + (f"; one resume after {args.drop_at:.0%}" if args.drop_at is not None else ""))


if __name__ == "__main__":
    main()
