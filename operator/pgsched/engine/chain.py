"""Chaining: a ScheduledJob that runs after others (``spec.after``).

An edge says "run D after upstream U reaches outcome O" (``Succeeded``, ``Failed`` or
``Finished``). Only a *final* outcome counts: a success, or a failure that will not be
retried; a ``CANCELLED`` run triggers nothing.

:func:`fire` is called by ``settle`` with the batch's final runs, inside the transaction
that settles them, and is the only place downstream runs are inserted, so every final
outcome passes through it once, and a replayed settle is a no-op (a unique key on
downstream definition and upstream run). ``spec.afterMode`` ``All`` waits for an arrival
from every upstream (fan-in). Cycles are rejected when a definition is applied
(:func:`check`).

The modes, the locks and why settle is the place: docs/architecture.md, "Chaining".
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal
from uuid import UUID

from pgsched.db import queries

if TYPE_CHECKING:
    from pgsched.db.connection import Connection

log = logging.getLogger(__name__)

Outcome = Literal["Succeeded", "Failed", "Finished"]
Mode = Literal["Any", "All"]
OUTCOMES: tuple[Outcome, ...] = ("Succeeded", "Failed", "Finished")
MODES: tuple[Mode, ...] = ("Any", "All")


@dataclass(frozen=True)
class Upstream:
    """One entry of ``spec.after``."""

    scheduled_job: str
    outcome: Outcome = "Succeeded"


@dataclass(frozen=True)
class Final:
    """A run whose outcome settle just made final."""

    run_id: int
    outcome: Literal["Succeeded", "Failed"]


@dataclass(frozen=True)
class Chained:
    run_id: int
    definition_id: UUID
    upstream_run_id: int
    status: str  # QUEUED, or SKIPPED when the downstream is suspended


class CycleError(ValueError):
    """Applying the edges would close a cycle; the message names it."""


def fire(conn: Connection, finals: Sequence[Final], *, now: datetime) -> list[Chained]:
    """Queue the downstream runs of ``finals``. Runs in the caller's transaction."""
    if not finals:
        return []
    edges = conn.execute(
        queries.get("chain_edges"),
        {"run_ids": [f.run_id for f in finals], "outcomes": [f.outcome for f in finals]},
    ).fetchall()
    if not edges:
        return []
    conn.execute(queries.get("lock_chains"), {"ids": sorted({e["downstream_id"] for e in edges})})
    direct = [e for e in edges if e["after_mode"] == "Any"]
    fan_in = [e for e in edges if e["after_mode"] == "All"]
    pairs = [(e["downstream_id"], e["upstream_run_id"]) for e in direct]
    if fan_in:
        columns = {
            "downstream_ids": [e["downstream_id"] for e in fan_in],
            "upstream_names": [e["upstream_name"] for e in fan_in],
            "upstream_run_ids": [e["upstream_run_id"] for e in fan_in],
        }
        conn.execute(queries.get("record_arrivals"), columns)
        ready = conn.execute(queries.get("fan_in_ready"), columns).fetchall()
        pairs += [(row["downstream_id"], row["upstream_run_id"]) for row in ready]
    chained = _insert(conn, pairs, now=now)
    consumed = [c for c in chained if c.definition_id in {e["downstream_id"] for e in fan_in}]
    if consumed:
        conn.execute(
            queries.get("consume_arrivals"),
            {
                "downstream_ids": [c.definition_id for c in consumed],
                "run_ids": [c.run_id for c in consumed],
            },
        )
    for item in chained:
        log.info(
            "run %s queued run %s of definition %s (%s)",
            item.upstream_run_id,
            item.run_id,
            item.definition_id,
            item.status,
        )
    return chained


def _insert(conn: Connection, pairs: list[tuple[UUID, int]], *, now: datetime) -> list[Chained]:
    if not pairs:
        return []
    rows = conn.execute(
        queries.get("insert_chained_runs"),
        {
            "downstream_ids": [d for d, _ in pairs],
            "upstream_run_ids": [u for _, u in pairs],
            "now": now,
        },
    ).fetchall()
    return [
        Chained(row["id"], row["definition_id"], row["upstream_run_id"], row["status"])
        for row in rows
    ]


def store(
    conn: Connection,
    definition_id: UUID,
    *,
    namespace: str,
    name: str,
    after: Sequence[Upstream],
) -> None:
    """Replace a definition's edges, rejecting a cycle. Runs in the caller's transaction
    (the upsert's), after the definition row is written."""
    if after:
        conn.execute(queries.get("lock_namespace_chains"), {"namespace": namespace})
        # A new statement after the lock: its snapshot includes every apply that held the
        # lock before us, so a cycle closed by two concurrent applies is seen by the second.
        rows = conn.execute(
            queries.get("namespace_edges"), {"namespace": namespace, "id": definition_id}
        ).fetchall()
        graph: dict[str, list[str]] = {}
        for row in rows:
            graph.setdefault(row["downstream"], []).append(row["upstream"])
        graph[name] = [item.scheduled_job for item in after]
        cycle = find_cycle(graph, name)
        if cycle is not None:
            raise CycleError(describe_cycle(cycle))
    conn.execute(queries.get("delete_dependencies"), {"id": definition_id})
    if after:
        conn.execute(
            queries.get("insert_dependencies"),
            {
                "id": definition_id,
                "names": [item.scheduled_job for item in after],
                "outcomes": [item.outcome for item in after],
            },
        )


def find_cycle(graph: dict[str, list[str]], start: str) -> list[str] | None:
    """A path start → … → start along "runs after" edges, or None. Depth-first with an
    explicit stack: a chain thousands of jobs long must not exhaust Python's recursion."""
    seen = {start}
    stack = [(start, iter(sorted(graph.get(start, []))))]
    while stack:
        _node, upstreams = stack[-1]
        upstream = next(upstreams, None)
        if upstream is None:
            stack.pop()
        elif upstream == start:
            return [item for item, _ in stack] + [start]
        elif upstream not in seen:
            seen.add(upstream)
            stack.append((upstream, iter(sorted(graph.get(upstream, [])))))
    return None


def describe_cycle(cycle: list[str]) -> str:
    shown = cycle if len(cycle) <= 12 else [*cycle[:6], f"… {len(cycle) - 11} more …", *cycle[-5:]]
    pairs = list(itertools.pairwise(cycle))
    steps = ", ".join(f"{a} runs after {b}" for a, b in pairs[:6])
    more = f", and {len(pairs) - 6} more" if len(pairs) > 6 else ""
    return (
        f"spec.after: {' → '.join(shown)} is a cycle ({steps}{more}); a chain must not lead"
        " back to itself: remove one of these edges"
    )


@dataclass(frozen=True)
class UpstreamState:
    scheduled_job: str
    outcome: str
    found: bool  # a live ScheduledJob of that name exists in the namespace


@dataclass(frozen=True)
class Triggered:
    """A run queued by an upstream run's final outcome."""

    upstream_run_id: int
    run_id: int
    scheduled_job: str
    status: str


@dataclass(frozen=True)
class Links:
    """A definition's place in the chain, both ways, for status and the CLI."""

    upstreams: list[UpstreamState]
    downstreams: list[str]


def links(conn: Connection, definition_id: UUID, *, namespace: str, name: str) -> Links:
    upstreams = [
        UpstreamState(row["upstream_name"], row["on_outcome"], row["found"])
        for row in conn.execute(queries.get("dependencies_of"), {"id": definition_id})
    ]
    downstreams = [
        row["name"]
        for row in conn.execute(
            queries.get("downstreams_of"), {"namespace": namespace, "name": name}
        )
    ]
    return Links(upstreams, downstreams)


def downstream_ids(conn: Connection, *, namespace: str, name: str) -> list[UUID]:
    """Live definitions that run after ``namespace/name`` (their status names it)."""
    rows = conn.execute(queries.get("downstreams_of"), {"namespace": namespace, "name": name})
    return [row["id"] for row in rows]


def triggered(conn: Connection, run_ids: Sequence[int]) -> dict[int, list[Triggered]]:
    """The runs each of ``run_ids`` queued downstream."""
    found: dict[int, list[Triggered]] = {}
    for row in conn.execute(queries.get("triggered_runs"), {"ids": list(run_ids)}):
        found.setdefault(row["upstream_run_id"], []).append(
            Triggered(row["upstream_run_id"], row["id"], row["name"], row["status"])
        )
    return found


def upstream_definitions(conn: Connection, run_ids: Sequence[int]) -> list[UUID]:
    """The definitions whose runs queued these chained runs."""
    rows = conn.execute(queries.get("upstream_definitions_of"), {"ids": list(run_ids)})
    return [row["id"] for row in rows]


@dataclass(frozen=True)
class UpstreamRun:
    run_id: int
    scheduled_job: str  # namespace/name
    status: str


def upstream_runs(conn: Connection, run_id: int) -> list[UpstreamRun]:
    """Every upstream run whose outcome queued this chained run, oldest first: one for
    afterMode Any, each upstream's arrival for fan-in (afterMode All)."""
    rows = conn.execute(queries.get("upstream_runs"), {"id": run_id})
    return [UpstreamRun(row["run_id"], row["name"], row["status"]) for row in rows]


def upstream_run_ids(conn: Connection, run_ids: Sequence[int]) -> dict[int, list[int]]:
    """For each chained run of ``run_ids``, the ids of its upstream runs (as
    :func:`upstream_runs`), oldest first, in one query."""
    found: dict[int, list[int]] = {}
    for row in conn.execute(queries.get("upstream_run_ids"), {"ids": list(run_ids)}):
        found.setdefault(row["run_id"], []).append(row["upstream_run_id"])
    return found
