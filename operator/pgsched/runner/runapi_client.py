"""The job pod's client of the run API (docs/run-api.md): the only way a pod speaks for its run.

Standard library only (``http.client`` over TLS that trusts ``PGSCHED_RUN_API_CA`` alone,
host name checked). Every call either returns the answer or raises :class:`RunApiError`,
which says whether trying again can help (``transient``) and when (``retry_after``); the
callers decide whether and how often to retry (the heartbeat loop, ``patience``).

One client serves every thread of a pod: each thread gets its own keep-alive connection,
since an ``http.client`` connection must not be shared, and the long poll of one thread
must not hold up the final write of another.
"""

from __future__ import annotations

import http.client
import json
import re
import ssl
import threading
from typing import Any, Literal, cast, get_args
from urllib.parse import urlencode, urlsplit

from pgsched.engine.lease import FinalStatus, Lease, LeaseState
from pgsched.runapi import protocol

# Without an answer after this long a request fails (transient): a stalled server cannot
# hang the pod. It bounds the connection and every read; a long poll gets its wait on top.
REQUEST_TIMEOUT_SECONDS = 10.0
# Bodies the protocol answers are a few dozen bytes; a larger one is a broken (or hostile)
# server, and is not read.
MAX_RESPONSE_BYTES = 64 * 1024
# A Retry-After longer than this is not waited out in one go.
MAX_RETRY_AFTER_SECONDS = 30.0

_TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})
_STATES: tuple[LeaseState, ...] = get_args(LeaseState)


class RunApiError(Exception):
    """A request that got no usable answer. ``transient``: the same request may succeed
    later (no connection, a timeout, 429, 502, 503, 504); ``retry_after``: the server's
    ``Retry-After`` in seconds (capped), when it sent one."""

    def __init__(self, message: str, transient: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.transient = transient
        self.retry_after = retry_after


def address(url: str) -> tuple[str, int, str]:
    """``(host, port, path prefix)`` of an https URL; ValueError says what is wrong."""
    parts = urlsplit(url.strip())
    if parts.scheme != "https":
        raise ValueError("is not an https:// URL (the run API is served over TLS only)")
    if not parts.hostname:
        raise ValueError("has no host")
    try:
        port = parts.port or 443
    except ValueError:
        raise ValueError("has a port that is not a number from 1 to 65535") from None
    if parts.query or parts.fragment:
        raise ValueError("must not have a query or a fragment")
    return parts.hostname, port, parts.path.rstrip("/")


def trusting(ca_pem: str) -> ssl.SSLContext:
    """A TLS context that trusts the CA certificate(s) in ``ca_pem`` and nothing else, and
    checks that the server's certificate is for the host asked for; ValueError says why not."""
    # Never hand ssl an empty cadata: it would fall back to the system's CAs.
    if "-----BEGIN CERTIFICATE-----" not in ca_pem:
        raise ValueError("is not PEM text of a certificate (no -----BEGIN CERTIFICATE----- line)")
    try:
        return ssl.create_default_context(cadata=ca_pem)
    except (ssl.SSLError, ValueError) as error:
        reason = re.sub(r" \(_ssl\.c:\d+\)$", "", str(error))  # not where in CPython
        raise ValueError(f"cannot be loaded as a CA certificate ({reason})") from None


class RunApiClient:
    def __init__(
        self,
        url: str,
        ca_pem: str,
        run_lease: Lease,
        *,
        timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
    ) -> None:
        self._host, self._port, prefix = address(url)
        self._context = trusting(ca_pem)
        self._prefix = prefix
        self._shown = url.strip().rstrip("/")  # for messages
        self._headers = {"Authorization": f"Bearer {run_lease.token}", "Accept": "application/json"}
        self._timeout = timeout_seconds
        self._local = threading.local()  # .conn: this thread's connection
        self.run_id = run_lease.run_id

    def heartbeat(self, *, timeout: float | None = None) -> LeaseState:
        """Stamp the run's heartbeat; the lease's state. ``timeout``: instead of the
        client's (the heartbeat loop's is tied to its interval)."""
        return _state(self._call("POST", protocol.HEARTBEAT, repeatable=True, timeout=timeout))

    def lease_state(self) -> LeaseState:
        """The lease's state, read-only."""
        return _state(self._call("GET", protocol.LEASE, repeatable=True))

    def wait_while(
        self, state: LeaseState, seconds: float, *, timeout: float | None = None
    ) -> LeaseState:
        """The lease's state as soon as it is not ``state``, or ``state`` after ``seconds``
        (to the millisecond, at most the protocol's longest wait): the cancel long poll,
        given ``timeout`` (else the client's) on top of its wait."""
        seconds = max(0.001, min(seconds, protocol.MAX_WAIT_SECONDS))
        query = urlencode({"state": state, "wait": f"{seconds:.3f}".rstrip("0").rstrip(".")})
        answer = self._call(
            "GET",
            f"{protocol.LEASE}?{query}",
            repeatable=True,
            timeout=(self._timeout if timeout is None else timeout) + seconds,
        )
        return _state(answer)

    def workload_ended(self) -> bool:
        """Note that the workload ended; False: the lease was lost."""
        return _flag(self._call("POST", protocol.WORKLOAD_ENDED), "marked")

    def finish(
        self,
        status: FinalStatus,
        *,
        reason: str | None = None,
        error: str | None = None,
        exit_code: int | None = None,
        retry_hint: Literal["retry", "never"] | None = None,
    ) -> bool:
        """Record the run's outcome; False: the lease was lost, nothing changed."""
        fields = {
            "status": status,
            "reason": reason,
            "error": error,
            "exitCode": exit_code,
            "retryHint": retry_hint,
        }
        body = {key: value for key, value in fields.items() if value is not None}
        return _flag(self._call("POST", protocol.FINISH, body), "finished")

    def close(self) -> None:
        """Close the calling thread's connection (a later call opens a new one)."""
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()

    def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        repeatable: bool = False,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """One request on this thread's connection. ``repeatable``: sending it twice does
        no harm, so a kept-alive connection the server closed meanwhile is retried once on
        a fresh one. Other requests are not: their callers count the attempts (an answer
        lost after the commit, ``outcome.record``)."""
        path = path.replace("{run}", str(self.run_id))
        target = f"{self._prefix}{path}"
        what = f"{method} {self._shown}{path.partition('?')[0]}"
        payload = None if body is None else json.dumps(body).encode()
        headers = dict(self._headers)
        if payload is not None:
            headers["Content-Type"] = "application/json"
        conn = self._connection(self._timeout if timeout is None else timeout)
        while True:
            reused = conn.sock is not None
            try:
                conn.request(method, target, body=payload, headers=headers)
                response = conn.getresponse()
                data = _read(response, what)
            except ssl.SSLCertVerificationError as error:
                conn.close()
                raise RunApiError(
                    f"{what}: the server's certificate is not one PGSCHED_RUN_API_CA vouches"
                    f" for {self._host} ({error.verify_message}); check that the CA and the"
                    " URL are the ones the operator serves",
                    transient=False,
                ) from None
            except (OSError, http.client.HTTPException) as error:
                conn.close()
                if reused and repeatable and isinstance(error, _DROPPED_WHILE_IDLE):
                    repeatable = False  # once
                    continue
                raise RunApiError(f"{what}: {_describe(error, conn)}", transient=True) from None
            except RunApiError:
                conn.close()
                raise
            if response.status in _TRANSIENT_STATUSES:
                conn.close()  # retried on a fresh connection: it may reach another replica
            return _answer(what, response, data)

    def _connection(self, timeout: float) -> http.client.HTTPSConnection:
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(self._host, self._port, context=self._context)
            self._local.conn = conn
        conn.timeout = timeout  # for the next connect
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn


# How a server's closing of an idle kept-alive connection shows on the next request.
_DROPPED_WHILE_IDLE = (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError)


def _read(response: http.client.HTTPResponse, what: str) -> bytes:
    """The body, refused unread beyond :data:`MAX_RESPONSE_BYTES`."""
    if response.length is not None and response.length > MAX_RESPONSE_BYTES:
        raise _too_large(what)
    data = response.read(MAX_RESPONSE_BYTES + 1)
    if len(data) > MAX_RESPONSE_BYTES:
        raise _too_large(what)
    return data


def _too_large(what: str) -> RunApiError:
    return RunApiError(
        f"{what}: the answer is larger than {MAX_RESPONSE_BYTES} bytes, not a run API answer",
        transient=False,
    )


def _answer(what: str, response: http.client.HTTPResponse, data: bytes) -> dict[str, Any]:
    try:
        parsed: object = json.loads(data)
    except ValueError:
        parsed = None
    if response.status == 200:
        if not isinstance(parsed, dict):
            raise RunApiError(f"{what}: the answer is not a JSON object", transient=False)
        return parsed
    explained = parsed.get("error") if isinstance(parsed, dict) else None
    message = f"{what}: {response.status} {response.reason}"
    if isinstance(explained, str):
        message += f": {explained[:500]}"
    if response.status not in _TRANSIENT_STATUSES:
        raise RunApiError(message, transient=False)
    raise RunApiError(
        message, transient=True, retry_after=_retry_after(response.getheader("Retry-After"))
    )


def _retry_after(header: str | None) -> float | None:
    """Retry-After in seconds, capped; None when absent or not seconds (an HTTP date)."""
    try:
        seconds = float(header) if header is not None else None
    except ValueError:
        return None
    if seconds is None or not seconds >= 0:  # also NaN
        return None
    return min(seconds, MAX_RETRY_AFTER_SECONDS)


def _state(answer: dict[str, Any]) -> LeaseState:
    state = answer.get("state")
    if state not in _STATES:
        raise RunApiError(f"the run API answered an unknown lease state {state!r}", False)
    return cast(LeaseState, state)


def _flag(answer: dict[str, Any], key: str) -> bool:
    value = answer.get(key)
    if not isinstance(value, bool):
        raise RunApiError(f"the run API answered {key}={value!r}, not true or false", False)
    return value


def _describe(error: BaseException, conn: http.client.HTTPSConnection) -> str:
    if isinstance(error, TimeoutError):
        return f"no answer within {conn.timeout:g}s"
    if isinstance(error, http.client.RemoteDisconnected):
        return "the server closed the connection without answering"
    return f"{type(error).__name__}: {' '.join(str(error).split())}"
