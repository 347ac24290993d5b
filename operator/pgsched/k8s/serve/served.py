"""Which namespaces the operator serves when their labels choose them.

With ``PGSCHED_NAMESPACE_SELECTOR`` (the chart's default, ``pgsched.dev/serve=true``) the
operator follows each kind in every namespace with one watch per kind, as with
``PGSCHED_ALL_NAMESPACES``, and a watch of the Namespaces that carry the labels says which
of those events are its work. So a platform team adds a team by labelling its namespace:

- **labelled**: the Namespace watch hears of it within a second; from then on its objects'
  events are admitted, and a catch-up lists what it already holds (every kind, into the
  same queues), so a ScheduledJob applied before the label is served too;
- **label removed**: a label-selected watch sends DELETED for an object that stops
  matching; its events are ignored from then on (what was stored keeps its schedule:
  docs/namespaces.md says to suspend or delete first);
- **deleted**: a namespace keeps its labels while it is Terminating, so it stays served
  until it is gone. The watch hears of the deletion at once; from then on its objects are
  handled as deleted (``k8s.client.endings``, ``reads.being_deleted``) and the kinds that
  hold pgsched's finalizer are listed there again so that each is: its runs are asked to
  stop and its finalizer is released before Kubernetes, which deletes the pods first, comes
  to it.

One limit, written down rather than hidden: a namespace that lost its label while the
Namespace watch was down (a 410 and a fresh list) stays served until the operator restarts;
the list admits newly labelled ones, but a list does not say which ones it no longer holds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pgsched.k8s.client import api
from pgsched.k8s.client.watch import Event, Watch

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Source:
    """One kind the operator follows: its collection, and where a catch-up hands it over."""

    group: str
    version: str
    plural: str
    label_selector: str | None
    deliver: Callable[[Sequence[Event]], None]
    # Its objects carry pgsched's finalizer: listed again when their namespace starts going.
    held: bool = False


class ServedNamespaces:
    """The namespaces whose labels match ``selector``, kept current by a watch."""

    def __init__(self, kube: api.KubeApi, selector: str) -> None:
        self.selector = selector
        self._kube = kube
        self.watch = Watch(kube, "/api/v1/namespaces", name="namespaces", label_selector=selector)
        self._lock = threading.Lock()
        self._served: set[str] = set()
        self._catch_ups: dict[str, list[Watch]] = {}
        self._sources: list[Source] = []
        self._thread = threading.Thread(
            target=self.watch.run,
            args=(self._deliver,),
            name="pgsched-watch-namespaces",
            daemon=True,
        )

    def follow(self, source: Source) -> None:
        """List ``source`` in each namespace that becomes served (before :meth:`start`)."""
        self._sources.append(source)

    def serves(self, namespace: str | None) -> bool:
        with self._lock:
            return namespace in self._served

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._served)

    def admitting(self, select: Callable[[Event], T | None]) -> Callable[[Event], T | None]:
        """``select`` for the events of served namespaces; None for any other's."""

        def admitted(event: Event) -> T | None:
            namespace = (event.object.get("metadata") or {}).get("namespace")
            return select(event) if self.serves(namespace) else None

        return admitted

    def start(self, stopping: threading.Event) -> bool:
        """Start the watch and wait for its first list (or ``stopping``): the kinds' own
        first lists are then sorted against a known set. False if stopped first."""
        self._thread.start()
        while not self.watch.listed.wait(0.5):
            if stopping.is_set():
                return False
        log.info(
            "serving the namespaces labelled %s: %s",
            self.selector,
            ", ".join(self.names()) or "none yet",
        )
        return True

    def stop(self, timeout: float) -> None:
        self.watch.stop()
        with self._lock:
            catch_ups = [each for watches in self._catch_ups.values() for each in watches]
        for each in catch_ups:
            each.stop()
        self._thread.join(timeout=timeout)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _deliver(self, events: Sequence[Event]) -> None:
        listed = self.watch.listed.is_set()
        for event in events:
            meta = event.object["metadata"]
            name = str(meta["name"])
            if event.type == "DELETED":
                self._kube.endings.gone(name)
                self._leave(name)
                continue
            # Namespaces of the first list are caught up by the kinds' own first lists.
            self._enter(name, catch_up=listed)
            since = api.parse_timestamp(meta.get("deletionTimestamp"))
            # Recorded before the kinds' first lists: what they deliver is handled as deleted.
            if since is not None and self._kube.endings.watched(name, since):
                self._ending(name, catch_up=listed)

    def _enter(self, namespace: str, *, catch_up: bool) -> None:
        with self._lock:
            if namespace in self._served:
                return
            self._served.add(namespace)
        if catch_up:
            log.info("namespace %s is now served (labelled %s)", namespace, self.selector)
            self._list(namespace, self._sources, what="catching up")

    def _ending(self, namespace: str, *, catch_up: bool) -> None:
        log.info(
            "namespace %s is being deleted: its ScheduledJobs' runs are asked to stop and"
            " pgsched's finalizers released as soon as none runs",
            namespace,
        )
        if catch_up:
            held = [source for source in self._sources if source.held]
            self._list(namespace, held, what="listing what holds a finalizer in")

    def _leave(self, namespace: str) -> None:
        with self._lock:
            if namespace not in self._served:
                return
            self._served.discard(namespace)
            watches = self._catch_ups.pop(namespace, [])
        for each in watches:
            each.stop()
        log.info("namespace %s is no longer served (not labelled %s)", namespace, self.selector)

    def _list(self, namespace: str, sources: Sequence[Source], *, what: str) -> None:
        """List ``sources`` in ``namespace`` once, into their queues, on a thread."""
        watches = [
            Watch(
                self._kube,
                api.path_of(
                    group=source.group,
                    version=source.version,
                    namespace=namespace,
                    plural=source.plural,
                ),
                name=f"{source.plural}@{namespace}",
                label_selector=source.label_selector,
            )
            for source in sources
        ]
        with self._lock:
            self._catch_ups.setdefault(namespace, []).extend(watches)
        threading.Thread(
            target=self._list_once,
            args=(namespace, list(zip(sources, watches, strict=True)), what),
            name=f"pgsched-list-{namespace}",
            daemon=True,
        ).start()

    def _list_once(self, namespace: str, lists: list[tuple[Source, Watch]], what: str) -> None:
        try:
            for source, each in lists:
                if not each.list_once(source.deliver):
                    return  # no longer served, or the operator is stopping
        except Exception:
            log.exception("%s namespace %s failed", what, namespace)
        finally:
            with self._lock:
                left = [
                    each
                    for each in self._catch_ups.get(namespace, [])
                    if all(each is not done for _, done in lists)
                ]
                if left:
                    self._catch_ups[namespace] = left
                else:
                    self._catch_ups.pop(namespace, None)
