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
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

from aiohttp import web

from pgsched.db import clock
from pgsched.k8s.access import Permission, SubjectReviews, Unavailable, User
from pgsched.k8s.runs_api import openapi, params, resources, watching
from pgsched.k8s.runs_api.actions import (
    EXAMPLE_BODY,
    MAX_BODY_BYTES,
    Actions,
    Conflict,
    Invalid,
    Missing,
)
from pgsched.k8s.runs_api.frontproxy import FrontProxy, Unauthenticated
from pgsched.k8s.runs_api.params import Refused
from pgsched.k8s.runs_api.resources import Obj
from pgsched.k8s.runs_api.store import RunReader, Versions
from pgsched.runapi.threaded import ThreadedServer

log = logging.getLogger(__name__)

T = TypeVar("T")


BASE = f"/apis/{resources.GROUP}/{resources.VERSION}"
# Watches one replica serves at once; more are 429 (a watch holds a poll on the database).
MAX_WATCHES = 100


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
        self._watches = 0

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._refusals], client_max_size=MAX_BODY_BYTES)
        app.router.add_get("/healthz", _ok)
        app.router.add_get("/livez", _ok)
        app.router.add_get("/readyz", _ok)
        app.router.add_get("/apis", self._discovery(resources.group_list))
        app.router.add_get(f"/apis/{resources.GROUP}", self._discovery(resources.group))
        app.router.add_get(BASE, self._discovery(resources.resource_list))
        app.router.add_get("/openapi/v3", self._discovery(openapi.discovery))
        app.router.add_get(f"/openapi/v3/{openapi.PATH}", self._openapi)
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

    async def _openapi(self, request: web.Request) -> web.Response:
        """The document ``kubectl explain run`` reads (``openapi``); its URL's hash changes
        with it, so it may be cached for good."""
        self._proxied(request)
        return web.Response(
            body=openapi.document(),
            content_type="application/json",
            headers={"Cache-Control": "public, immutable"} if "hash" in request.query else {},
        )

    async def _list(self, request: web.Request) -> web.StreamResponse:
        user = self._user(request)
        watch = request.query.get("watch") in ("1", "true")
        namespace = request.match_info.get("namespace")
        scheduled_job = params.scheduled_job(request.query.get("labelSelector", ""))
        selected = params.fields(request.query.get("fieldSelector", ""))
        verb = "watch" if watch else "list"
        if watch:
            namespaces = await self._call(lambda: self._listable(user, namespace, verb))
            versions = await self._call(self._reader.versions)  # before the changes
            return await self._watch(request, namespaces, scheduled_job, selected, versions)

        def read() -> tuple[Versions, list[resources.StoredRun], int | None]:
            # One trip to the worker threads for the whole page (each costs the event
            # loop a hand-off and a wake-up, and a page's time is mostly waiting).
            namespaces = self._listable(user, namespace, verb)  # 403 before any 400
            limit = params.limit(request.query.get("limit", ""))
            before = params.before(request.query.get("continue", ""))
            versions = self._reader.versions()  # before the rows: none missed
            if selected.name is not None or selected.run_id is not None:
                # metadata.name or status.id: one run at most.
                found = self._one(namespaces, selected)
                return (
                    versions,
                    [item for item in found if watching.selected(item, scheduled_job, selected)],
                    None,
                )
            page = self._reader.page(
                namespaces=namespaces,
                scheduled_job=scheduled_job,
                statuses=selected.statuses,
                before=before,
                limit=limit,
            )
            return versions, page.runs, page.next_before

        versions, page_runs, next_before = await self._call(read)
        token = params.continue_token(next_before)
        version = str(versions.current)
        if _wants_table(request):
            return self._table(request, page_runs, token, version)
        items = [resources.run_object(item) for item in page_runs]
        return web.json_response(resources.run_list(items, token, version))

    async def _watch(
        self,
        request: web.Request,
        namespaces: list[str] | None,
        scheduled_job: str | None,
        selected: params.Fields,
        versions: Versions,
    ) -> web.StreamResponse:
        after = params.resource_version(request.query.get("resourceVersion", ""), versions)
        if self._watches >= MAX_WATCHES:
            raise Refused(
                429, "TooManyRequests", f"this replica serves {MAX_WATCHES} watches already"
            )
        watch = watching.Watch(
            namespaces=namespaces,
            scheduled_job=scheduled_job,
            fields=selected,
            after=after,
            seconds=watching.seconds(request.query.get("timeoutSeconds", "")),
            bookmarks=request.query.get("allowWatchBookmarks") in ("1", "true"),
            objects=request.query.get("includeObject", "Metadata")
            if _wants_table(request)
            else None,
        )
        self._watches += 1
        try:
            return await watching.stream(request, watch, self._reader, self._call, self._now)
        finally:
            self._watches -= 1

    async def _get(self, request: web.Request) -> web.Response:
        user = self._user(request)
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        await self._call(lambda: self._require(user, namespace, "get"))
        found = await self._call(lambda: self._reader.named(namespace, name))
        if found is None:
            raise Missing(name)
        if _wants_table(request):
            return self._table(request, [found], None)
        body = resources.run_object(found)
        described = await self._call(lambda: self._reader.described(found.run.id))
        if described is not None:
            body["status"]["description"] = described
        return web.json_response(body)

    async def _create(self, request: web.Request) -> web.Response:
        """run-now: 201 with the new run, or 200 with the first run of that name."""
        user = self._user(request)
        namespace = request.match_info["namespace"]
        await self._call(lambda: self._require(user, namespace, "create"))
        dry_run = params.dry_run(request.query.get("dryRun", ""))
        try:
            body = await request.json()
        except ValueError:
            raise Refused(400, "BadRequest", f"the body is not JSON: {EXAMPLE_BODY}") from None
        validation = params.field_validation(request.query.get("fieldValidation", ""))
        unknown = [] if validation == "Ignore" else params.unknown_fields(body)
        if unknown and validation == "Strict":
            raise Refused(
                400,
                "BadRequest",
                f'Run in version "{resources.VERSION}" cannot be handled as a Run: strict'
                f" decoding error: {', '.join(f'unknown field {field!r}' for field in unknown)}",
            )
        found, created = await self._call(
            lambda: self._actions.create(namespace, body, user, dry_run=dry_run)
        )
        answer = web.json_response(resources.run_object(found), status=201 if created else 200)
        for field in unknown:  # Warn: kubectl prints each "Warning: unknown field ..."
            answer.headers.add("Warning", f'299 - "unknown field \\"{field}\\""')
        return answer

    async def _delete(self, request: web.Request) -> web.Response:
        """cancel. Answered with a Status naming the cancellation, not the Run: kubectl
        waits after a delete until the object it was answered with is gone (or another
        of its name has a different uid), and a Run never goes (it is history). The run
        as it is after the cancel is what ``get`` shows (CANCELLED, or asked to stop)."""
        user = self._user(request)
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        await self._call(lambda: self._require(user, namespace, "delete"))
        # kubectl sends --dry-run=server in the DeleteOptions body; other clients may use
        # the query. Either way a dry run cancels nothing.
        options = await request.read()
        try:
            asked = json.loads(options).get("dryRun") if options else None
        except (ValueError, AttributeError):
            raise Refused(400, "BadRequest", "the body is not DeleteOptions") from None
        dry_run = params.dry_run(request.query.get("dryRun", "") or ",".join(asked or []))
        found = await self._call(
            lambda: self._actions.cancel(namespace, name, user, dry_run=dry_run)
        )
        done = "would be cancelled (dry run)" if dry_run else "cancelled"
        body = resources.status(
            200,
            "",
            f"run {found.name} {done} ({found.run.status}; get it to follow it)",
            details={
                "name": found.name,
                "group": resources.GROUP,
                "kind": resources.PLURAL,
                "uid": resources.cancellation_uid(found.run.id),
            },
        )
        return web.json_response(body)

    def _table(
        self,
        request: web.Request,
        found: list[resources.StoredRun],
        token: str | None,
        version: str = "",
    ) -> web.Response:
        """The Table kubectl asks for, with the objects ``includeObject`` asks (default:
        their metadata)."""
        objects = request.query.get("includeObject", "Metadata")
        return web.json_response(
            resources.table(
                found,
                now=self._now(),
                continue_token=token,
                objects=objects,
                resource_version=version,
            )
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

    def _listable(self, user: User, namespace: str | None, verb: str) -> list[str] | None:
        """The namespaces whose runs ``user`` may list (or watch): ``namespace`` (or 403),
        or, across namespaces, all (None) if they may cluster-wide, else each namespace with
        ScheduledJobs where they may."""
        if namespace is not None:
            self._require(user, namespace, verb)
            return [namespace]
        if self._reviews.allows(user, "", _permission(verb)):
            return None
        return [
            each
            for each in self._reader.namespaces()
            if self._reviews.allows(user, each, _permission(verb))
        ]

    def _one(
        self, namespaces: list[str] | None, selected: params.Fields
    ) -> list[resources.StoredRun]:
        """The run a field selector names by id or name, in the namespaces listed."""
        if selected.run_id is not None:
            found = self._reader.by_ids([selected.run_id]).get(selected.run_id)
            if found is None or (namespaces is not None and found.namespace not in namespaces):
                return []
            return [found]
        assert selected.name is not None
        candidates = namespaces if namespaces is not None else self._reader.namespaces()
        named = [self._reader.named(namespace, selected.name) for namespace in candidates]
        return [item for item in named if item is not None]

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
