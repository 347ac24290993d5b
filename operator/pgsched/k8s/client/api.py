"""A small REST client for the Kubernetes API: JSON in, JSON out, every request visible.

Authentication comes from the official client's config loaders (in-cluster service
account, or a kubeconfig with certificates, tokens or exec plugins); requests go through
urllib3 directly so pgsched controls what matters here:

- a client-side token bucket (``ratelimit.TokenBucket``) in front of every request, shared
  by every view of the client; requests through :meth:`KubeApi.background` yield to the
  others (Events and statuses never delay a Job's creation);
- ``429 Too Many Requests``: wait for ``Retry-After`` (capped) and try again;
- connection errors and 5xx: retry with exponential backoff, a bounded number of times;
- any other error: raise :class:`ApiError` at once with the server's reason and message.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import config as kube_config
from kubernetes.client import Configuration

from pgsched import metrics
from pgsched.k8s import names
from pgsched.k8s.client.endings import NamespaceEndings
from pgsched.k8s.client.ratelimit import Priority, TokenBucket
from pgsched.k8s.names import Obj

log = logging.getLogger(__name__)


MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
_RETRYABLE_STATUS = {500, 502, 503, 504}
_MAX_RETRY_AFTER = 30.0
_WARNING_HEADER = re.compile(r'^\s*\d{3}\s+\S+\s+"(?P<text>(?:[^"\\]|\\.)*)"')


class ApiError(Exception):
    """A non-2xx answer (after retries), with the API server's Status reason and message."""

    def __init__(self, method: str, path: str, status: int, body: Obj) -> None:
        self.status = status
        self.reason = str(body.get("reason", ""))
        self.message = str(body.get("message", "")) or json.dumps(body)[:500]
        details = body.get("details")
        causes = details.get("causes") if isinstance(details, dict) else None
        # A StatusCause's type is its "reason" in JSON (metav1.StatusCause).
        self.causes = [
            str(cause.get("reason", "")) for cause in causes or [] if isinstance(cause, dict)
        ]
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def refused(self) -> bool:
        """The API server refused this request for a reason of its target's (forbidden, a
        terminating namespace, invalid, quota, an admission webhook's denial): a 4xx other
        than a conflict (409) or a throttle (429). Sending it again changes nothing."""
        return 400 <= self.status < 500 and self.status not in (409, 429)

    @property
    def namespace_terminating(self) -> bool:
        """Refused because the namespace is being deleted (nothing can be created in it)."""
        return self.status == 403 and "NamespaceTerminating" in self.causes

    @property
    def unavailable(self) -> bool:
        """The API server could not be reached, or was overloaded or failing (5xx, 429):
        nothing the request itself got wrong."""
        return self.status == 0 or self.status == 429 or self.status >= 500


class Reachability:
    """Whether the API server answered this client, and when it came back after it last
    did not (a connection refused or broken, 5xx, 429). Shared by every view of one client
    (``background``), so every request the operator makes — its watches reconnect all the
    time — tells whether the server was away, also while no launching run needs a look
    (``k8s.jobside.starts``: the Job controller and kubelet catch up only after the return)."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._away = False
        self._back_at: float | None = None

    def lost(self) -> None:
        with self._lock:
            self._away = True

    def answered(self) -> None:
        with self._lock:
            if self._away:
                self._away, self._back_at = False, self._monotonic()

    def seconds_since_return(self) -> float | None:
        """Seconds since the server answered again after an absence (None: it never was
        away, as this client saw it)."""
        with self._lock:
            return None if self._back_at is None else self._monotonic() - self._back_at


@dataclass(frozen=True)
class RetrySettings:
    attempts: int = 6
    base_delay: float = 0.2
    max_delay: float = 5.0


def load_configuration(kubeconfig: str | None = None, context: str | None = None) -> Configuration:
    """In-cluster credentials when running in a pod, else the kubeconfig (``$KUBECONFIG``)."""
    configuration = Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return configuration
        except kube_config.ConfigException:
            log.debug("no in-cluster service account; falling back to a kubeconfig")
    kube_config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=kubeconfig, context=context, client_configuration=configuration
    )
    return configuration


class KubeApi:
    def __init__(
        self,
        configuration: Configuration,
        *,
        limiter: TokenBucket,
        retry: RetrySettings | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._configuration = configuration
        self._limiter = limiter
        self._retry = retry or RetrySettings()
        self._timeout = timeout
        self._priority = Priority.URGENT
        self.reachability = Reachability()
        self.endings = NamespaceEndings()  # namespaces seen going (reads.namespace_ending)
        # Connections kept per API server: the watches hold one each for minutes, and the
        # writers, Job workers and launches each have one in flight; past maxsize urllib3
        # opens and closes a TLS connection per request (a handshake both sides pay for).
        self._pool = urllib3.PoolManager(
            num_pools=4,
            maxsize=32,
            cert_reqs="CERT_REQUIRED" if configuration.verify_ssl else "CERT_NONE",
            ca_certs=configuration.ssl_ca_cert,
            cert_file=configuration.cert_file,
            key_file=configuration.key_file,
        )

    @classmethod
    def from_environment(
        cls, *, qps: float = 20.0, burst: int = 40, kubeconfig: str | None = None
    ) -> KubeApi:
        return cls(load_configuration(kubeconfig), limiter=TokenBucket(qps, burst))

    def background(self) -> KubeApi:
        """The same client (connections, token bucket) for requests that can wait (statuses
        and Events): they take only tokens no urgent request is waiting for."""
        return self._at(Priority.VISIBLE)

    def housekeeping(self) -> KubeApi:
        """The same client for requests that can wait longer still (lease hand-overs):
        after statuses and Events, never starved."""
        return self._at(Priority.HOUSEKEEPING)

    def _at(self, priority: Priority) -> KubeApi:
        view = copy.copy(self)
        view._priority = priority
        return view

    def get(self, path: str, **params: Any) -> Obj:
        return self.request("GET", path, params=params)

    def create(self, path: str, body: Obj) -> Obj:
        return self.request("POST", path, body=body)

    def create_with_warnings(self, path: str, body: Obj) -> tuple[Obj, list[str]]:
        """``create``, and the ``Warning`` headers of the answer (admission warnings such as
        Pod Security's about a Job's pod template): the text of each."""
        created, response = self._post(path, body)
        return created, warning_texts(response.headers.getlist("Warning"))

    def create_answered(self, path: str, body: Obj) -> tuple[Obj, int]:
        """``create``, and the answer's status: 201 created, 200 for a create the server
        answered with what existed (the Run API's idempotent run-now)."""
        created, response = self._post(path, body)
        return created, response.status

    def _post(self, path: str, body: Obj) -> tuple[Obj, urllib3.BaseHTTPResponse]:
        response = self._exchange(
            "POST", path, body=body, params=None, content_type="application/json"
        )
        return (json.loads(response.data) if response.data else {}), response

    def merge_patch(self, path: str, body: Obj) -> Obj:
        return self.request("PATCH", path, body=body, content_type=MERGE_PATCH)

    def json_patch(self, path: str, operations: list[Obj]) -> Obj:
        """An RFC 6902 patch: its ``test`` operations make the whole patch conditional (a
        failed test is a 422 and changes nothing)."""
        return self.request("PATCH", path, body=operations, content_type=JSON_PATCH)

    def delete(self, path: str, *, propagation: str = "Background") -> Obj:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        return self.request("DELETE", path, body=body)

    def get_text(self, path: str, **params: Any) -> str:
        """A plain-text GET (a pod's ``log`` subresource), with the same limits and retries."""
        response = self._exchange("GET", path, body=None, params=params, content_type="text/plain")
        return bytes(response.data).decode(errors="replace")

    def stream(self, path: str, *, params: Mapping[str, Any], read_timeout: float) -> Stream:
        """A streaming GET (a watch): one attempt, no retries (the caller reconnects).
        Raises :class:`ApiError` for a non-2xx answer or a connection that failed."""
        url = self._configuration.host.rstrip("/") + path + "?" + urlencode(params)
        self._limiter.acquire(self._priority)
        try:
            response = self._pool.request(
                "GET",
                url,
                headers=self._headers("application/json"),
                timeout=urllib3.Timeout(connect=self._timeout, read=read_timeout),
                retries=False,
                preload_content=False,
            )
        except urllib3.exceptions.HTTPError as error:
            metrics.KUBE_REQUESTS.labels("WATCH", "connection-error").inc()
            self.reachability.lost()
            raise ApiError(
                "GET", path, 0, {"reason": "ConnectionError", "message": str(error)}
            ) from None
        metrics.KUBE_REQUESTS.labels("WATCH", str(response.status)).inc()
        self._heard(response.status)
        if response.status >= 300:
            answer = _decode(response.read())
            response.release_conn()
            raise ApiError("GET", path, response.status, answer)
        return Stream(path, response)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Obj | list[Obj] | None = None,
        params: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        response = self._exchange(method, path, body=body, params=params, content_type=content_type)
        return json.loads(response.data) if response.data else {}

    def _exchange(
        self,
        method: str,
        path: str,
        *,
        body: Obj | list[Obj] | None,
        params: Mapping[str, Any] | None,
        content_type: str,
    ) -> urllib3.BaseHTTPResponse:
        url = self._configuration.host.rstrip("/") + path
        query = {key: value for key, value in (params or {}).items() if value is not None}
        if query:
            url += "?" + urlencode(query)
        data = json.dumps(body).encode() if body is not None else None
        attempt = 0
        while True:
            attempt += 1
            waited = self._limiter.acquire(self._priority)
            if waited > 0:
                metrics.KUBE_THROTTLED.labels("client").inc()
                metrics.KUBE_THROTTLE_SECONDS.labels("client").inc(waited)
            try:
                response = self._pool.request(
                    method,
                    url,
                    body=data,
                    headers=self._headers(content_type),
                    timeout=self._timeout,
                    retries=False,
                )
            except urllib3.exceptions.HTTPError as error:
                metrics.KUBE_REQUESTS.labels(method, "connection-error").inc()
                self.reachability.lost()
                if attempt >= self._retry.attempts:
                    raise ApiError(
                        method, path, 0, {"reason": "ConnectionError", "message": str(error)}
                    ) from None
                self._backoff(attempt, f"{method} {path}: {error}")
                continue
            metrics.KUBE_REQUESTS.labels(method, str(response.status)).inc()
            self._heard(response.status)
            if response.status < 300:
                return response
            answer = _decode(response.data)
            if response.status == 429 and attempt < self._retry.attempts:
                delay = _retry_after(response.headers.get("Retry-After"))
                metrics.KUBE_THROTTLED.labels("server").inc()
                metrics.KUBE_THROTTLE_SECONDS.labels("server").inc(delay)
                log.warning(
                    "%s %s: API server asked us to slow down; retrying in %.1fs",
                    method,
                    path,
                    delay,
                )
                time.sleep(delay)
                continue
            if response.status in _RETRYABLE_STATUS and attempt < self._retry.attempts:
                self._backoff(attempt, f"{method} {path}: {response.status}")
                continue
            raise ApiError(method, path, response.status, answer)

    def _heard(self, status: int) -> None:
        if status == 429 or status >= 500:
            self.reachability.lost()
        else:
            self.reachability.answered()

    def _headers(self, content_type: str) -> dict[str, str]:
        headers = {
            "Content-Type": content_type,
            "Accept": "application/json",
            "User-Agent": "pgsched",
        }
        if self._configuration.refresh_api_key_hook is not None:
            self._configuration.refresh_api_key_hook(self._configuration)
        token = self._configuration.get_api_key_with_prefix("authorization") or (
            self._configuration.get_api_key_with_prefix("BearerToken")
        )
        if token:
            headers["Authorization"] = token
        return headers

    def _backoff(self, attempt: int, what: str) -> None:
        delay = min(self._retry.max_delay, self._retry.base_delay * 2 ** (attempt - 1))
        delay *= random.uniform(0.5, 1.0)
        log.warning(
            "%s; retrying in %.2fs (attempt %d of %d)", what, delay, attempt, self._retry.attempts
        )
        time.sleep(delay)


class Stream:
    """The lines of a streaming answer, each decoded JSON; ``close`` (from any thread)
    ends the iteration at once, even while it waits for the server."""

    def __init__(self, path: str, response: urllib3.BaseHTTPResponse) -> None:
        self._path = path
        self._response = response

    def __iter__(self) -> Iterator[Obj]:
        try:
            for line in self._response:
                if line.strip():
                    yield json.loads(line)
        except urllib3.exceptions.HTTPError as error:  # a broken or timed-out connection
            raise ApiError(
                "GET", self._path, 0, {"reason": "ConnectionError", "message": str(error)}
            ) from None
        finally:
            # A watch is abandoned mid-answer: its connection cannot serve another request.
            self._response.close()
            self._response.release_conn()

    def close(self) -> None:
        with contextlib.suppress(ValueError, RuntimeError, OSError):  # ended already
            self._response.shutdown()


def warning_texts(headers: list[str]) -> list[str]:
    """The texts of ``Warning`` header values (RFC 9111: ``299 - "text"``, quoted)."""
    texts = []
    for header in headers:
        match = _WARNING_HEADER.match(header)
        texts.append(re.sub(r"\\(.)", r"\1", match["text"]) if match else header.strip())
    return texts


def _retry_after(header: str | None) -> float:
    try:
        return max(0.1, min(_MAX_RETRY_AFTER, float(header or 1)))
    except ValueError:
        return 1.0


def _decode(data: bytes) -> Obj:
    try:
        decoded = json.loads(data) if data else {}
    except ValueError:
        return {"message": data[:500].decode(errors="replace")}
    return decoded if isinstance(decoded, dict) else {"message": str(decoded)}


def path_of(
    *,
    group: str = "",
    version: str = "v1",
    namespace: str | None = None,
    plural: str,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """``/api/v1/namespaces/ns/pods/x`` or ``/apis/batch/v1/...`` for a resource."""
    root = f"/apis/{group}/{version}" if group else f"/api/{version}"
    parts = [root]
    if namespace is not None:
        parts.append(f"namespaces/{quote(namespace, safe='')}")
    parts.append(plural)
    if name is not None:
        parts.append(quote(name, safe=""))
    if subresource is not None:
        parts.append(subresource)
    return "/".join(parts)


def parse_timestamp(text: str | None) -> datetime | None:
    """``names.timestamp``, or None if absent or malformed (a field someone else wrote)."""
    try:
        return names.timestamp(text) if text else None
    except ValueError:
        return None


def scheduled_job_path(namespace: str, name: str, subresource: str | None = None) -> str:
    """The API path of a ScheduledJob (or of its ``status`` subresource)."""
    return path_of(
        group=names.GROUP,
        version=names.VERSION,
        namespace=namespace,
        plural=names.PLURAL,
        name=name,
        subresource=subresource,
    )


def pool_path(namespace: str, name: str, subresource: str | None = None) -> str:
    """The API path of a ConcurrencyPool (or of its ``status`` subresource)."""
    return _ours(names.POOL_PLURAL, namespace, name, subresource)


def calendar_path(namespace: str, name: str, subresource: str | None = None) -> str:
    """The API path of a Calendar (or of its ``status`` subresource)."""
    return _ours(names.CALENDAR_PLURAL, namespace, name, subresource)


def notification_policy_path(namespace: str, name: str, subresource: str | None = None) -> str:
    """The API path of a NotificationPolicy (or of its ``status`` subresource)."""
    return _ours(names.NOTIFICATION_POLICY_PLURAL, namespace, name, subresource)


def _ours(plural: str, namespace: str, name: str, subresource: str | None) -> str:
    return path_of(
        group=names.GROUP,
        version=names.VERSION,
        namespace=namespace,
        plural=plural,
        name=name,
        subresource=subresource,
    )
