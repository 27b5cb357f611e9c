"""moto's S3 server on loopback for the benchmarks that need one (``results_at_scale.py``,
``storage_versions.py``): started on a free port, returned once it accepts connections. The tests
have their own (tests/conftest.py, ``start_moto_server``)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time


def start() -> tuple[subprocess.Popen, str]:
    """(the server's process, its endpoint URL)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline:
                server.terminate()
                raise RuntimeError("moto server did not start") from None
            time.sleep(0.2)
