"""The UI's aiohttp application, and the two ways it is served.

Pages are rendered in a small thread pool (psycopg and the Kubernetes client block), each
with a pooled connection and the database clock as "now". Every answer is HTML: a
:class:`~pgsched.ui.pages.PageError` becomes its 4xx page, a broken database a 503, and
anything unexpected a 500 that says it was logged — never a traceback. Nothing a request
sends is written anywhere: the UI's only state is the login cookie in the browser.

``serve_in_thread`` runs the UI beside the operator (its own event loop, so a slow page
never delays the operator's threads); ``serve`` runs it in the foreground for ``pgsched ui``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import psycopg
from aiohttp import web
from psycopg import conninfo
from psycopg_pool import ConnectionPool

from pgsched import metrics
from pgsched.db import clock, connection
from pgsched.ui import access, html, pages

log = logging.getLogger(__name__)

COOKIE = "pgsched_token"
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self';"
    " frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_PAGES = (
    "the pages are /, /ns/NAMESPACE/NAME, /ns/NAMESPACE/NAME/why?at=LOCAL-TIME and /runs/RUN-ID"
)
_POOL = web.AppKey("pool", ConnectionPool)
_ACCESS = web.AppKey("access", object)
_EXECUTOR = web.AppKey("executor", ThreadPoolExecutor)
# A page: the context, the URL's path segments and its query parameters.
Render = Callable[[pages.Context, Mapping[str, str], Mapping[str, str]], pages.Page]


def build_app(
    pool: ConnectionPool[Any], ui_access: access.Access, *, workers: int = 4
) -> web.Application:
    app = web.Application(middlewares=[_observe], client_max_size=64 * 1024)
    app[_POOL] = pool
    app[_ACCESS] = ui_access
    app[_EXECUTOR] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pgsched-ui")

    def page(render: Render) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handler(request: web.Request) -> web.StreamResponse:
            return await _render(request, render)

        return handler

    app.router.add_get("/", page(lambda ctx, _, q: pages.overview(ctx, q)), name="overview")
    app.router.add_get(
        "/ns/{namespace}/{name}",
        page(lambda ctx, path, q: pages.job(ctx, path["namespace"], path["name"], q)),
        name="job",
    )
    app.router.add_get(
        "/ns/{namespace}/{name}/why",
        page(lambda ctx, path, q: pages.why_page(ctx, path["namespace"], path["name"], q)),
        name="why",
    )
    app.router.add_get(
        "/runs/{run_id}",
        page(lambda ctx, path, q: pages.run_page(ctx, path["run_id"], q)),
        name="run",
    )
    app.router.add_get("/login", _login_form, name="login")
    app.router.add_post("/login", _login, name="login-post")
    app.router.add_get("/logout", _logout, name="logout")

    async def _shutdown(app: web.Application) -> None:
        app[_EXECUTOR].shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(_shutdown)
    return app


def _token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip() or None
    return request.cookies.get(COOKIE) or None


async def _render(request: web.Request, render: Render) -> web.StreamResponse:
    query: dict[str, str] = {}
    for key in request.query:
        values = request.query.getall(key)
        if len(values) > 1:
            return _error(
                request, 400, f"parameter {key!r} is given {len(values)} times; give it once"
            )
        query[key] = values[0]
    path = dict(request.match_info)
    ui_access: access.Access = request.app[_ACCESS]  # type: ignore[assignment]
    pool = request.app[_POOL]
    token = _token(request)

    def work() -> pages.Page:
        user = ui_access.authenticate(token)
        with pool.connection() as conn:
            ctx = pages.Context(conn=conn, access=ui_access, user=user, now=clock.now(conn))
            return render(ctx, path, query)

    loop = asyncio.get_running_loop()
    try:
        result = await loop.run_in_executor(request.app[_EXECUTOR], work)
    except pages.PageError as error:
        return _error(request, error.status, error.message)
    except access.Unauthenticated as error:
        return _error(request, 401, f"{error}: log in with a Kubernetes token", login=True)
    except access.Unavailable as error:
        return _error(request, 503, str(error))
    except (psycopg.OperationalError, TimeoutError) as error:
        log.warning("UI page %s: database unavailable: %s", request.path, error)
        return _error(request, 503, "the database is unavailable; try again in a moment")
    except Exception:
        log.exception("UI page %s failed", request.path)
        return _error(request, 500, "this page failed; the error is in the operator's log")
    return _html(request, 200, result.title, result.body)


def _who(request: web.Request) -> tuple[str, bool]:
    ui_access: access.Access = request.app[_ACCESS]  # type: ignore[assignment]
    return {"token": "signed in with a token", "kubeconfig": "as your kubeconfig identity"}.get(
        ui_access.mode, "database-only view (--no-auth)"
    ), ui_access.mode == "token"


def _html(request: web.Request, status: int, title: str, body: str) -> web.Response:
    who, logout = _who(request)
    return web.Response(
        status=status,
        text=html.page(title, body, who=who, logout=logout and _token(request) is not None),
        content_type="text/html",
        headers=_HEADERS,
    )


def _error(request: web.Request, status: int, message: str, *, login: bool = False) -> web.Response:
    titles = {
        400: "Bad request",
        401: "Sign in",
        403: "Forbidden",
        404: "Not found",
        405: "Not allowed",
    }
    title = titles.get(status, "Unavailable" if status == 503 else "Error")
    body = f"<h1>{status} {html.e(title)}</h1><p class='error' id='error'>{html.e(message)}</p>"
    if login:
        body += _LOGIN_FORM
    body += f"<p>{html.link('/', 'back to the overview')}</p>"
    return _html(request, status, title, body)


_LOGIN_FORM = (
    "<form method='post' action='/login'><label>Kubernetes bearer token"
    " (e.g. <code>kubectl create token NAME</code>)<br>"
    "<input type='password' name='token' size='60' autocomplete='off'></label>"
    " <button>sign in</button></form>"
)


async def _login_form(request: web.Request) -> web.StreamResponse:
    ui_access: access.Access = request.app[_ACCESS]  # type: ignore[assignment]
    if ui_access.mode != "token":
        raise web.HTTPSeeOther("/")  # nothing to sign in to
    return _html(request, 200, "Sign in", _LOGIN_FORM)


async def _login(request: web.Request) -> web.StreamResponse:
    ui_access: access.Access = request.app[_ACCESS]  # type: ignore[assignment]
    origin = request.headers.get("Origin")
    if origin is not None and urlsplit(origin).netloc != request.host:
        # Another site's form would sign the visitor in as someone else (login CSRF).
        return _error(request, 403, "sign-in is only accepted from this UI's own form")
    form = await request.post()
    token = str(form.get("token") or "").strip()
    if ui_access.mode != "token":
        raise web.HTTPSeeOther("/")
    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(request.app[_EXECUTOR], ui_access.authenticate, token)
    except access.Unauthenticated as error:
        return _error(request, 401, str(error), login=True)
    except access.Unavailable as error:
        return _error(request, 503, str(error))
    response = web.HTTPSeeOther("/")
    # HttpOnly: no script reads it; SameSite=Strict: no other site's page sends it.
    response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/")
    raise response


async def _logout(request: web.Request) -> web.StreamResponse:
    response = web.HTTPSeeOther("/login")
    response.del_cookie(COOKIE, path="/")
    raise response


@web.middleware
async def _observe(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    started = time.perf_counter()
    route = request.match_info.route.name or "unknown"
    try:
        response = await handler(request)
    except web.HTTPRedirection:
        metrics.UI_REQUEST_SECONDS.labels(route, "303").observe(time.perf_counter() - started)
        raise
    except web.HTTPNotFound:
        response = _error(request, 404, f"no page at {request.path[:200]}; {_PAGES}")
    except web.HTTPException as error:
        response = _error(request, error.status, f"{error.reason}: the UI only reads (GET)")
    metrics.UI_REQUEST_SECONDS.labels(route, str(response.status)).observe(
        time.perf_counter() - started
    )
    return response


def open_pool(dsn: str, *, size: int = 4) -> ConnectionPool[Any]:
    """Connections whose transactions are read-only: the UI cannot write, even by mistake."""
    read_only = conninfo.make_conninfo(dsn, options="-c default_transaction_read_only=on")
    return connection.pool(read_only, name="pgsched-ui", max_size=size)


class Running:
    """A UI served by a thread of its own (the operator's, and tests')."""

    def __init__(self, app: web.Application, host: str, port: int) -> None:
        self._loop = asyncio.new_event_loop()
        self._runner = web.AppRunner(app, access_log=None)
        self._ready = threading.Event()
        self._stopped = asyncio.Event()
        self.port = port
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._main, args=(host, port), name="pgsched-ui", daemon=True
        )
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error

    def _main(self, host: str, port: int) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._start(host, port))
        except BaseException as error:  # reported to the starting thread
            self._error = error
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_until_complete(self._stopped.wait())
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    async def _start(self, host: str, port: int) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        if port == 0:
            self.port = int(self._runner.addresses[0][1])

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(timeout=30)


def serve_in_thread(app: web.Application, bind: str) -> Running:
    host, _, port = bind.rpartition(":")
    return Running(app, host or "0.0.0.0", int(port))


def serve(app: web.Application, bind: str) -> None:
    """Serve in the foreground until Ctrl-C."""
    host, _, port = bind.rpartition(":")
    web.run_app(app, host=host or "127.0.0.1", port=int(port), print=None, access_log=None)
