"""``pgsched`` starts fast because each command imports only what it uses.

Asserted on the set of imported modules (``python -X importtime``), not on wall time, which
on a shared machine says more about the neighbours than about pgsched: the Kubernetes
client, the connection pool, the web server, the metrics client and dateutil each cost tens
to hundreds of milliseconds to import, psycopg a fifth of a second (bench/README.md, "CLI
start-up").
"""

from __future__ import annotations

import sys

from cli_runner import kubeconfig_in, pgsched
from factories import define

NEVER_AT_START = {"kubernetes", "psycopg_pool", "aiohttp", "prometheus_client", "dateutil"}


def imported_by(*argv: str, env: dict[str, str] | None = None) -> set[str]:
    """The top-level packages a ``pgsched`` command imports (it must succeed)."""
    result = pgsched(
        *argv, env=env, executable=[sys.executable, "-X", "importtime", "-m", "pgsched.cli.main"]
    )
    assert result.code == 0, result
    lines = [line for line in result.err.splitlines() if line.startswith("import time:")]
    assert lines, result.err
    return {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in lines}


def test_help_and_checking_an_expression_load_neither_the_database_driver_nor_kubernetes():
    for argv in (
        ["--help"],
        ["next", "--help"],
        ["runs", "--help"],
        ["next", "--cron", "30 8 * * MON-FRI", "--tz", "Europe/Sofia", "-n", "3"],
    ):
        loaded = imported_by(*argv)
        assert "pgsched" in loaded, argv
        assert loaded & (NEVER_AT_START | {"psycopg"}) == set(), argv


def test_runs_loads_the_database_driver_and_nothing_it_does_not_use(dsn, conn, tmp_path):
    define(conn, "report", namespace="team-a", schedule="0 8 * * *")
    kubeconfig = kubeconfig_in(tmp_path, namespace="team-a")
    # Without -n: the namespace comes from the kubeconfig, read without the Kubernetes client.
    loaded = imported_by("runs", "report", "--dsn", dsn, env={"KUBECONFIG": str(kubeconfig)})
    assert "psycopg" in loaded
    assert loaded & NEVER_AT_START == set()


def test_an_rrule_loads_dateutil_only_when_one_is_built():
    assert "dateutil" in imported_by("next", "--rrule", "FREQ=DAILY;BYHOUR=8", "-n", "1")


def test_every_command_still_answers_its_help():
    listed = pgsched("--help").out
    for command in ("migrate", "operator", "run", "heartbeat", "runs", "describe", "run-now",
                    "cancel", "suspend", "resume", "next", "backfill", "doctor", "ui"):  # fmt: skip
        assert command in listed
        result = pgsched(command, "--help")
        assert result.code == 0 and f"usage: pgsched {command}" in result.out, result
