"""The run API's HTTPS server (docs/run-api.md), on an event loop of its own thread.

Every request goes through the same gate, cheapest check first, so a hostile one costs as
little as possible: its size (413), its lease's MAC in memory (401, charged to the
unverified budget), its namespace's rate (429), then a database call slot of that
namespace (429). Database calls run on a thread pool as large as the API's connection
pool; a cancel long poll gives its slot back while it waits (``stops``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar, get_args
from uuid import UUID

from aiohttp import web

from pgsched import metrics
from pgsched.engine.lease import FinalStatus, Lease
from pgsched.runapi import limits, protocol
from pgsched.runapi.leases import LeaseKey
from pgsched.runapi.limits import Budgets, Refusal
from pgsched.runapi.stops import Stops
from pgsched.runapi.store import RunStore, StoreUnavailable
from pgsched.runapi.threaded import ThreadedServer

log = logging.getLogger(__name__)

T = TypeVar("T")

_STATUSES = frozenset(get_args(FinalStatus))
_HINTS = frozenset({"retry", "never", None})
# The run row bounds these; longer texts are cut here rather than refused (a pod's error
# text is what the user will read).
MAX_REASON_CHARS = 200
MAX_ERROR_CHARS = 8000


class Refused(Exception):
    """A request answered with an error status and a message."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


@dataclass(frozen=True)
class Caller:
    """A request whose lease checked out: the run, and whose budget it spends."""

    lease: Lease
    namespace: str


class RunApi:
    """The request handlers; the server (:class:`RunApiServer`) owns the loop they run on."""

    def __init__(
        self,
        store: RunStore,
        key: LeaseKey,
        budgets: Budgets,
        stops: Stops,
        executor: ThreadPoolExecutor,
    ) -> None:
        self._store = store
        self._key = key
        self._budgets = budgets
        self._stops = stops
        self._executor = executor

    def app(self) -> web.Application:
        app = web.Application(client_max_size=protocol.MAX_BODY_BYTES)
        routes = (
            ("POST", protocol.HEARTBEAT, self.heartbeat),
            ("GET", protocol.LEASE, self.lease_state),
            ("POST", protocol.WORKLOAD_ENDED, self.workload_ended),
            ("POST", protocol.FINISH, self.finish),
        )
        for method, path, handler in routes:
            app.router.add_route(method, path, _answering(handler.__name__, handler))
        return app

    async def heartbeat(self, request: web.Request) -> dict[str, Any]:
        caller = await self._caller(request)
        state = await self._call(caller, lambda: self._store.heartbeat(caller.lease))
        return {"state": state}

    async def lease_state(self, request: web.Request) -> dict[str, Any]:
        known = request.query.get("state")
        wait = _seconds(request.query.get("wait", "0"))
        caller = await self._caller(request)
        if not known or wait <= 0:
            return {"state": await self._call(caller, lambda: self._store.state(caller.lease))}
        refusal = self._budgets.start_wait(caller.namespace)
        if refusal is not None:
            raise _too_many(caller.namespace, refusal)
        run_id = caller.lease.run_id
        try:
            # Registered before the read: a change between the two still wakes us.
            changed = self._stops.register(run_id)
            state = await self._call(caller, lambda: self._store.state(caller.lease))
            if state != known:
                return {"state": state}
            try:
                await asyncio.wait_for(changed, wait)
            except TimeoutError:
                return {"state": state}
            return {"state": await self._call(caller, lambda: self._store.state(caller.lease))}
        finally:
            self._stops.unregister(run_id, changed)
            self._budgets.end_wait(caller.namespace)

    async def workload_ended(self, request: web.Request) -> dict[str, Any]:
        caller = await self._caller(request)
        marked = await self._call(caller, lambda: self._store.workload_ended(caller.lease))
        return {"marked": marked}

    async def finish(self, request: web.Request) -> dict[str, Any]:
        caller = await self._caller(request)
        body = await _json_body(request)
        status: FinalStatus = body.get("status")  # type: ignore[assignment]  # checked next
        if status not in _STATUSES:
            raise Refused(
                400,
                f"status: must be one of {', '.join(sorted(_STATUSES))}, not {status!r}"
                ' (example: {"status": "COMPLETED"})',
            )
        reason, error = (
            _text(body, "reason", MAX_REASON_CHARS),
            _text(body, "error", MAX_ERROR_CHARS),
        )
        exit_code = body.get("exitCode")
        if exit_code is not None and (
            not isinstance(exit_code, int)
            or isinstance(exit_code, bool)
            or not 0 <= exit_code < 256
        ):
            raise Refused(400, f"exitCode: must be an integer from 0 to 255, not {exit_code!r}")
        hint = body.get("retryHint")
        if hint not in _HINTS:
            raise Refused(400, f'retryHint: must be "retry" or "never", not {hint!r}')
        finished = await self._call(
            caller,
            lambda: self._store.finish(
                caller.lease,
                status,
                reason=reason,
                error=error,
                exit_code=exit_code,
                retry_hint=hint,
            ),
        )
        return {"finished": finished}

    async def _caller(self, request: web.Request) -> Caller:
        """The request's run and lease, checked; its namespace's rate spent."""
        run_id = _run_id(request.match_info["run"])
        run_lease = _bearer(request, run_id)
        if run_lease is None or not self._key.genuine(run_id, run_lease.token):
            refusal = self._budgets.admit(limits.UNVERIFIED)
            if refusal is not None:
                raise _too_many(limits.UNVERIFIED, refusal)
            raise Refused(
                401,
                "the request must carry this run's lease: Authorization: Bearer <the"
                " PGSCHED_LEASE_TOKEN of the run's pod>",
            )
        namespace = self._store.known_namespace(run_id)
        if namespace is None:  # the run's first request: one lookup, on the pool
            namespace = await self._loop_call(lambda: self._store.namespace_of(run_id))
        caller = Caller(run_lease, namespace if namespace is not None else limits.UNVERIFIED)
        refusal = self._budgets.admit(caller.namespace)
        if refusal is not None:
            raise _too_many(caller.namespace, refusal)
        return caller

    async def _call(self, caller: Caller, operation: Callable[[], T]) -> T:
        """``operation`` on the database thread pool, in one of the namespace's slots."""
        refusal = await self._budgets.start_call(caller.namespace)
        if refusal is not None:
            raise _too_many(caller.namespace, refusal)
        try:
            return await self._loop_call(operation)
        finally:
            self._budgets.end_call(caller.namespace)

    async def _loop_call(self, operation: Callable[[], T]) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, operation)
        except StoreUnavailable as error:
            raise Refused(503, f"the database did not answer: {error}; retry", 1.0) from error


def _answering(
    name: str,
    handler: Callable[[web.Request], Awaitable[dict[str, Any]]],
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def answer(request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        response = await _answer(request, handler)
        metrics.RUN_API_REQUESTS.labels(name, str(response.status)).observe(
            time.monotonic() - started
        )
        if response.status == 429:
            _hold_back(request, float(response.headers.get("Retry-After", "1")))
        return response

    return answer


async def _answer(
    request: web.Request, handler: Callable[[web.Request], Awaitable[dict[str, Any]]]
) -> web.StreamResponse:
    length = request.content_length
    if length is not None and length > protocol.MAX_BODY_BYTES:
        return _error(413, f"the body may have at most {protocol.MAX_BODY_BYTES} bytes")
    try:
        return web.json_response(await handler(request))
    except Refused as refused:
        return _error(refused.status, str(refused), refused.retry_after)
    except web.HTTPRequestEntityTooLarge:
        return _error(413, f"the body may have at most {protocol.MAX_BODY_BYTES} bytes")


def _hold_back(request: web.Request, seconds: float) -> None:
    """Read nothing more from this connection for ``seconds`` (its Retry-After) and up to
    half as long again. A client over its budget that goes on sending on the same
    connection then waits in its own socket buffers, at no cost to the server, instead of
    costing the one event loop a decryption, a parse and a refusal per request, the time
    other namespaces' requests wait for (bench ``run_api_flood``). A pod that honours
    Retry-After loses nothing (the run API's client opens a new connection after a 429)."""
    transport = request.transport
    if transport is None or transport.is_closing():
        return
    transport.pause_reading()
    # Spread over up to half as long again: connections refused together would otherwise
    # come back together, and a neighbour's requests meet them in one burst.
    later = seconds * random.uniform(1.0, 1.5)
    asyncio.get_running_loop().call_later(later, _resume_reading, transport)


def _resume_reading(transport: asyncio.BaseTransport) -> None:
    if not transport.is_closing() and isinstance(transport, asyncio.ReadTransport):
        transport.resume_reading()


def _error(status: int, message: str, retry_after: float | None = None) -> web.Response:
    headers = {} if retry_after is None else {"Retry-After": str(max(1, round(retry_after)))}
    return web.json_response({"error": message}, status=status, headers=headers)


def _too_many(namespace: str, refusal: Refusal) -> Refused:
    metrics.RUN_API_REFUSED.labels(namespace, refusal.why).inc()
    return Refused(429, f"{refusal.reason}; retry later", refusal.retry_after_seconds)


def _run_id(text: str) -> int:
    if not text.isdigit() or len(text) > 18:
        raise Refused(404, f"no run {text!r}: a run id is a positive integer")
    return int(text)


def _bearer(request: web.Request, run_id: int) -> Lease | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    try:
        return Lease(run_id, UUID(token.strip()))
    except ValueError:
        return None


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise Refused(
            400, f"wait: must be a number of seconds, not {text!r} (example: wait=25)"
        ) from None
    if seconds != seconds:  # NaN
        raise Refused(400, "wait: must be a number of seconds (example: wait=25)")
    return min(max(seconds, 0.0), protocol.MAX_WAIT_SECONDS)


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError) as error:
        raise Refused(400, f"the body must be a JSON object: {error}") from None
    if not isinstance(body, dict):
        raise Refused(400, 'the body must be a JSON object (example: {"status": "COMPLETED"})')
    return body


def _text(body: dict[str, Any], name: str, limit: int) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise Refused(400, f"{name}: must be a string, not {type(value).__name__}")
    value = value.replace("\x00", "")  # PostgreSQL text cannot hold NUL
    return value if len(value) <= limit else value[: limit - 15] + "\n[... truncated]"


class RunApiServer(ThreadedServer):
    """The run API's server; its cancel long polls (``Stops``) live and end with it."""

    what = "run API"

    def __init__(
        self,
        host: str,
        port: int,
        tls: ssl.SSLContext,
        build: Callable[[asyncio.AbstractEventLoop], tuple[RunApi, Stops]],
    ) -> None:
        super().__init__(host, port, tls, thread_name="pgsched-run-api")
        self._build = build
        self._stops: Stops | None = None

    def _application(self) -> web.Application:
        api, self._stops = self._build(self._loop)
        self._stops.start()
        return api.app()

    def _healthy(self) -> bool:
        return self._stops is None or self._stops.alive()

    def _before_shutdown(self) -> None:
        """Answer every open long poll (each reads its state once more) before requests in
        flight are let finish: a pod's poll gets an answer, not a reset connection."""
        if self._stops is not None:
            self._stops.wake_all()

    def _after_loop(self) -> None:
        if self._stops is not None:
            self._stops.stop(timeout=2.0)
