"""Creating a Run (run-now) and deleting one (cancel), as the Run API's user asked.

``create``: the body's ``metadata.name`` (or ``generateName`` and a random suffix) is the
request's idempotency key, so creating the same name twice gives the first run, never a
second; ``spec.scheduledJob`` names a live ScheduledJob of the namespace and
``spec.parameters`` are checked against its declarations, every problem named by its
field with a value that would do. ``delete`` cancels: a queued run is CANCELLED, a running
one asked to stop with the ScheduledJob's grace (cooperative, as every cancel); the run
stays in the history, recorded as cancelled by that user.
"""

from __future__ import annotations

import re
import secrets
import string
from dataclasses import dataclass
from typing import Any

from psycopg_pool import ConnectionPool

from pgsched.db import queries
from pgsched.db.connection import Connection
from pgsched.engine import definitions, parameters, runs
from pgsched.k8s.access import User
from pgsched.k8s.runs_api import resources
from pgsched.k8s.runs_api.resources import TOKEN_PREFIX, StoredRun
from pgsched.k8s.runs_api.store import RunReader

MAX_BODY_BYTES = 64 * 1024
# A DNS subdomain, as Kubernetes names most objects; what request tokens can hold.
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_SUFFIX_LETTERS = string.ascii_lowercase  # never digits: "<stem>-<digits>" names runs by id
EXAMPLE_BODY = (
    "apiVersion: runs.pgsched.dev/v1alpha1, kind: Run,"
    " metadata: {generateName: nightly-}, spec: {scheduledJob: nightly}"
)


@dataclass(frozen=True)
class Cause:
    field: str
    message: str


class Invalid(Exception):
    """422: the Run cannot be created as given; each cause names its field."""

    def __init__(self, name: str, causes: list[Cause]) -> None:
        super().__init__("; ".join(f"{cause.field}: {cause.message}" for cause in causes))
        self.name, self.causes = name, causes


class Conflict(Exception):
    """409: the request cannot be carried out as things stand (the message says why)."""


class Missing(Exception):
    """404: no such run in the namespace."""


class Actions:
    def __init__(self, pool: ConnectionPool[Any], reader: RunReader) -> None:
        self._pool = pool
        self._reader = reader

    def create(
        self, namespace: str, body: Any, user: User, *, dry_run: bool = False
    ) -> tuple[StoredRun, bool]:
        """The run the body asks for, and whether it is new (False: the name's first).
        ``dry_run``: everything is checked and the run queued, in a transaction rolled
        back: the answer is the run a create would have queued, and nothing is."""
        name, scheduled_job, values = _parsed(namespace, body)
        with self._pool.connection() as conn:
            _refuse_run_id_names(conn, namespace, name)
        existing = self._reader.named(namespace, name)
        if existing is not None:
            return self._same_request(existing, scheduled_job), False
        with self._pool.connection() as conn:
            definition = definitions.find(conn, namespace, scheduled_job)
            if definition is None:
                cause = Cause(
                    "spec.scheduledJob",
                    f"no ScheduledJob {scheduled_job!r} in namespace {namespace}"
                    f" (kubectl get scheduledjobs -n {namespace})",
                )
                raise Invalid(name, [cause])
            _check_values(name, definition.spec, values)
            with conn.transaction(force_rollback=dry_run):
                try:
                    enqueued = runs.run_now(
                        conn,
                        definition.id,
                        token=TOKEN_PREFIX + name,
                        requested_by=user.name,
                        parameters=values,
                    )
                except runs.UnknownDefinition:
                    raise Conflict(f"ScheduledJob {scheduled_job} was deleted meanwhile") from None
        if dry_run:
            return StoredRun(namespace, scheduled_job, None, enqueued.run, user.name), True
        found = self._reader.named(namespace, name)
        return (found or StoredRun(namespace, scheduled_job, None, enqueued.run)), enqueued.created

    def cancel(self, namespace: str, name: str, user: User, *, dry_run: bool = False) -> StoredRun:
        """Ask the run to stop; ``dry_run``: only check that it could be."""
        found = self._reader.named(namespace, name)
        if found is None:
            raise Missing(name)
        if found.run.is_terminal:
            raise Conflict(
                f"run {name} already ended ({found.run.status}): a Run stays in the history;"
                " delete cancels a queued or running run"
            )
        if dry_run:
            return found
        with self._pool.connection() as conn:
            runs.cancel_run(
                conn,
                found.run.id,
                by=f"{runs.BY_RUN_API} ({user.name})",
                why="cancelled by kubectl delete run",
            )
        again = self._reader.named(namespace, name)
        return again if again is not None else found

    @staticmethod
    def _same_request(existing: StoredRun, scheduled_job: str) -> StoredRun:
        if existing.scheduled_job != scheduled_job:
            raise Conflict(
                f"run {existing.name} exists already, of ScheduledJob"
                f" {existing.scheduled_job}: a name is one request; choose another"
            )
        return existing


def _parsed(namespace: str, body: Any) -> tuple[str, str, dict[str, str]]:
    if not isinstance(body, dict):
        raise Invalid("", [Cause("(body)", f"must be a Run object, e.g. {EXAMPLE_BODY}")])
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    name = metadata.get("name") if isinstance(metadata, dict) else None
    generate = metadata.get("generateName") if isinstance(metadata, dict) else None
    if not name and isinstance(generate, str) and generate:
        name = generate + "".join(secrets.choice(_SUFFIX_LETTERS) for _ in range(5))
    shown = name if isinstance(name, str) else ""
    causes: list[Cause] = []
    if body.get("apiVersion", resources.API_VERSION) != resources.API_VERSION:
        causes.append(Cause("apiVersion", f"must be {resources.API_VERSION}"))
    if body.get("kind", resources.KIND) != resources.KIND:
        causes.append(Cause("kind", f"must be {resources.KIND}"))
    if not isinstance(name, str) or not _NAME.match(name):
        causes.append(
            Cause(
                "metadata.name",
                f"{_shown(name)} is not a name of lowercase letters, digits, '-' and '.' (at"
                " most 253, starting and ending with a letter or digit); give metadata.name,"
                " e.g. nightly-rerun-1, or metadata.generateName, e.g. nightly-",
            )
        )
    if isinstance(metadata, dict) and metadata.get("namespace") not in (None, namespace):
        causes.append(
            Cause(
                "metadata.namespace",
                f"{_shown(metadata.get('namespace'))} is not the namespace of the request"
                f" ({namespace})",
            )
        )
    scheduled_job = spec.get("scheduledJob") if isinstance(spec, dict) else None
    if not isinstance(scheduled_job, str) or not scheduled_job:
        causes.append(
            Cause("spec.scheduledJob", "is required: the ScheduledJob to run, e.g. nightly")
        )
    values = spec.get("parameters", {}) if isinstance(spec, dict) else {}
    if not isinstance(values, dict):
        causes.append(
            Cause("spec.parameters", "must be a map of names to values, e.g. {region: eu}")
        )
    if causes:
        raise Invalid(shown, causes)
    return str(name), str(scheduled_job), dict(values)


def _refuse_run_id_names(conn: Connection, namespace: str, name: str) -> None:
    """``<scheduledjob>-<digits>`` names a run by id (its Job's name): never a created one,
    or a later run of that id would share it."""
    stem, _, tail = name.rpartition("-")
    if not tail.isdigit():
        return
    stems = {
        row["name"]
        for row in conn.execute(
            queries.get("runs_api_scheduledjob_names"), {"namespace": namespace}
        ).fetchall()
    }
    if stem in stems:
        cause = Cause(
            "metadata.name",
            f"{name!r} is how runs of ScheduledJob {stem} are named by id"
            f" (<scheduledjob>-<run id>); choose another, e.g. {stem}-manual",
        )
        raise Invalid(name, [cause])


def _check_values(name: str, spec: dict[str, Any], values: dict[str, Any]) -> None:
    declared = parameters.declared(spec)
    problems = parameters.check(declared, values)
    if problems:
        example = ", ".join(f"{k}: {v}" for k, v in parameters.example(declared).items())
        raise Invalid(
            name,
            [
                Cause(
                    f"spec.parameters.{problem.name}",
                    f"{problem.message} (e.g. {{{example}}})",
                )
                for problem in problems
            ],
        )


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
