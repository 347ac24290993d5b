"""Where the operator's controllers look: one watch per listed namespace
(``PGSCHED_NAMESPACES``), one for every namespace (``PGSCHED_ALL_NAMESPACES``), or one for
every namespace whose events are admitted only while the namespace's labels match
(``PGSCHED_NAMESPACE_SELECTOR``, served.py)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

from pgsched.k8s.client import api
from pgsched.k8s.client.controller import Controller
from pgsched.k8s.client.watch import Event, Watch
from pgsched.k8s.serve.served import ServedNamespaces, Source
from pgsched.k8s.serve.settings import OperatorSettings

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True)
class Where:
    """The namespaces watched one by one (empty: every namespace at once), and, by a
    selector, which of every namespace's events are work."""

    namespaces: tuple[str, ...]
    served: ServedNamespaces | None

    @classmethod
    def of(cls, kube: api.KubeApi, settings: OperatorSettings) -> Where:
        if settings.namespace_selector:
            return cls((), ServedNamespaces(kube, settings.namespace_selector))
        return cls(() if settings.all_namespaces else settings.namespaces, None)

    def describe(self) -> str:
        if self.served is not None:
            return f"labelled {self.served.selector}"
        return ",".join(self.namespaces) or "all"

    def controller(
        self,
        kube: api.KubeApi,
        name: str,
        *,
        group: str,
        plural: str,
        version: str = "v1",
        label_selector: str | None = None,
        select: Callable[[Event], tuple[K, V] | None],
        handle: Callable[[K, V], float | None],
        workers: int,
        capacity: int,
        merge: Callable[[V, V], V] | None = None,
        held: bool = False,
    ) -> Controller[K, V]:
        """A controller of ``plural`` in these namespaces; ``held``: its objects carry
        pgsched's finalizer (``served.Source``)."""
        watches = [
            Watch(
                kube,
                api.path_of(group=group, version=version, namespace=namespace, plural=plural),
                name=f"{plural}@{namespace or '*'}",
                label_selector=label_selector,
            )
            for namespace in (self.namespaces or (None,))
        ]
        admitted = select if self.served is None else self.served.admitting(select)
        controller = Controller(
            name,
            watches,
            select=admitted,
            handle=handle,
            workers=workers,
            capacity=capacity,
            merge=merge,
        )
        if self.served is not None:
            self.served.follow(
                Source(group, version, plural, label_selector, controller.deliver, held=held)
            )
        return controller
