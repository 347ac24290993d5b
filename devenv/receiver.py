"""A real HTTP receiver for notification tests and benchmarks: ``http.server`` on a thread,
recording every request; it can answer with a status, hang, redirect, or send a huge body, and be
stopped and restarted on the same port (an outage)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]
    body: bytes

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
    requests: list[Request] = field(default_factory=list)
    port: int = 0
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

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
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
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
