"""``pgsched ui`` as a person runs it: a subprocess serving the database it is given."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Callable

from cli_runner import pgsched
from conftest import History
from devenv.processes import free_port
from devenv.waiting import wait_for


def test_no_auth_serves_every_namespace_until_stopped(dsn: str, history: History) -> None:
    port = free_port()
    command = [sys.executable, "-m", "pgsched.cli.main", "ui", "--no-auth", "--dsn", dsn]
    process = subprocess.Popen(
        [*command, "--bind", f"127.0.0.1:{port}"], stdout=subprocess.PIPE, text=True
    )
    try:

        def overview() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as answer:
                return str(answer.read().decode())

        page = wait_for(lambda: _or_none(overview), 60, describe="pgsched ui answering")
        assert "team-a" in page and "daily at 09:00 Europe/Sofia" in page
    finally:
        process.terminate()
        process.wait(timeout=30)


def _or_none(fetch: Callable[[], str]) -> str | None:
    try:
        return fetch()
    except OSError:  # not listening yet
        return None


def test_bad_bind_and_missing_database_are_usage_errors(dsn: str) -> None:
    result = pgsched("ui", "--no-auth", "--bind", "localhost", dsn=dsn)
    assert result.code == 2 and "--bind 'localhost' is not host:port" in result.err
    result = pgsched("ui", "--no-auth")
    assert result.code == 2 and "no database given" in result.err


def test_pgsched_ui_listens_on_loopback_and_wants_the_ui_audience_unless_told() -> None:
    from pgsched.cli import main

    args = main.build_parser().parse_args(["ui"])
    assert args.bind == "127.0.0.1:8090"  # anyone who reaches the port acts as you
    assert (args.audience, args.api_server_tokens, args.cookie_secure) == (
        "pgsched-ui",
        False,
        "auto",
    )
