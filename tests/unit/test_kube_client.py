"""The API client's throttling: client-side token bucket, 429 with Retry-After, 5xx retries.

A real HTTP server on loopback plays an overloaded API server; the client is the real one.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes.client import Configuration

from pgsched.k8s.client import api
from pgsched.k8s.client.ratelimit import TokenBucket


class Overloaded(BaseHTTPRequestHandler):
    script: list[tuple[int, dict[str, str]]] = []
    seen: list[float] = []

    def do_POST(self) -> None:
        self.seen.append(time.monotonic())
        status, headers = self.script.pop(0) if self.script else (201, {})
        body = json.dumps(
            {
                "kind": "Status",
                "reason": "TooManyRequests" if status == 429 else "X",
                "message": "slow down",
            }
            if status >= 300
            else {"ok": True}
        ).encode()
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    Overloaded.script, Overloaded.seen = [], []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Overloaded)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def client(host, *, qps=1000.0, burst=1000, attempts=6):
    configuration = Configuration()
    configuration.host = host
    return api.KubeApi(
        configuration,
        limiter=TokenBucket(qps, burst),
        retry=api.RetrySettings(attempts=attempts, base_delay=0.05),
    )


def test_429_is_retried_after_the_servers_retry_after(server):
    Overloaded.script = [(429, {"Retry-After": "1"}), (201, {})]
    assert client(server).create("/api/v1/namespaces/x/events", {}) == {"ok": True}
    first, second = Overloaded.seen
    assert second - first >= 0.95


def test_server_errors_are_retried_a_bounded_number_of_times_then_surfaced(server):
    Overloaded.script = [(503, {})] * 3
    with pytest.raises(api.ApiError) as failed:
        client(server, attempts=3).create("/x", {})
    assert failed.value.status == 503 and len(Overloaded.seen) == 3


def test_client_errors_are_surfaced_at_once_with_the_servers_message(server):
    Overloaded.script = [(422, {})]
    with pytest.raises(api.ApiError, match="422 X: slow down"):
        client(server).create("/x", {})
    assert len(Overloaded.seen) == 1


def test_the_client_side_limiter_paces_a_burst(server):
    kube = client(server, qps=20, burst=5)
    started = time.monotonic()
    for _ in range(25):
        kube.create("/x", {})
    # 5 at once, then 20 more at 20 per second.
    assert time.monotonic() - started >= 0.9


def test_the_client_records_when_the_api_server_came_back_after_an_absence(server):
    """Every request tells whether the server was away (k8s/jobside/starts.py bounds runs from
    its return): a failing answer, then a good one, is a return; good ones alone are not."""
    kube = client(server, attempts=1)
    kube.create("/x", {})
    assert kube.reachability.seconds_since_return() is None
    Overloaded.script = [(503, {})]
    with pytest.raises(api.ApiError):
        kube.create("/x", {})
    assert kube.reachability.seconds_since_return() is None  # away, not back yet
    kube.background().create("/x", {})  # a view of the same client shares what it saw
    since = kube.reachability.seconds_since_return()
    assert since is not None and 0 <= since < 5


def test_a_refused_connection_then_an_answer_is_a_return():
    """The API server stopped (connection refused) and started again on its port."""

    def serve(port):
        httpd = ThreadingHTTPServer(("127.0.0.1", port), Overloaded)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        return httpd

    Overloaded.script, Overloaded.seen = [], []
    first = serve(0)
    port = first.server_address[1]
    kube = client(f"http://127.0.0.1:{port}", attempts=1)
    kube.create("/x", {})
    first.shutdown()
    first.server_close()
    with pytest.raises(api.ApiError) as failed:
        kube.create("/x", {})
    assert failed.value.unavailable and kube.reachability.seconds_since_return() is None
    again = serve(port)
    try:
        kube.create("/x", {})
    finally:
        again.shutdown()
        again.server_close()
    assert kube.reachability.seconds_since_return() is not None
