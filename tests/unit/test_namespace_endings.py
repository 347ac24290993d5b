"""A namespace seen going answers for the objects created before its deletion began, and
only for those; it is forgotten after a while (k8s.client.endings)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pgsched.k8s.client.api import ApiError
from pgsched.k8s.client.endings import REMEMBER_SECONDS, NamespaceEndings

BEGAN = datetime(2026, 12, 7, 10, 0, 0, tzinfo=UTC)


def test_only_objects_created_before_the_deletion_began_are_of_the_namespace_going():
    endings = NamespaceEndings()
    assert not endings.known("team-a", BEGAN - timedelta(hours=1))  # never seen going
    endings.saw("team-a", BEGAN)
    assert endings.known("team-a", BEGAN - timedelta(hours=1))
    # Timestamps have whole seconds: one of that very second may be of a namespace of the
    # same name created since, and so may one created later.
    assert not endings.known("team-a", BEGAN)
    assert not endings.known("team-a", BEGAN + timedelta(minutes=5))
    assert not endings.known("team-a", None)  # no creation time: ask
    assert not endings.known("team-b", BEGAN - timedelta(hours=1))


def test_a_namespace_seen_going_is_forgotten_after_an_hour():
    now = [0.0]
    endings = NamespaceEndings(monotonic=lambda: now[0])
    endings.saw("stuck", BEGAN)
    now[0] = REMEMBER_SECONDS + 1
    endings.saw("other", BEGAN)  # each sighting drops what is older than the bound
    assert not endings.known("stuck", BEGAN - timedelta(hours=1))
    assert endings.known("other", BEGAN - timedelta(hours=1))


def test_a_namespace_the_watch_saw_going_is_kept_until_the_watch_sees_it_gone():
    """Its objects are handled as deleted however long the deletion takes (a finalizer of
    someone else's held for a day): forgetting it would put pgsched's finalizers back."""
    now = [0.0]
    endings = NamespaceEndings(monotonic=lambda: now[0])
    assert endings.watched("stuck", BEGAN)  # news: its objects are listed again once
    assert not endings.watched("stuck", BEGAN)  # every later event of it is not
    now[0] = 24 * REMEMBER_SECONDS
    endings.saw("other", BEGAN)
    assert endings.known("stuck", BEGAN - timedelta(hours=1))
    endings.gone("stuck")  # from now on remembered as any sighting: an hour
    now[0] += REMEMBER_SECONDS - 1
    endings.saw("other", BEGAN)
    assert endings.known("stuck", BEGAN - timedelta(hours=1))
    now[0] += 2
    endings.saw("other", BEGAN)
    assert not endings.known("stuck", BEGAN - timedelta(hours=1))


def test_a_refusal_is_of_a_terminating_namespace_only_when_its_cause_says_so():
    """The API server's NamespaceLifecycle answer: the StatusCause's type is "reason" in
    JSON."""
    terminating = {
        "reason": "Forbidden",
        "message": 'events "x" is forbidden: unable to create new content in namespace t'
        " because it is being terminated",
        "details": {
            "name": "x",
            "kind": "events",
            "causes": [
                {
                    "reason": "NamespaceTerminating",
                    "message": "namespace t is being terminated",
                    "field": "metadata.namespace",
                }
            ],
        },
    }
    assert ApiError("POST", "/api/v1/namespaces/t/events", 403, terminating).namespace_terminating
    rbac = {"reason": "Forbidden", "message": "cannot create events", "details": {"kind": "events"}}
    assert not ApiError("POST", "/x", 403, rbac).namespace_terminating
    assert not ApiError("POST", "/x", 403, {"details": "not an object"}).namespace_terminating
    assert not ApiError("POST", "/x", 422, terminating).namespace_terminating
