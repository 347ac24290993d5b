"""``/healthz``: the operator's liveness, for the kubelet's probes.

200 with a JSON body saying what was checked while every thread of the operator is alive
and the tick loop makes progress; 500 with the problems otherwise, so the kubelet restarts
a replica that can no longer do its work. A database or API outage is not a problem here:
the operator waits it out (I7), and restarting it would not help. The port is bound before
the operator starts its threads, so a port taken stops the start at once; until the threads
run, the answer is 500 ``starting`` (the start-up probe's to wait out).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)


class Unhealthy(Exception):
    """What a check raises, with the problems as its message."""


def serve(bind: str, check: Callable[[], dict[str, Any]]) -> ThreadingHTTPServer:
    """Serve ``/healthz`` on ``host:port`` from a thread of its own; ``shutdown()`` stops it."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/healthz":
                self._answer(404, {"error": "not found: try /healthz"})
                return
            try:
                self._answer(200, check())
            except Unhealthy as problems:
                self._answer(500, {"error": str(problems)})

        def _answer(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("healthz: " + format, *args)

    host, _, port = bind.rpartition(":")
    host = host.strip("[]")  # an IPv6 address may come in brackets

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    server = Server((host, int(port)), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="pgsched-healthz", daemon=True).start()
    return server
