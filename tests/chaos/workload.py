"""The work the replicas do during a chaos run: definitions, run-now requests, cancels.

Database variant: a few hundred definitions, caps 1-3, every one scheduled every minute —
a quarter on the cron ``* * * * *`` (a stampede at each full minute), the rest on RRULEs
``FREQ=MINUTELY;BYSECOND=n`` spread over the minute — with concurrency policies mostly
``Queue`` and some ``Skip``/``Replace``, some starting deadlines, short heartbeat timeouts
and retries for the infrastructure reasons; a share of them (10% by default) join one of
two concurrency pools (limits 2 and 4, checked as I9). On top, a steady stream of run-now requests
(each with its own token, retried with the *same* token when the database was away, which
is exactly the idempotency the operator relies on) and an occasional cancel.

Chains (I10): every tenth definition also runs after the one before it (``outcome``
cycling through Succeeded, Failed and Finished; every other one of them has no schedule of
its own), and every twentieth is a fan-in (``afterMode: All``) of the two before it.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg

from pgsched import spec as spec_module
from pgsched.db.connection import Connection
from pgsched.db.session import Session
from pgsched.engine import definitions, pools, runs

log = logging.getLogger(__name__)

POOLS = {"pool-a": 2, "pool-b": 4}
HEARTBEAT = {"intervalSeconds": 1, "timeoutSeconds": 5, "orphanTimeoutSeconds": 12}
RETRY_POLICY = {"maxAttempts": 4, "backoff": {"initialSeconds": 1, "maxSeconds": 4}}


def definition_spec(rng: random.Random, index: int) -> dict[str, Any]:
    spec: dict[str, Any] = (
        {"schedule": "* * * * *"}
        if index % 4 == 0
        else {"rrule": f"FREQ=MINUTELY;BYSECOND={rng.randrange(60)}"}
    )
    spec |= {
        "maxConcurrentRuns": rng.randint(1, 3),
        "concurrencyPolicy": rng.choices(["Queue", "Skip", "Replace"], weights=[8, 1, 1])[0],
        "cancelGraceSeconds": 5,
        "heartbeat": HEARTBEAT,
        "retryPolicy": RETRY_POLICY,
    }
    if rng.random() < 0.3:
        spec["startingDeadlineSeconds"] = 90
    if index % 20 == 19:
        spec["after"] = [{"scheduledJob": _name(index - 1)}, {"scheduledJob": _name(index - 2)}]
        spec["afterMode"] = "All"
    elif index % 10 == 9:
        outcome = ("Succeeded", "Failed", "Finished")[index // 20 % 3]
        spec["after"] = [{"scheduledJob": _name(index - 1), "outcome": outcome}]
        spec.pop("schedule", None)
        spec.pop("rrule", None)
    return spec


def _name(index: int) -> str:
    return f"chaos-{index:03d}"


def create_definitions(
    conn: Connection, rng: random.Random, count: int, *, pooled_share: float = 0.1
) -> list[uuid.UUID]:
    now = datetime.now(UTC)
    for pool, limit in POOLS.items():
        pools.upsert(conn, "chaos", pool, limit)
    ids = []
    for index in range(count):
        name = _name(index)
        spec = definition_spec(rng, index)
        if rng.random() < pooled_share:
            spec["pool"] = rng.choice(list(POOLS))
        parsed = spec_module.parse(spec, hash_seed=f"chaos/{name}", anchor=now, now=now)
        key = definitions.DefinitionKey(
            id=uuid.UUID(int=rng.getrandbits(128)),
            namespace="chaos",
            name=name,
            generation=1,
            created_at=now,
        )
        ids.append(definitions.upsert(conn, key, parsed, raw_spec=spec).id)
    return ids


def enqueue_backlog(conn: Connection, definition_ids: list[uuid.UUID], per_definition: int) -> None:
    """Queue ``per_definition`` run-now runs of every definition at once."""
    for definition_id in definition_ids:
        for index in range(per_definition):
            runs.run_now(conn, definition_id, token=f"backlog-{index}")


class Requests(threading.Thread):
    """Run-now requests at ``per_second`` (Poisson), and a cancel now and then.

    Half the requests go to a few "hot" definitions, which therefore spend much of the run
    at their cap with runs queued behind it: that is where a cap could be overshot.
    """

    def __init__(
        self,
        dsn: str,
        definition_ids: list[uuid.UUID],
        rng: random.Random,
        *,
        per_second: float,
        hot: int = 8,
        cancel_share: float = 0.05,
    ) -> None:
        super().__init__(name="chaos-requests", daemon=True)
        self._session = Session.for_dsn(dsn, application_name="chaos-requests")
        self._ids = definition_ids
        self._hot = rng.sample(definition_ids, k=min(hot, len(definition_ids)))
        self._rng = rng
        self._per_second = per_second
        self._cancel_share = cancel_share
        self._stop_event = threading.Event()
        self.requested = 0
        self.repeated = 0  # a token sent again after a failure (idempotent on the engine side)
        self.cancels = 0
        # (definition, token) of every request the database acknowledged: a lost one is a
        # run-now request a user was told had been queued.
        self.acknowledged: list[tuple[uuid.UUID, str]] = []

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=30)
        self._session.close()

    def run(self) -> None:
        pending: tuple[uuid.UUID, str] | None = None
        count = 0
        while not self._stop_event.wait(self._rng.expovariate(self._per_second)):
            try:
                if self._rng.random() < self._cancel_share:
                    self._session.run(self._cancel_one)
                    continue
                if pending is None:
                    count += 1
                    targets = self._hot if self._rng.random() < 0.5 else self._ids
                    pending = (self._rng.choice(targets), f"chaos-{count}")
                else:
                    self.repeated += 1
                definition_id, token = pending
                self._session.run(
                    functools.partial(runs.run_now, definition_id=definition_id, token=token)
                )
                self.requested += 1
                self.acknowledged.append(pending)
                pending = None
            except psycopg.Error as error:
                log.debug("request failed (the database is away?): %s", error)

    def _cancel_one(self, conn: Connection) -> None:
        row = conn.execute(
            "SELECT id FROM pgsched.job_runs WHERE status IN ('QUEUED', 'RUNNING')"
            " ORDER BY random() LIMIT 1"
        ).fetchone()
        if row is not None:
            runs.cancel_run(conn, row["id"], by=runs.BY_CLI, why="cancelled by the chaos workload")
            self.cancels += 1
