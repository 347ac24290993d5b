"""Who is asking, and which namespaces they may see.

The UI shows a namespace's ScheduledJobs, runs and pod logs only to someone who may
``get scheduledjobs`` there — the same question ``kubectl get sj -n NS`` asks — so a
multi-tenant cluster's RBAC carries over unchanged. Three modes: ``token`` (the
operator's UI: a bearer token for the UI's own audience, ``pgsched-ui``, checked with a
TokenReview and a SubjectAccessReview per namespace, so a token handed to the UI is
worthless against the API server), ``kubeconfig`` (``pgsched ui``: the kubeconfig's
identity, SelfSubjectAccessReview, bound to 127.0.0.1) and ``none`` (a database-only view,
no Kubernetes at all).

Answers are cached for ``ttl`` seconds (a revoked RoleBinding takes that long to bite);
when the API server cannot answer, access is refused (fail closed).

For users: docs/ui.md, "Who sees what".
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

from pgsched.k8s import names
from pgsched.k8s.access import Cache, SubjectReviews, allowed, attributes
from pgsched.k8s.access import Permission as Permission  # the UI's modules take these here
from pgsched.k8s.access import Unavailable as Unavailable
from pgsched.k8s.access import User as User
from pgsched.k8s.client import api

AUTHENTICATION = "/apis/authentication.k8s.io/v1/tokenreviews"
SELF_REVIEW = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


class Unauthenticated(Exception):
    """No token, or one the API server does not accept."""


SCHEDULED_JOBS = Permission(names.GROUP, names.PLURAL)
JOBS = Permission("batch", "jobs")
PODS = Permission("", "pods", verb="list")
POD_LOGS = Permission("", "pods", "log")


class Access(Protocol):
    mode: str

    @property
    def kube(self) -> api.KubeApi | None:
        """The UI's own client for Jobs, pods and logs (None: a database-only view)."""

    def authenticate(self, token: str | None) -> User: ...

    def allows(
        self, user: User, namespace: str, permission: Permission = SCHEDULED_JOBS
    ) -> bool: ...


class OpenAccess:
    """``--no-auth``: everything in the database, nothing from Kubernetes."""

    mode = "none"
    kube = None

    def authenticate(self, token: str | None) -> User:
        return User("anyone (--no-auth)")

    def allows(self, user: User, namespace: str, permission: Permission = SCHEDULED_JOBS) -> bool:
        return True


class KubeconfigAccess:
    """The local kubeconfig's identity, checked with SelfSubjectAccessReview."""

    mode = "kubeconfig"

    def __init__(self, kube: api.KubeApi, *, ttl: float = 30.0) -> None:
        self._kube = kube
        self._cache = Cache(ttl)

    @property
    def kube(self) -> api.KubeApi:
        return self._kube

    def authenticate(self, token: str | None) -> User:
        return User("your kubeconfig identity")

    def allows(self, user: User, namespace: str, permission: Permission = SCHEDULED_JOBS) -> bool:
        key = (namespace, permission)
        cached = self._cache.get(key)
        if cached is None:
            spec = {"resourceAttributes": attributes(namespace, permission)}
            cached = allowed(self._kube, SELF_REVIEW, "SelfSubjectAccessReview", spec)
            self._cache.put(key, cached)
        return bool(cached)


class TokenAccess:
    """Bearer tokens: TokenReview for who, SubjectAccessReview for what."""

    mode = "token"

    def __init__(self, kube: api.KubeApi, *, audience: str | None, ttl: float = 30.0) -> None:
        self._kube = kube
        self._audience = audience
        self._users = Cache(ttl)
        self._reviews = SubjectReviews(kube, ttl=ttl)

    @property
    def kube(self) -> api.KubeApi:
        return self._kube

    def authenticate(self, token: str | None) -> User:
        if not token:
            raise Unauthenticated("no bearer token")
        key = _token_key(token)
        user: User | None = self._users.get(key)
        if user is None:
            user = self._review(token)
            self._users.put(key, user)
        if not user.name:
            raise Unauthenticated(self._refusal())
        return user

    def known_good(self, token: str) -> bool:
        """Whether the token's review is cached and accepted it (no review needed)."""
        cached: User | None = self._users.get(_token_key(token))
        return cached is not None and bool(cached.name)

    def _refusal(self) -> str:
        if self._audience is None:
            return "the API server does not accept this token"
        return (
            f"the API server does not accept this token for audience {self._audience!r}"
            f" (get one with: kubectl create token NAME --audience {self._audience})"
        )

    def _review(self, token: str) -> User:
        spec: dict[str, Any] = {"token": token}
        if self._audience is not None:
            spec["audiences"] = [self._audience]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        try:
            answer = self._kube.create(AUTHENTICATION, body).get("status") or {}
        except api.ApiError as error:
            raise Unavailable(f"cannot review the token: {error}") from None
        # An authenticator that ignores audiences answers with none: its "yes" means "valid
        # for the API server", which is exactly what a dedicated audience must refuse.
        wrong_audience = self._audience is not None and self._audience not in (
            answer.get("audiences") or ()
        )
        if not answer.get("authenticated") or wrong_audience:
            return User("")  # cached too: a wrong token costs one review per ttl
        found = answer.get("user") or {}
        return User(
            str(found.get("username", "")),
            tuple(found.get("groups") or ()),
            str(found.get("uid", "")),
            {key: list(value) for key, value in (found.get("extra") or {}).items()},
        )

    def allows(self, user: User, namespace: str, permission: Permission = SCHEDULED_JOBS) -> bool:
        return self._reviews.allows(user, namespace, permission)


def _token_key(token: str) -> str:
    """The TokenReview cache's key of a token (its digest: the cache keeps no token)."""
    return hashlib.sha256(token.encode()).hexdigest()
