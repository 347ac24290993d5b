"""Who is asking: the aggregation layer's front proxy, then the user it names.

The API server authenticates and authorizes the request's user, then proxies it here
with its front-proxy client certificate and the user in request headers
(``X-Remote-User``, ``X-Remote-Group``, ``X-Remote-Extra-*``, as the API server is
configured). Those headers are believed only on a connection whose certificate the
front-proxy CA signed and whose common name is one the API server allows: anyone else
who reaches the port could write them. Where the certificate comes from, how to check it
and which headers to read are in the ConfigMap ``kube-system/
extension-apiserver-authentication``, which the API server keeps (its ``requestheader-*``
keys), read at start — as every aggregated API server does.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote

from pgsched.k8s.access import User
from pgsched.k8s.client import api

CONFIG_MAP = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"


class Headers(Protocol):
    """A request's headers, case-insensitive, a name possibly repeated (aiohttp's)."""

    def get(self, key: str) -> str | None: ...
    def __getitem__(self, key: str) -> str: ...
    def getall(self, key: str, default: list[str]) -> list[str]: ...
    def __iter__(self) -> Iterator[str]: ...


class FrontProxyError(RuntimeError):
    """The cluster gives no front-proxy CA to check requests with (the server cannot start)."""


class Unauthenticated(Exception):
    """The request did not come from the API server's front proxy."""


@dataclass(frozen=True)
class FrontProxy:
    client_ca: str  # PEM: the CA that signs the front proxy's client certificate
    allowed_names: tuple[str, ...]  # the certificate's common names accepted; (): any
    username_headers: tuple[str, ...]
    group_headers: tuple[str, ...]
    extra_prefixes: tuple[str, ...]

    @classmethod
    def load(cls, kube: api.KubeApi) -> FrontProxy:
        try:
            data = kube.get(CONFIG_MAP).get("data") or {}
        except api.ApiError as error:
            raise FrontProxyError(
                f"cannot read the front proxy's configuration ({error}): the operator's"
                " ServiceAccount needs the Role extension-apiserver-authentication-reader in"
                " kube-system (the chart binds it)"
            ) from None
        ca = data.get("requestheader-client-ca-file", "")
        if "BEGIN CERTIFICATE" not in ca:
            raise FrontProxyError(
                "the API server gives no front-proxy CA (requestheader-client-ca-file in"
                " kube-system/extension-apiserver-authentication): start it with"
                " --requestheader-client-ca-file and --proxy-client-cert-file, which the"
                " aggregation layer needs"
            )

        def names(key: str, default: Sequence[str] = ()) -> tuple[str, ...]:
            raw = data.get(key)
            found = json.loads(raw) if raw else list(default)
            return tuple(str(item) for item in found or default)

        return cls(
            client_ca=ca,
            allowed_names=names("requestheader-allowed-names"),
            username_headers=names("requestheader-username-headers", ["X-Remote-User"]),
            group_headers=names("requestheader-group-headers", ["X-Remote-Group"]),
            extra_prefixes=names("requestheader-extra-headers-prefix", ["X-Remote-Extra-"]),
        )

    def require_client_certificates(self, context: ssl.SSLContext) -> None:
        """Make ``context`` check a client's certificate against the front-proxy CA. A
        connection without one is still accepted (then refused per request, 401, with a
        message); one whose certificate this CA did not sign fails its handshake."""
        context.verify_mode = ssl.CERT_OPTIONAL
        context.load_verify_locations(cadata=self.client_ca)

    def proxied(self, peer_certificate: Mapping[str, Any] | None) -> None:
        """Raise :class:`Unauthenticated` unless the connection is the front proxy's."""
        if not peer_certificate:
            raise Unauthenticated(
                "no client certificate: the Run API answers the API server's front proxy"
                " only; use kubectl (kubectl get runs)"
            )
        common_name = _common_name(peer_certificate)
        if self.allowed_names and common_name not in self.allowed_names:
            raise Unauthenticated(
                f"client certificate {common_name!r} is not the front proxy's"
                f" ({', '.join(self.allowed_names)})"
            )

    def user(self, headers: Headers) -> User | None:
        """The user the front proxy names (None: it names none, as its availability
        checks do). Groups and extras may repeat a header; each value counts."""
        name = next((headers[key] for key in self.username_headers if headers.get(key)), "")
        if not name:
            return None
        groups = tuple(value for key in self.group_headers for value in headers.getall(key, []))
        extra: dict[str, list[str]] = {}
        for key in {key.lower() for key in headers}:
            prefix = next((p for p in self.extra_prefixes if key.startswith(p.lower())), None)
            if prefix is not None:
                extra[unquote(key[len(prefix) :])] = list(headers.getall(key, []))
        return User(name, groups, "", extra)


def _common_name(certificate: Mapping[str, Any]) -> str:
    for part in certificate.get("subject", ()):
        for key, value in part:
            if key == "commonName":
                return str(value)
    return ""
