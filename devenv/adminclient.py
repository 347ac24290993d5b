"""The local cluster's admin HTTP client: set-up and assertions in tests, benchmarks, demo.

Plain JSON dicts over urllib3 (with watches that survive API server restarts) keep every
request of a test visible. Product code talks to the API through its own layer
(``pgsched.k8s.client.api``), never this one.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlencode

import urllib3
import yaml

Obj = dict[str, Any]

PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}


@dataclass(frozen=True)
class Credentials:
    """Where the API server is and how to prove who we are (client certificate or token)."""

    server: str
    ca_file: Path
    cert_file: Path | None = None
    key_file: Path | None = None
    token: str | None = None

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Credentials:
        """Read the current context of a kubeconfig that names its certificate files (as
        the launcher writes them; inline ``*-data`` is not supported)."""
        config = yaml.safe_load(path.read_text())
        context_name = config["current-context"]
        context = _named(config, "contexts", context_name)["context"]
        cluster = _named(config, "clusters", context["cluster"])["cluster"]
        user = _named(config, "users", context["user"])["user"]
        ca_file = _file(cluster, "certificate-authority", base=path.parent)
        if ca_file is None:
            raise ValueError(f"{path}: cluster {context['cluster']!r} has no certificate-authority")
        return cls(
            server=cluster["server"],
            ca_file=ca_file,
            cert_file=_file(user, "client-certificate", base=path.parent),
            key_file=_file(user, "client-key", base=path.parent),
            token=user.get("token"),
        )


def _named(config: Obj, section: str, name: str) -> Obj:
    for entry in config.get(section) or []:
        if entry["name"] == name:
            return dict(entry)
    raise ValueError(f"kubeconfig has no {section} entry named {name!r}")


def _file(entry: Obj, key: str, *, base: Path) -> Path | None:
    if f"{key}-data" in entry:
        raise ValueError(f"kubeconfig {key}-data is not supported; reference a file ({key})")
    return base / str(entry[key]) if key in entry else None


class ApiError(Exception):
    """A non-2xx answer from the API server, with its Status reason and message."""

    def __init__(self, method: str, path: str, status: int, body: Obj) -> None:
        self.status = status
        self.reason = str(body.get("reason", ""))
        self.message = str(body.get("message", body))
        self.body = body
        super().__init__(f"{method} {path}: HTTP {status} {self.reason}: {self.message}")


class ApiUnreachable(ConnectionError):
    """The API server could not be reached or dropped the connection (e.g. it restarts)."""


class AdminClient:
    """Thread-safe: one connection pool shared by every thread of the process."""

    def __init__(self, credentials: Credentials, *, timeout: float = 30.0) -> None:
        self.credentials = credentials
        self._timeout = timeout
        context = ssl.create_default_context(cafile=str(credentials.ca_file))
        if credentials.cert_file is not None:
            context.load_cert_chain(str(credentials.cert_file), str(credentials.key_file))
        self._pool = urllib3.PoolManager(ssl_context=context, maxsize=32, retries=False)
        self._headers = {"Accept": "application/json", "User-Agent": "pgsched-devenv"}
        if credentials.token:
            self._headers["Authorization"] = f"Bearer {credentials.token}"

    @classmethod
    def from_kubeconfig(cls, path: Path, *, timeout: float = 30.0) -> AdminClient:
        return cls(Credentials.from_kubeconfig(path), timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Obj | list[Obj] | None = None,
        query: Mapping[str, str | int] | None = None,
        content_type: str = "application/json",
        accept: str | None = None,
    ) -> Obj:
        url = self._url(path, query)
        headers = dict(self._headers)
        if accept is not None:  # a Table, as kubectl get asks
            headers["Accept"] = accept
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        try:
            response = self._pool.request(
                method, url, body=data, headers=headers, timeout=self._timeout
            )
        except urllib3.exceptions.HTTPError as error:
            raise ApiUnreachable(f"{method} {path}: {error}") from error
        payload = _decode(response.data)
        if response.status >= 300:
            raise ApiError(method, path, response.status, payload)
        return payload

    def get(self, path: str, **query: str | int) -> Obj:
        return self.request("GET", path, query=query)

    def create(self, path: str, body: Obj) -> Obj:
        return self.request("POST", path, body=body)

    def patch(
        self,
        path: str,
        body: Obj | list[Obj],
        *,
        kind: Literal["merge", "strategic", "json"] = "merge",
    ) -> Obj:
        return self.request("PATCH", path, body=body, content_type=PATCH_CONTENT_TYPES[kind])

    def delete(self, path: str, body: Obj | None = None) -> Obj:
        return self.request("DELETE", path, body=body)

    def watch(
        self,
        path: str,
        *,
        resource_version: str,
        query: Mapping[str, str | int] | None = None,
        timeout_seconds: int = 300,
    ) -> Iterator[Obj]:
        """Yield watch events (``{"type", "object"}``) until the server ends the stream.

        An ``ERROR`` event (e.g. 410 Gone: the resourceVersion is too old) raises ApiError; a
        refused or dropped connection raises ApiUnreachable. Callers relist or retry (see
        ``watching``).
        """
        watch_query = {
            **(query or {}),
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
        }
        try:
            response = self._pool.request(
                "GET",
                self._url(path, watch_query),
                headers=self._headers,
                preload_content=False,
                timeout=urllib3.Timeout(connect=5.0, read=timeout_seconds + 30.0),
            )
        except urllib3.exceptions.HTTPError as error:
            raise ApiUnreachable(f"WATCH {path}: {error}") from error
        try:
            if response.status >= 300:
                raise ApiError("WATCH", path, response.status, _decode(response.read()))
            buffer = b""
            for chunk in response.stream(65536):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event: Obj = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise ApiError("WATCH", path, int(status.get("code", 500)), status)
                    yield event
        except urllib3.exceptions.HTTPError as error:
            raise ApiUnreachable(f"WATCH {path}: {error}") from error
        finally:
            response.release_conn()

    def _url(self, path: str, query: Mapping[str, str | int] | None) -> str:
        url = self.credentials.server.rstrip("/") + path
        return f"{url}?{urlencode(query)}" if query else url


def _decode(data: bytes) -> Obj:
    if not data:
        return {}
    try:
        decoded = json.loads(data)
    except json.JSONDecodeError:
        return {"message": data.decode(errors="replace")}
    return decoded if isinstance(decoded, dict) else {"items": decoded}


def namespaced(resource: str, namespace: str, name: str = "", *, api_version: str = "v1") -> str:
    """API path of a namespaced object: ``namespaced("jobs", "ns", "j", api_version="batch/v1")``
    → ``/apis/batch/v1/namespaces/ns/jobs/j``."""
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = f"{prefix}/namespaces/{quote(namespace)}/{resource}"
    return f"{path}/{quote(name)}" if name else path
