"""May this user do this in that namespace? SubjectAccessReviews, cached briefly.

The questions the web UI (``pgsched.ui.access``) and the Run API (``k8s.runs_api``) put
to the API server about someone else: the same RBAC that answers ``kubectl`` answers
them, so a multi-tenant cluster's rules carry over unchanged. Answers are kept ``ttl``
seconds (a revoked RoleBinding takes that long to bite); when the API server cannot
answer, :class:`Unavailable` is raised and the caller refuses (fail closed). An answer
asked for in the second half of its life is asked again in the background, so a user who
keeps asking never waits for a review: no answer is used older than ``ttl`` either way.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pgsched.k8s.client import api

SUBJECT_REVIEW = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
_CACHE_LIMIT = 10_000
_REFRESHING = 8  # background refreshes at once
log = logging.getLogger(__name__)


class Unavailable(Exception):
    """The API server could not answer an access question (access is refused)."""


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: dict[str, list[str]] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Permission:
    """A resource attribute to check: get scheduledjobs, list runs, get pods/log."""

    group: str
    resource: str
    subresource: str = ""
    verb: str = "get"


class Cache:
    """Answers for ``ttl`` seconds, at most ``_CACHE_LIMIT`` of them (then forgotten at
    once: a flood of distinct questions costs reviews, never memory)."""

    def __init__(self, ttl: float) -> None:
        self._ttl = ttl
        self._lock = threading.Lock()
        self._items: dict[Any, tuple[float, Any]] = {}

    def get(self, key: Any) -> Any:
        found = self.lookup(key)
        return None if found is None else found[0]

    def lookup(self, key: Any) -> tuple[Any, bool] | None:
        """The answer and whether it is in the second half of its life; None if none."""
        with self._lock:
            found = self._items.get(key)
        now = time.monotonic()
        if found is None or found[0] < now:
            return None
        return found[1], found[0] - now < self._ttl / 2

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            if len(self._items) >= _CACHE_LIMIT:
                self._items.clear()
            self._items[key] = (time.monotonic() + self._ttl, value)


def attributes(namespace: str, permission: Permission) -> dict[str, str]:
    """A review's resourceAttributes; namespace "" asks about every namespace at once."""
    found = {
        "namespace": namespace,
        "verb": permission.verb,
        "group": permission.group,
        "resource": permission.resource,
    }
    if permission.subresource:
        found["subresource"] = permission.subresource
    return found


def allowed(kube: api.KubeApi, path: str, kind: str, spec: dict[str, Any]) -> bool:
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": kind, "spec": spec}
    try:
        answer = kube.create(path, body)
    except api.ApiError as error:
        raise Unavailable(f"cannot check access ({kind}): {error}") from None
    return bool((answer.get("status") or {}).get("allowed"))


class SubjectReviews:
    """What a user the caller has authenticated may do, by SubjectAccessReview."""

    def __init__(self, kube: api.KubeApi, *, ttl: float = 30.0) -> None:
        self._kube = kube
        self._answers = Cache(ttl)
        self._lock = threading.Lock()
        self._refreshing: set[Any] = set()

    def allows(self, user: User, namespace: str, permission: Permission) -> bool:
        key = (user.name, user.groups, user.uid, namespace, permission)
        found = self._answers.lookup(key)
        if found is None:
            return self._review(key, user, namespace, permission)
        answer, ageing = found
        if ageing:
            self._refresh(key, user, namespace, permission)
        return bool(answer)

    def _review(self, key: Any, user: User, namespace: str, permission: Permission) -> bool:
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "resourceAttributes": attributes(namespace, permission),
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = user.extra
        answer = allowed(self._kube, SUBJECT_REVIEW, "SubjectAccessReview", spec)
        self._answers.put(key, answer)
        return answer

    def _refresh(self, key: Any, user: User, namespace: str, permission: Permission) -> None:
        """Ask again in the background, once per question at a time and at most
        ``_REFRESHING`` questions at once (beyond that, answers just expire)."""
        with self._lock:
            if key in self._refreshing or len(self._refreshing) >= _REFRESHING:
                return
            self._refreshing.add(key)

        def work() -> None:
            try:
                self._review(key, user, namespace, permission)
            except (Unavailable, OSError) as error:
                # The answer kept expires at its time; the next question then asks in the
                # foreground and is refused if the API server still cannot answer.
                log.debug("access review refresh failed: %s", error)
            finally:
                with self._lock:
                    self._refreshing.discard(key)

        threading.Thread(target=work, name="access-review-refresh", daemon=True).start()
