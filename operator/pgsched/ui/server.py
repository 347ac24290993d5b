"""The UI's aiohttp application, and the two ways it is served.

Pages are rendered in a small thread pool (psycopg and the Kubernetes client block), each
with a pooled connection and the database clock as "now". Every answer is HTML: a
:class:`~pgsched.ui.pieces.PageError` becomes its 4xx page, a broken database a 503, and
anything unexpected a 500 that says it was logged — never a traceback. Nothing a request
sends is written anywhere; the only state is the sign-in sessions in memory (``signin``).

The only POSTs are sign-in and sign-out. Each must come from this UI's own form: a
same-origin ``Origin``/``Sec-Fetch-Site`` when the browser sends them, and a CSRF token
(sign-in: a double-submit cookie, as there is no session yet; sign-out: the session's).
The session cookie is ``HttpOnly``, ``SameSite=Lax`` and has a ``Max-Age``; it is
``Secure`` as the cookie policy says (``auto``: whenever the UI is reached over TLS, its
own listener or a proxy's ``X-Forwarded-Proto: https``; over plain HTTP only on a loopback
address, i.e. ``kubectl port-forward``; sign-in over plain HTTP from elsewhere is refused).

``serve_in_thread`` runs the UI beside the operator (its own event loop, so a slow page
never delays the operator's threads); ``serve`` runs it in the foreground for ``pgsched ui``.
Both take an optional TLS context (``tls_context``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
import ssl
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

from pgsched import metrics, names
from pgsched.db import clock, connection
from pgsched.ui import access, html, pages, pieces, run_page, signin, why_page

log = logging.getLogger(__name__)

COOKIE = "pgsched_session"
CSRF_COOKIE = "pgsched_csrf"
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
_SIGN_IN = web.AppKey("sign_in", signin.SignIn)
_COOKIE_SECURE = web.AppKey("cookie_secure", str)
_EXECUTOR = web.AppKey("executor", ThreadPoolExecutor)
_VISITOR = web.RequestKey("visitor", signin.Visitor)
# A page: the context, the URL's path segments and its query parameters.
Render = Callable[[pieces.Context, Mapping[str, str], Mapping[str, str]], pieces.Page]


def build_app(
    pool: ConnectionPool[Any],
    ui_access: access.Access,
    *,
    workers: int = 4,
    cookie_secure: str = "auto",
) -> web.Application:
    """``cookie_secure``: when the session cookie is ``Secure`` (names.UI_COOKIE_SECURE)."""
    if cookie_secure not in names.UI_COOKIE_SECURE:
        raise ValueError(
            f"cookie_secure {cookie_secure!r} is not one of {', '.join(names.UI_COOKIE_SECURE)}"
            " (example: auto)"
        )
    app = web.Application(middlewares=[_observe], client_max_size=64 * 1024)
    app[_POOL] = pool
    app[_SIGN_IN] = signin.SignIn(ui_access)
    app[_COOKIE_SECURE] = cookie_secure
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
        page(lambda ctx, path, q: why_page.page(ctx, path["namespace"], path["name"], q)),
        name="why",
    )
    app.router.add_get(
        "/runs/{run_id}",
        page(lambda ctx, path, q: run_page.page(ctx, path["run_id"], q)),
        name="run",
    )
    app.router.add_get("/login", _login_form, name="login")
    app.router.add_post("/login", _login, name="login-post")
    app.router.add_get("/logout", _to_overview, name="logout")
    app.router.add_post("/logout", _logout, name="logout-post")

    async def _shutdown(app: web.Application) -> None:
        app[_EXECUTOR].shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(_shutdown)
    return app


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip() or None
    return None


def _client(request: web.Request) -> str:
    return request.remote or "unknown"


async def _blocking(request: web.Request, work: Callable[[], Any]) -> Any:
    return await asyncio.get_running_loop().run_in_executor(request.app[_EXECUTOR], work)


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
    sign_in = request.app[_SIGN_IN]
    pool = request.app[_POOL]
    bearer, session_id, client = _bearer(request), request.cookies.get(COOKIE), _client(request)

    def work() -> pieces.Page:
        visitor = sign_in.identify(bearer=bearer, session_id=session_id, client=client)
        request[_VISITOR] = visitor  # for the page's header, this one's or an error's
        with pool.connection() as conn:
            ctx = pieces.Context(
                conn=conn, access=sign_in.access, user=visitor.user, now=clock.now(conn)
            )
            return render(ctx, path, query)

    try:
        result: pieces.Page = await _blocking(request, work)
    except pieces.PageError as error:
        return _error(request, error.status, error.message)
    except access.Unauthenticated as error:
        return _sign_in_page(request, 401, f"{error}: sign in with a Kubernetes token")
    except signin.Throttled as error:
        return _throttled(request, error)
    except access.Unavailable as error:
        return _error(request, 503, str(error))
    except (psycopg.OperationalError, TimeoutError) as error:
        log.warning("UI page %s: database unavailable: %s", request.path, error)
        return _error(request, 503, "the database is unavailable; try again in a moment")
    except Exception:
        log.exception("UI page %s failed", request.path)
        return _error(request, 500, "this page failed; the error is in the operator's log")
    return _html(request, 200, result.title, result.body)


def _who(request: web.Request, signed_in: bool) -> str:
    mode = request.app[_SIGN_IN].access.mode
    if mode == "token":  # only a visitor whose token was accepted is signed in
        return "signed in with a token" if signed_in else "not signed in"
    return {"kubeconfig": "as your kubeconfig identity"}.get(mode, "database-only view (--no-auth)")


def _html(request: web.Request, status: int, title: str, body: str) -> web.Response:
    visitor = request.get(_VISITOR)
    session = visitor.session if visitor is not None else None
    return web.Response(
        status=status,
        text=html.page(
            title,
            body,
            who=_who(request, signed_in=visitor is not None),
            logout=session.csrf if session is not None else None,
        ),
        content_type="text/html",
        headers=_HEADERS,
    )


def _error(request: web.Request, status: int, message: str) -> web.Response:
    titles = {
        400: "Bad request",
        401: "Sign in",
        403: "Forbidden",
        404: "Not found",
        405: "Not allowed",
        429: "Too many attempts",
    }
    title = titles.get(status, "Unavailable" if status == 503 else "Error")
    body = f"<h1>{status} {html.e(title)}</h1><p class='error' id='error'>{html.e(message)}</p>"
    body += f"<p>{html.link('/', 'back to the overview')}</p>"
    return _html(request, status, title, body)


def _throttled(request: web.Request, error: signin.Throttled) -> web.Response:
    response = _error(request, 429, str(error))
    response.headers["Retry-After"] = str(error.retry_after)
    return response


# --- signing in and out -------------------------------------------------------------------


def _secure(request: web.Request) -> bool | None:
    """Whether the session cookie is ``Secure`` here; None: do not sign in over this
    connection (plain HTTP to another machine would carry the cookie in clear text)."""
    policy = request.app[_COOKIE_SECURE]
    if policy != "auto":
        return policy == "always"
    if request.secure or request.headers.get("X-Forwarded-Proto", "").lower() == "https":
        return True
    return False if _loopback(request.host) else None


def _loopback(host: str) -> bool:
    name = urlsplit(f"//{host}").hostname or ""
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _sign_in_page(request: web.Request, status: int, message: str = "") -> web.Response:
    """The sign-in form, and its CSRF cookie (kept if the browser already has a sane one)."""
    csrf = request.cookies.get(CSRF_COOKIE, "")
    if not 32 <= len(csrf) <= 64 or not csrf.replace("-", "").replace("_", "").isalnum():
        csrf = secrets.token_urlsafe(32)
    said = f"<p class='error' id='error'>{html.e(message)}</p>" if message else ""
    body = (
        f"<h1>Sign in</h1>{said}<form method='post' action='/login'>"
        f"<input type='hidden' name='csrf' value='{html.e(csrf)}'>"
        "<label>Kubernetes bearer token for this UI's audience (e.g. <code>kubectl create"
        " token NAME --audience pgsched-ui</code>)<br>"
        "<input type='password' name='token' size='60' autocomplete='off'></label>"
        " <button>sign in</button></form>"
    )
    response = _html(request, status, "Sign in", body)
    response.set_cookie(
        CSRF_COOKIE,
        csrf,
        httponly=True,
        samesite="Strict",
        path="/login",
        max_age=3600,
        secure=bool(_secure(request)),
    )
    return response


def _cross_site(request: web.Request) -> bool:
    """A POST that a browser says comes from another site's page."""
    origin = request.headers.get("Origin")
    if origin is not None and urlsplit(origin).netloc != request.host:
        return True
    return request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none")


async def _login_form(request: web.Request) -> web.StreamResponse:
    if request.app[_SIGN_IN].access.mode != "token":
        raise web.HTTPSeeOther("/")  # nothing to sign in to
    return _sign_in_page(request, 200)


async def _login(request: web.Request) -> web.StreamResponse:
    # Another site's form would sign the visitor in as someone else (login CSRF).
    refused = "sign-in is only accepted from this UI's own form; try again"
    if _cross_site(request):
        return _error(request, 403, refused)
    sign_in = request.app[_SIGN_IN]
    if sign_in.access.mode != "token":
        raise web.HTTPSeeOther("/")
    form = await request.post()
    posted, kept = str(form.get("csrf") or ""), request.cookies.get(CSRF_COOKIE, "")
    if not kept or not secrets.compare_digest(posted, kept):
        return _sign_in_page(request, 403, refused)
    secure = _secure(request)
    if secure is None:
        return _error(
            request,
            403,
            "sign-in over plain HTTP is refused: the session cookie would cross the network"
            " in clear text. Serve the UI over TLS (pgsched ui --tls-cert/--tls-key, Helm"
            " ui.tls.secretName), behind a TLS proxy that sends X-Forwarded-Proto: https, or"
            " reach it through kubectl port-forward at http://127.0.0.1:PORT/",
        )
    token = str(form.get("token") or "").strip()
    client = _client(request)
    try:
        session = await _blocking(request, lambda: sign_in.sign_in(token, client=client))
    except access.Unauthenticated as error:
        return _sign_in_page(request, 401, str(error))
    except signin.Throttled as error:
        return _throttled(request, error)
    except access.Unavailable as error:
        return _error(request, 503, str(error))
    response = web.HTTPSeeOther("/")
    # The cookie holds only the session id, never the token. Lax, not Strict: a link to a
    # run pasted in a chat opens signed in; every GET only reads, and no other site's
    # page can frame it, read it or POST with this cookie.
    response.set_cookie(
        COOKIE,
        session.id,
        httponly=True,
        samesite="Lax",
        path="/",
        max_age=int(sign_in.sessions.lifetime),
        secure=secure,
    )
    response.del_cookie(CSRF_COOKIE, path="/login")
    raise response


async def _to_overview(request: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther("/")  # a bookmarked /logout: the button is in every page's header


async def _logout(request: web.Request) -> web.StreamResponse:
    sessions = request.app[_SIGN_IN].sessions
    form = await request.post()
    session = sessions.get(request.cookies.get(COOKIE))
    if session is not None:
        if _cross_site(request) or not session.checks(str(form.get("csrf") or "")):
            return _error(request, 403, "sign-out is only accepted from this UI's own pages")
        sessions.close(session.id)
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


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context for the UI's optional TLS listener (PEM files, read once: a renewed
    certificate takes effect when the process restarts). Raises ValueError saying why."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as error:
        raise ValueError(
            f"cannot load the UI's TLS certificate {cert_file!r} and key {key_file!r}: {error}"
            " (give a PEM certificate chain and its PEM private key, e.g. a"
            " kubernetes.io/tls Secret's tls.crt and tls.key)"
        ) from None
    return context


class Running:
    """A UI served by a thread of its own (the operator's, and tests')."""

    def __init__(
        self, app: web.Application, host: str, port: int, tls: ssl.SSLContext | None = None
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._runner = web.AppRunner(app, access_log=None)
        self._ready = threading.Event()
        self._stopped = asyncio.Event()
        self.port = port
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._main, args=(host, port, tls), name="pgsched-ui", daemon=True
        )
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error

    def _main(self, host: str, port: int, tls: ssl.SSLContext | None) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._start(host, port, tls))
        except BaseException as error:  # reported to the starting thread
            self._error = error
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_until_complete(self._stopped.wait())
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    async def _start(self, host: str, port: int, tls: ssl.SSLContext | None) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=tls)
        await site.start()
        if port == 0:
            self.port = int(self._runner.addresses[0][1])

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(timeout=30)


def _address(bind: str) -> tuple[str, int]:
    """``host:port`` (checked by the settings and the CLI); ``[::]:8090`` for IPv6."""
    host, _, port = bind.rpartition(":")
    return host.strip("[]"), int(port)


def serve_in_thread(
    app: web.Application, bind: str, *, tls: ssl.SSLContext | None = None
) -> Running:
    return Running(app, *_address(bind), tls)


def serve(app: web.Application, bind: str, *, tls: ssl.SSLContext | None = None) -> None:
    """Serve in the foreground until Ctrl-C."""
    host, port = _address(bind)
    web.run_app(app, host=host, port=port, ssl_context=tls, print=None, access_log=None)
