"""An S3 server that fails when told: a proxy on loopback in front of the moto server of the
``s3_server`` fixture, forwarding every request unchanged except those a rule fails.

``FaultyS3(endpoint).fail(rule, times)`` answers the next ``times`` requests that ``rule(method,
path, headers)`` matches with a 503 SlowDown (S3's answer to a burst) instead of forwarding them;
``times=None`` fails every one from then on, until ``heal()``. ``lose(rule, times)`` forwards
them, then closes the connection unanswered: the server applied a request whose answer is lost.
``requests`` lists what came in (method, path, status), and ``ranged`` the paths of those that
asked for a byte range. Point ``AWS_ENDPOINT_URL`` at ``url`` to put the proxy in the way.

``FaultyS3(endpoint, atomic_conditions=True)`` also forwards conditional writes (a PUT with
``If-None-Match`` or ``If-Match``) one at a time, as S3 applies them atomically: moto 5.2.5 checks
the condition and then writes, unlocked, so two concurrent ``If-None-Match: *`` PUTs of one key can
both succeed there (seen once in 20 races of 8 drivers), which S3 never allows.

``age(path, seconds)`` makes the object at ``path`` (``/bucket/key``) read as written ``seconds``
earlier (its ``Last-Modified`` moved back), until it is written again (a new ETag): time passing on
the store, for a test of a lease, without waiting for it."""

from __future__ import annotations

import contextlib
import email.utils
import http.client
import http.server
import threading
import urllib.parse

SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message></Error>")


def is_put(method, path, headers) -> bool:
    """A rule: every upload (PutObject, UploadPart, CopyObject)."""
    return method == "PUT"


def is_copy(method, path, headers) -> bool:
    """A rule: the server-side copy that puts a whole object in place."""
    return method == "PUT" and "x-amz-copy-source" in {k.lower() for k in headers}


class FaultyS3:
    def __init__(self, upstream: str, atomic_conditions: bool = False):
        parsed = urllib.parse.urlparse(upstream)
        self.upstream = (parsed.hostname, parsed.port)
        self.rules: list[list] = []  # [rule, times left or None]: answered 503, not forwarded
        self.losing: list[list] = []  # [rule, times left or None]: forwarded, the answer lost
        self.lost: list[tuple[str, str, int]] = []  # the requests whose answer was lost
        self.requests: list[tuple[str, str, int]] = []
        self.ranged: list[str] = []  # the paths of requests that asked for a byte range
        self.aged: dict[str, tuple[str, float]] = {}  # path -> (its ETag when aged, seconds)
        self.etags: dict[str, str] = {}  # path -> the ETag of the last answer about it
        self.lock = threading.Lock()
        self.conditional = threading.Lock() if atomic_conditions else contextlib.nullcontext()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                headers = {k: v for k, v in self.headers.items() if k.lower() != "expect"}
                body = self._body()
                if proxy._should_fail(self.command, self.path, headers):
                    proxy.requests.append((self.command, self.path, 503))
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(SLOW_DOWN)))
                    self.end_headers()
                    self.wfile.write(SLOW_DOWN)
                    return
                conditional = self.command == "PUT" and bool({"if-none-match", "if-match"}
                                                             & {k.lower() for k in headers})
                connection = http.client.HTTPConnection(*proxy.upstream, timeout=30)
                try:
                    with proxy.conditional if conditional else contextlib.nullcontext():
                        connection.request(self.command, self.path, body=body or None, headers=headers)
                        response = connection.getresponse()
                        data = response.read()
                finally:
                    connection.close()
                proxy.requests.append((self.command, self.path, response.status))
                if proxy._should_lose(self.command, self.path, headers):  # applied; its answer lost
                    proxy.lost.append((self.command, self.path, response.status))
                    self.close_connection = True
                    return
                if "range" in {k.lower() for k in headers}:
                    proxy.ranged.append(self.path)
                self.send_response(response.status)
                path = self.path.split("?", 1)[0]
                if response.status < 300 and response.getheader("ETag"):
                    proxy.etags[path] = response.getheader("ETag")
                aged = proxy.aged.get(path)
                for name, value in response.getheaders():
                    if name.lower() not in ("content-length", "transfer-encoding", "connection", "server",
                                            "date"):
                        if name.lower() == "last-modified" and aged and response.getheader("ETag") == aged[0]:
                            value = email.utils.formatdate(
                                email.utils.parsedate_to_datetime(value).timestamp() - aged[1], usegmt=True)
                        self.send_header(name, value)
                length = response.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _body(self) -> bytes:
                """The request's body as it came (chunked bodies with their framing: the AWS SDK
                sends its uploads ``aws-chunked``), to forward unchanged."""
                if "chunked" not in (self.headers.get("Transfer-Encoding") or "").lower():
                    length = int(self.headers.get("Content-Length") or 0)
                    return self.rfile.read(length) if length else b""
                raw = b""
                while True:
                    line = self.rfile.readline()
                    raw += line
                    size = int(line.split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        break
                    raw += self.rfile.read(size + 2)
                while True:  # trailers, then the empty line
                    line = self.rfile.readline()
                    raw += line
                    if line in (b"\r\n", b"\n", b""):
                        return raw

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _should_fail(self, method, path, headers) -> bool:
        return self._matches(self.rules, method, path, headers)

    def _should_lose(self, method, path, headers) -> bool:
        return self._matches(self.losing, method, path, headers)

    def _matches(self, rules, method, path, headers) -> bool:
        with self.lock:
            for entry in rules:
                rule, left = entry
                if (left is None or left > 0) and rule(method, path, headers):
                    if left is not None:
                        entry[1] -= 1
                    return True
        return False

    def fail(self, rule=is_put, times: int | None = None) -> None:
        with self.lock:
            self.rules.append([rule, times])

    def lose(self, rule=is_put, times: int | None = 1) -> None:
        """The next ``times`` requests ``rule`` matches reach the server, which applies them; then
        the connection closes with no answer (a reply lost on the way back): the SDK sends again."""
        with self.lock:
            self.losing.append([rule, times])

    def heal(self) -> None:
        with self.lock:
            self.rules, self.losing = [], []

    def age(self, path: str, seconds: float) -> None:
        """The object at ``path`` (``/bucket/key``), as last written or read through the proxy, reads
        as last written ``seconds`` earlier than it was, until it is written again."""
        assert path in self.etags, f"{path}: no object written or read through the proxy to age"
        self.aged[path] = (self.etags[path], seconds)

    def failed(self) -> int:
        return sum(status == 503 for *_, status in self.requests)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
