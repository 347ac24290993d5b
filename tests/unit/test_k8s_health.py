"""``/healthz``: 200 with what was checked, 500 with the problems (the kubelet restarts)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest

from pgsched.k8s.serve import health


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def fetch(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_healthz_answers_what_was_checked_then_the_problems():
    problems: list[str] = []

    def check() -> dict[str, object]:
        if problems:
            raise health.Unhealthy("; ".join(problems))
        return {"seconds_since_tick": 0.5}

    port = free_port()
    server = health.serve(f"127.0.0.1:{port}", check)
    try:
        assert fetch(f"http://127.0.0.1:{port}/healthz") == (200, {"seconds_since_tick": 0.5})
        problems.append("the tick thread died")
        assert fetch(f"http://127.0.0.1:{port}/healthz") == (
            500,
            {"error": "the tick thread died"},
        )
        assert fetch(f"http://127.0.0.1:{port}/other")[0] == 404
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6 on this machine")
def test_healthz_binds_an_ipv6_address_with_or_without_brackets():
    for bind in ("[::1]:{port}", "::1:{port}"):
        port = free_port()
        try:
            server = health.serve(bind.format(port=port), lambda: {})
        except OSError as error:  # ::1 not configured here
            pytest.skip(f"IPv6 loopback unavailable: {error}")
        try:
            assert fetch(f"http://[::1]:{port}/healthz") == (200, {})
        finally:
            server.shutdown()
            server.server_close()
