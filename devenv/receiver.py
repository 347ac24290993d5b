"""Real HTTP receivers for notification tests and benchmarks.

``Receiver``: ``http.server`` on a thread, recording every request (and when it came); it
can answer with a status, hang, redirect, or send a huge body, and be stopped and restarted
on the same port (an outage). ``Trickler``: a hostile one on a raw socket, answering
"Connection: close" and then its body one byte at a time, each just within the sender's
read timeout, for as long as the sender reads."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    def signed_by(self, key: bytes) -> bool:
        """The receiver's check: HMAC-SHA256 of ``<timestamp>.<body>``."""
        timestamp = self.headers.get("X-Pgsched-Timestamp", "")
        expected = hmac.new(key, timestamp.encode() + b"." + self.body, hashlib.sha256)
        given = self.headers.get("X-Pgsched-Signature", "")
        return hmac.compare_digest(f"sha256={expected.hexdigest()}", given)


@dataclass
class Receiver:
    """``status``: the answer; ``hang``: seconds to wait before answering; ``redirect``:
    a Location to answer 302 with; ``huge``: bytes of body to send."""

    status: int = 200
    hang: float = 0.0
    redirect: str | None = None
    huge: int = 0
    host: str = "127.0.0.1"
    # A folder with tls.crt and tls.key (devenv.pki.serving_tls): serve HTTPS.
    tls: Path | None = None
    requests: list[Request] = field(default_factory=list)
    port: int = 0
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}/hook"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with receiver._lock:
                    receiver.requests.append(Request(self.path, dict(self.headers), body))
                if receiver.hang:
                    time.sleep(receiver.hang)
                if receiver.redirect:
                    self.send_response(302)
                    self.send_header("Location", receiver.redirect)
                    self.end_headers()
                    return
                self.send_response(receiver.status)
                self.send_header("Content-Length", str(receiver.huge or 2))
                self.end_headers()
                if receiver.huge:
                    chunk = b"x" * 65536
                    try:
                        for _ in range(receiver.huge // len(chunk)):
                            self.wfile.write(chunk)
                    except OSError:
                        pass  # the sender stopped reading: what it should do
                else:
                    self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.tls / "tls.crt", self.tls / "tls.key")
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def received(self) -> list[Request]:
        with self._lock:
            return list(self.requests)


class Trickler:
    """Answers ``status`` with "Connection: close" and no length, then one byte of body
    every ``every`` seconds; ``status_line``: trickles its status line instead, a digit at a
    time (never a valid one). Records when each connection opened and closed."""

    def __init__(self, *, status: int = 500, every: float = 0.5, status_line: bool = False) -> None:
        self.status, self.every, self.status_line = status, every, status_line
        self.opened: list[float] = []
        self.closed: list[float] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def stop(self) -> None:
        self._stop.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.opened.append(time.monotonic())
            threading.Thread(target=self._trickle, args=(client,), daemon=True).start()

    def _trickle(self, client: socket.socket) -> None:
        head = f"HTTP/1.1 {self.status} Slow\r\nConnection: close\r\n\r\n".encode()
        with client:
            try:
                client.recv(65536)  # the request (small: one read takes it)
                client.sendall(b"HTTP/1.1 " if self.status_line else head)
                while not self._stop.wait(self.every):
                    client.sendall(b"9" if self.status_line else b"x")
            except OSError:
                pass  # the sender hung up: what it should do
            finally:
                self.closed.append(time.monotonic())
