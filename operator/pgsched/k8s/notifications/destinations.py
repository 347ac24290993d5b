"""Where a notification may go: resolving its host within the attempt's deadline, and
refusing addresses that are not public.

A ScheduledJob author chooses the URL, and the operator sends from its own network
position: without a rule, a URL could reach the cloud metadata service
(``169.254.169.254``), the Kubernetes API's Service, the scheduling database or anything
else on the pod network, with a body carrying job text. So a destination must resolve to
a public (globally routable, unicast) address, unless the administrator's allow-list
(``PGSCHED_NOTIFY_ALLOW``: CIDRs and host names) names it — how in-cluster receivers are
reached. The check is made on the address the socket then connects to, never on the URL's
spelling: ``2130706433``, ``0x7f000001``, ``[::1]`` and ``[::ffff:127.0.0.1]`` are all
loopback once resolved, and a name that resolves to a public address when checked and to
a private one a moment later (DNS rebinding) cannot slip through, because there is no
second resolution.

Resolution runs ``getaddrinfo`` (the system's resolver: /etc/hosts, search domains) on a
thread of its own and waits for it at most the attempt's remaining time. A lookup cannot
be interrupted, so an abandoned one finishes on its own; a namespace may have only a few
lookups outstanding, so a hostile name server costs its own namespace's notifications a
wait, not a worker and not another namespace's lookups.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Lookup = Callable[..., list[tuple[Any, ...]]]
ALLOW_VARIABLE = "PGSCHED_NOTIFY_ALLOW"
ALLOW_VALUE = "notifications.allowDestinations"
_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_HOST = re.compile(rf"^\.?{_LABEL}(\.{_LABEL})*$")


class Refused(Exception):
    """The destination is not allowed: not retried, the message says how to allow it."""


class Busy(Exception):
    """The namespace has as many lookups outstanding as it may: try again shortly."""


@dataclass(frozen=True)
class Deadline:
    """One attempt's total time: resolution, connect, TLS, headers and body."""

    seconds: float
    ends: float

    @classmethod
    def starting(cls, seconds: float) -> Deadline:
        return cls(seconds, time.monotonic() + seconds)

    def remaining(self) -> float:
        return max(0.0, self.ends - time.monotonic())

    def left(self) -> float:
        """The seconds remaining; ``TimeoutError`` if none."""
        remaining = self.remaining()
        if remaining <= 0:
            raise TimeoutError(self.exceeded())
        return remaining

    def exceeded(self) -> str:
        return f"no complete answer within the {self.seconds:g} s deadline"


@dataclass(frozen=True)
class Allowed:
    """The administrator's exceptions: networks, host names, ``.suffix`` for a domain's
    names. Empty (the default): public addresses only."""

    networks: tuple[IPNetwork, ...] = ()
    names: tuple[str, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> Allowed:
        """``10.0.0.0/8``, ``fd00::/8``, ``10.1.2.3``, ``hooks.tools.svc.cluster.local``,
        ``.tools.svc.cluster.local``; ``ValueError`` naming the first bad entry."""
        networks: list[IPNetwork] = []
        names: list[str] = []
        for entry in (item.strip().lower() for item in entries):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            if not _HOST.match(entry):
                raise ValueError(
                    f"{entry!r} is neither a CIDR nor a host name (examples: 10.0.0.0/8,"
                    " hooks.tools.svc.cluster.local, .tools.svc.cluster.local)"
                )
            names.append(entry)
        return cls(tuple(networks), tuple(names))

    def names_host(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return any(
            host.endswith(name) if name.startswith(".") else host == name for name in self.names
        )

    def contains(self, address: IPAddress) -> bool:
        return any(address.version == net.version and address in net for net in self.networks)


PUBLIC_ONLY = Allowed()


def not_public(address: IPAddress) -> str | None:
    """Why ``address`` is not a public unicast address (None: it is)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return not_public(address.ipv4_mapped)
    for is_it, said in (
        (address.is_unspecified, "unspecified"),
        (address.is_loopback, "loopback"),
        (address.is_link_local, "link-local, where cloud metadata services answer"),
        (address.is_multicast, "multicast"),
        (address.is_private, "private"),
        (not address.is_global, "not globally routable"),
    ):
        if is_it:
            return said
    return None


def permitted(host: str, addresses: Iterable[str], allowed: Allowed) -> str:
    """The first of ``addresses`` (what ``host`` resolved to) that may be connected to;
    ``Refused`` with what to change when none may."""
    found = [ipaddress.ip_address(text.split("%", 1)[0]) for text in addresses]
    if allowed.names_host(host):
        return str(found[0])
    reasons = []
    for address in found:
        reason = not_public(address)
        if reason is None or allowed.contains(address):
            return str(address)
        reasons.append(f"{address} ({reason})")
    raise Refused(
        f"{host} resolves to {', '.join(reasons)}: notifications go to public addresses"
        " only. For a receiver inside the cluster or your network, the administrator adds"
        f" its address or host name to {ALLOW_VARIABLE} (the chart's {ALLOW_VALUE}),"
        f" e.g. {found[0]}/32 or {host}"
    )


class Resolver:
    """``getaddrinfo`` bounded by the attempt's deadline, at most ``per_namespace``
    lookups outstanding per namespace (abandoned ones count until they end)."""

    def __init__(self, lookup: Lookup = socket.getaddrinfo, *, per_namespace: int = 4) -> None:
        self.lookup = lookup
        self.per_namespace = per_namespace
        self._lock = threading.Lock()
        self._outstanding: dict[str, int] = defaultdict(int)

    def addresses(self, host: str, port: int, *, namespace: str, deadline: Deadline) -> list[str]:
        """The addresses of ``host``; ``TimeoutError`` past the deadline, ``OSError`` if it
        does not resolve, ``Busy`` if the namespace has too many lookups outstanding."""
        with self._lock:
            if self._outstanding[namespace] >= self.per_namespace:
                raise Busy(namespace)
            self._outstanding[namespace] += 1
        answer: Future[list[tuple[Any, ...]]] = Future()
        threading.Thread(
            target=self._run,
            args=(answer, host, port, namespace),
            name="pgsched-notify-resolve",
            daemon=True,
        ).start()
        try:
            infos = answer.result(timeout=deadline.remaining())
        except FutureTimeout:
            raise TimeoutError(
                f"resolving {host} took longer than the {deadline.seconds:g} s deadline"
            ) from None
        return [str(info[4][0]) for info in infos]

    def _run(self, answer: Future[list[tuple[Any, ...]]], host: str, port: int, ns: str) -> None:
        try:
            answer.set_result(self.lookup(host, port, type=socket.SOCK_STREAM))
        except Exception as error:  # handed to the waiter, if it still waits
            answer.set_exception(error)
        finally:
            with self._lock:
                self._outstanding[ns] -= 1
                if not self._outstanding[ns]:
                    del self._outstanding[ns]
