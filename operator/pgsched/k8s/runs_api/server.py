"""The Run API's HTTPS server: discovery, ``get`` and ``list`` of runs (docs/runs-api.md).

Every request is checked in the same order, cheapest first: it came from the API
server's front proxy (401 otherwise, ``frontproxy``); discovery needs nothing more; data
needs the user the proxy names, allowed by RBAC to ``get``/``list`` runs in the namespace
(403 otherwise, a SubjectAccessReview, ``k8s.access``). The API server has authorized the
request already; asking again keeps a request that reached this port some other way
from ever seeing data. Reads run on a thread pool as large as the connection pool.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import ssl
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar, get_args

from aiohttp import web

from pgsched.db import clock
from pgsched.engine.models import RunStatus
from pgsched.k8s import names
from pgsched.k8s.access import Permission, SubjectReviews, Unavailable, User
from pgsched.k8s.runs_api import resources
from pgsched.k8s.runs_api.actions import (
    EXAMPLE_BODY,
    MAX_BODY_BYTES,
    Actions,
    Conflict,
    Invalid,
    Missing,
)
from pgsched.k8s.runs_api.frontproxy import FrontProxy, Unauthenticated
from pgsched.k8s.runs_api.resources import Obj
from pgsched.k8s.runs_api.store import RunReader
from pgsched.runapi.threaded import ThreadedServer

log = logging.getLogger(__name__)

T = TypeVar("T")

RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)

BASE = f"/apis/{resources.GROUP}/{resources.VERSION}"
# Lists come in pages of at most this many runs (kubectl follows metadata.continue):
# a history has no end, and no request may read it whole.
MAX_PAGE = 500
_CONTINUE_PREFIX = "runs.v1:"


class Refused(Exception):
    """A request answered with a Status: HTTP code, reason and message."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason = code, reason


class RunsApi:
    def __init__(
        self,
        reader: RunReader,
        actions: Actions,
        front_proxy: FrontProxy,
        reviews: SubjectReviews,
        executor: ThreadPoolExecutor,
        now: Callable[[], datetime] = clock.local,
    ) -> None:
        self._reader = reader
        self._actions = actions
        self._front_proxy = front_proxy
        self._reviews = reviews
        self._executor = executor
        self._now = now

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._refusals], client_max_size=MAX_BODY_BYTES)
        app.router.add_get("/healthz", _ok)
        app.router.add_get("/livez", _ok)
        app.router.add_get("/readyz", _ok)
        app.router.add_get("/apis", self._discovery(resources.group_list))
        app.router.add_get(f"/apis/{resources.GROUP}", self._discovery(resources.group))
        app.router.add_get(BASE, self._discovery(resources.resource_list))
        app.router.add_get(f"{BASE}/runs", self._list)
        app.router.add_get(f"{BASE}/namespaces/{{namespace}}/runs", self._list)
        app.router.add_get(f"{BASE}/namespaces/{{namespace}}/runs/{{name}}", self._get)
        app.router.add_post(f"{BASE}/namespaces/{{namespace}}/runs", self._create)
        app.router.add_delete(f"{BASE}/namespaces/{{namespace}}/runs/{{name}}", self._delete)
        app.router.add_route("*", "/{tail:.*}", self._unserved)
        return app

    @web.middleware
    async def _refusals(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            return await handler(request)
        except Refused as refused:
            return _status(refused.code, refused.reason, str(refused))
        except Unauthenticated as error:
            return _status(401, "Unauthorized", str(error))
        except Unavailable as error:
            log.warning("Run API: %s", error)
            return _status(503, "ServiceUnavailable", f"cannot check access now: {error}")
        except Invalid as invalid:
            return _invalid(invalid)
        except Conflict as conflict:
            return _status(409, "Conflict", str(conflict))
        except Missing as missing:
            return _status(404, "NotFound", _not_found(str(missing)))
        except web.HTTPRequestEntityTooLarge:
            return _status(413, "RequestEntityTooLarge", f"a Run is at most {MAX_BODY_BYTES} bytes")

    def _discovery(self, document: Callable[[], Obj]) -> Callable[[web.Request], Awaitable[Any]]:
        async def answer(request: web.Request) -> web.Response:
            self._proxied(request)
            if "apidiscovery.k8s.io" in request.headers.get("Accept", ""):
                # Aggregated discovery is not served: the API server then asks each
                # group-version the classic way.
                return _status(406, "NotAcceptable", "aggregated discovery is not served")
            return web.json_response(document())

        return answer

    async def _list(self, request: web.Request) -> web.Response:
        user = self._user(request)
        if request.query.get("watch") in ("1", "true"):
            raise Refused(405, "MethodNotAllowed", "watching runs is not served yet")
        namespace = request.match_info.get("namespace")
        scheduled_job = _scheduled_job(request.query.get("labelSelector", ""))
        statuses, name = _fields(request.query.get("fieldSelector", ""))
        limit = _limit(request.query.get("limit", ""))
        before = _before(request.query.get("continue", ""))
        namespaces = await self._call(lambda: self._listable(user, namespace))
        if name is not None:
            # metadata.name=...: one run at most, the one that name names.
            found = await self._call(lambda: self._named(namespaces, name))
            page_runs = [item for item in found if not statuses or item.run.status in statuses]
            next_before = None
        else:
            page = await self._call(
                lambda: self._reader.page(
                    namespaces=namespaces,
                    scheduled_job=scheduled_job,
                    statuses=statuses,
                    before=before,
                    limit=limit,
                )
            )
            page_runs, next_before = page.runs, page.next_before
        token = _continue(next_before)
        if _wants_table(request):
            return self._table(request, page_runs, token)
        items = [resources.run_object(item) for item in page_runs]
        return web.json_response(resources.run_list(items, token))

    async def _get(self, request: web.Request) -> web.Response:
        user = self._user(request)
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        await self._call(lambda: self._require(user, namespace, "get"))
        found = await self._call(lambda: self._reader.named(namespace, name))
        if found is None:
            raise Missing(name)
        if _wants_table(request):
            return self._table(request, [found], None)
        return web.json_response(resources.run_object(found))

    async def _create(self, request: web.Request) -> web.Response:
        """run-now: 201 with the new run, or 200 with the first run of that name."""
        user = self._user(request)
        namespace = request.match_info["namespace"]
        await self._call(lambda: self._require(user, namespace, "create"))
        if request.query.get("dryRun"):
            raise Refused(400, "BadRequest", "dry runs of a Run are not served yet")
        try:
            body = await request.json()
        except ValueError:
            raise Refused(400, "BadRequest", f"the body is not JSON: {EXAMPLE_BODY}") from None
        found, created = await self._call(lambda: self._actions.create(namespace, body, user))
        return web.json_response(resources.run_object(found), status=201 if created else 200)

    async def _delete(self, request: web.Request) -> web.Response:
        """cancel. Answered with a Status naming the cancellation, not the Run: kubectl
        waits after a delete until the object it was answered with is gone (or another
        of its name has a different uid), and a Run never goes (it is history). The run
        as it is after the cancel is what ``get`` shows (CANCELLED, or asked to stop)."""
        user = self._user(request)
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        await self._call(lambda: self._require(user, namespace, "delete"))
        found = await self._call(lambda: self._actions.cancel(namespace, name, user))
        body = resources.status(
            200,
            "",
            f"run {found.name} cancelled ({found.run.status}; get it to follow it)",
            details={
                "name": found.name,
                "group": resources.GROUP,
                "kind": resources.PLURAL,
                "uid": resources.cancellation_uid(found.run.id),
            },
        )
        return web.json_response(body)

    def _table(
        self, request: web.Request, found: list[resources.StoredRun], token: str | None
    ) -> web.Response:
        """The Table kubectl asks for, with the objects ``includeObject`` asks (default:
        their metadata)."""
        objects = request.query.get("includeObject", "Metadata")
        return web.json_response(
            resources.table(found, now=self._now(), continue_token=token, objects=objects)
        )

    async def _unserved(self, request: web.Request) -> web.Response:
        self._proxied(request)
        if request.method != "GET" and request.path.startswith(f"{BASE}/"):
            raise Refused(
                405,
                "MethodNotAllowed",
                f"runs support get, list, create and delete, not {request.method}",
            )
        raise Refused(404, "NotFound", f"the Run API serves no {request.path}")

    # -- who, and may they ---------------------------------------------------------------

    def _proxied(self, request: web.Request) -> None:
        transport = request.transport
        certificate = transport.get_extra_info("peercert") if transport is not None else None
        self._front_proxy.proxied(certificate)

    def _user(self, request: web.Request) -> User:
        self._proxied(request)
        user = self._front_proxy.user(request.headers)
        if user is None:
            raise Unauthenticated("the front proxy named no user")
        return user

    def _require(self, user: User, namespace: str, verb: str) -> None:
        if not self._reviews.allows(user, namespace, _permission(verb)):
            raise Refused(403, "Forbidden", _forbidden(user, verb, namespace))

    def _listable(self, user: User, namespace: str | None) -> list[str] | None:
        """The namespaces whose runs ``user`` may list: ``namespace`` (or 403), or, for a
        list across namespaces, all (None) if they may list runs cluster-wide, else each
        namespace with ScheduledJobs where they may."""
        if namespace is not None:
            self._require(user, namespace, "list")
            return [namespace]
        if self._reviews.allows(user, "", _permission("list")):
            return None
        return [
            each
            for each in self._reader.namespaces()
            if self._reviews.allows(user, each, _permission("list"))
        ]

    def _named(self, namespaces: list[str] | None, name: str) -> list[resources.StoredRun]:
        candidates = namespaces if namespaces is not None else self._reader.namespaces()
        found = [self._reader.named(namespace, name) for namespace in candidates]
        return [item for item in found if item is not None]

    async def _call(self, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)


def _permission(verb: str) -> Permission:
    return Permission(resources.GROUP, resources.PLURAL, verb=verb)


def _forbidden(user: User, verb: str, namespace: str) -> str:
    # The API server's own words, so a refusal reads the same from either.
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    return (
        f'runs.{resources.GROUP} is forbidden: User "{user.name}" cannot {verb} resource'
        f' "runs" in API group "{resources.GROUP}"{where}'
    )


# -- the query's parameters ------------------------------------------------------------------


def _scheduled_job(selector: str) -> str | None:
    """``-l pgsched.dev/scheduledjob=NAME`` (or ``==``): the one label runs carry."""
    if not selector:
        return None
    example = f"-l {names.LABEL_SCHEDULED_JOB}=nightly-export"
    key, operator, value = _term(selector, "labelSelector", example)
    if key != names.LABEL_SCHEDULED_JOB or operator == "!=" or "," in value:
        raise Refused(
            400,
            "BadRequest",
            f"labelSelector {selector!r}: runs carry one label, {names.LABEL_SCHEDULED_JOB};"
            f" select on it, e.g. {example}",
        )
    return value


def _fields(selector: str) -> tuple[list[str] | None, str | None]:
    """``status.phase=FAILED`` and ``metadata.name=...``, comma-separated."""
    statuses: list[str] | None = None
    name: str | None = None
    example = "--field-selector status.phase=FAILED"
    for term in filter(None, selector.split(",")):
        key, operator, value = _term(term, "fieldSelector", example)
        if key == "status.phase" and operator != "!=" and value in RUN_STATUSES:
            statuses = [value]
        elif key == "metadata.name" and operator != "!=":
            name = value
        else:
            raise Refused(
                400,
                "BadRequest",
                f"fieldSelector {term!r}: runs are selected by status.phase (one of"
                f" {', '.join(RUN_STATUSES)}) or metadata.name, e.g. {example}",
            )
    return statuses, name


def _term(term: str, what: str, example: str) -> tuple[str, str, str]:
    for operator in ("==", "!=", "="):
        key, found, value = term.partition(operator)
        if found:
            return key.strip(), operator, value.strip()
    raise Refused(
        400,
        "BadRequest",
        f"{what} {term!r}: only key=value is understood, e.g. {example}",
    )


def _limit(text: str) -> int:
    if not text or text == "0":
        return MAX_PAGE
    if not text.isdigit():
        raise Refused(400, "BadRequest", f"limit {text!r}: a whole number, e.g. limit=50")
    return min(int(text), MAX_PAGE)


def _continue(before: int | None) -> str | None:
    if before is None:
        return None
    return base64.urlsafe_b64encode(f"{_CONTINUE_PREFIX}{before}".encode()).decode()


def _before(token: str) -> int | None:
    if not token:
        return None
    try:
        text = base64.urlsafe_b64decode(token.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        text = ""
    tail = text.removeprefix(_CONTINUE_PREFIX)
    if not text.startswith(_CONTINUE_PREFIX) or not tail.isdigit() or len(tail) > 18:
        raise Refused(
            400, "BadRequest", "continue: not a token this server gave; list again from the start"
        )
    return int(tail)


def _wants_table(request: web.Request) -> bool:
    return "as=Table" in request.headers.get("Accept", "")


def _not_found(name: str) -> str:
    return f'runs.{resources.GROUP} "{name}" not found'


def _invalid(invalid: Invalid) -> web.Response:
    """422 as the API server words it: kubectl prints the message, tools read the causes."""
    message = f'{resources.KIND}.{resources.GROUP} "{invalid.name}" is invalid: {invalid}'
    body = resources.status(
        422,
        "Invalid",
        message,
        details={
            "name": invalid.name,
            "group": resources.GROUP,
            "kind": resources.KIND,
            "causes": [
                {"reason": "FieldValueInvalid", "message": cause.message, "field": cause.field}
                for cause in invalid.causes
            ],
        },
    )
    return web.json_response(body, status=422)


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(resources.status(code, reason, message), status=code)


async def _ok(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


class RunsApiServer(ThreadedServer):
    what = "Run API"

    def __init__(self, host: str, port: int, tls: ssl.SSLContext, api: RunsApi) -> None:
        super().__init__(host, port, tls, thread_name="pgsched-runs-api")
        self._api = api

    def _application(self) -> web.Application:
        return self._api.app()
