"""May this user do this in that namespace? SubjectAccessReviews, cached briefly.

The questions the web UI (``pgsched.ui.access``) and the Run API (``k8s.runs_api``) put
to the API server about someone else: the same RBAC that answers ``kubectl`` answers
them, so a multi-tenant cluster's rules carry over unchanged. Answers are kept ``ttl``
seconds (a revoked RoleBinding takes that long to bite); when the API server cannot
answer, :class:`Unavailable` is raised and the caller refuses (fail closed).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pgsched.k8s.client import api

SUBJECT_REVIEW = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
_CACHE_LIMIT = 10_000


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
        with self._lock:
            found = self._items.get(key)
        if found is None or found[0] < time.monotonic():
            return None
        return found[1]

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

    def allows(self, user: User, namespace: str, permission: Permission) -> bool:
        key = (user.name, user.groups, user.uid, namespace, permission)
        cached = self._answers.get(key)
        if cached is None:
            spec: dict[str, Any] = {
                "user": user.name,
                "groups": list(user.groups),
                "resourceAttributes": attributes(namespace, permission),
            }
            if user.uid:
                spec["uid"] = user.uid
            if user.extra:
                spec["extra"] = user.extra
            cached = allowed(self._kube, SUBJECT_REVIEW, "SubjectAccessReview", spec)
            self._answers.put(key, cached)
        return bool(cached)
