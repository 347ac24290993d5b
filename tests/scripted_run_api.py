"""A scripted run API for unit tests: a real HTTPS server in a thread that answers each
request with the next answer the test gave it and records what it was sent, so a test
sees what the pod does on the wire. (The real server is ``pgsched.runapi``.)"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

Answer = Callable[[BaseHTTPRequestHandler], None]


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    port: int  # the client's: one per connection


@dataclass
class ScriptedRunApi:
    """Answers each request with the next of ``answers``, then ``{"state": "active"}``; or,
    when the pod's threads make the order of requests unknown, with what ``respond`` picks
    for it."""

    url: str
    ca: str  # the PEM a pod is given to trust
    answers: list[Answer] = field(default_factory=list)
    respond: Callable[[Seen], Answer] | None = None
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)  # ends every stall

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        seen = Seen(
            handler.command,
            handler.path,
            dict(handler.headers.items()),
            handler.rfile.read(length),
            handler.client_address[1],
        )
        self.seen.append(seen)
        if self.respond is not None:
            answer = self.respond(seen)
        else:
            answer = self.answers.pop(0) if self.answers else reply(200, {"state": "active"})
        answer(handler)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a pod that hung up on an answer: what several tests make it do


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the operator's server

    def do_GET(self) -> None:
        self.server.api.handle(self)  # type: ignore[attr-defined]

    do_POST = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve(tls: Path) -> Iterator[ScriptedRunApi]:
    """Serve on 127.0.0.1 with ``tls``'s certificate (a ``devenv.pki.serving_tls`` folder)."""
    server = _Server(("127.0.0.1", 0), _Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls / "tls.crt", tls / "tls.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    api = ScriptedRunApi(
        f"https://127.0.0.1:{server.server_address[1]}", (tls / "ca.crt").read_text()
    )
    server.api = api  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield api
    finally:
        api.release.set()
        server.shutdown()
        server.server_close()


def reply(status: int, body: object, **headers: str) -> Answer:
    """An answer: ``body`` as JSON (or as it is, if bytes); ``Retry_After=`` is Retry-After."""

    def answer(handler: BaseHTTPRequestHandler) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            handler.send_header(name.replace("_", "-"), value)
        handler.end_headers()
        handler.wfile.write(data)

    return answer


def then_hang_up(answer: Answer) -> Answer:
    """Answer, then close the connection without saying so (an idle timeout's doing)."""

    def hang_up(handler: BaseHTTPRequestHandler) -> None:
        answer(handler)
        handler.close_connection = True

    return hang_up


def unanswered(handler: BaseHTTPRequestHandler) -> None:
    """Take the request and close the connection: the pod cannot tell whether it was done."""
    handler.close_connection = True
