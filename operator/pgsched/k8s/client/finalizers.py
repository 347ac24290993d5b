"""pgsched's finalizer on the objects whose deletion must wait for the database.

A ScheduledJob being deleted must first stop its runs cooperatively (the finalizer holds
the deletion until none is running); a ConcurrencyPool must first leave the database.
Adding and removing the finalizer is a merge patch of ``metadata.finalizers`` — a list, so
the whole list — with the ``resourceVersion`` it was read at: if another writer (a second
replica, another controller's finalizer) changed the object in between, the API server
answers 409 and the change is made again on a fresh read, never over someone else's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pgsched.k8s.client import api
from pgsched.k8s.names import Obj

log = logging.getLogger(__name__)

FINALIZER = "pgsched.dev/finalizer"
_ATTEMPTS = 5


def add(kube: api.KubeApi, path: str, *, finalizers: Sequence[str], version: str) -> str | None:
    """Put pgsched's finalizer on the object at ``path``, read with ``finalizers`` at
    ``version``: the object's resourceVersion with the finalizer on (a later write names
    it), or None if the object is gone or already being deleted (no finalizer can be added
    then)."""
    return _change(kube, path, finalizers, version, present=True)


def remove(kube: api.KubeApi, path: str, *, finalizers: Sequence[str], version: str) -> bool:
    """Take pgsched's finalizer off; False if the object is gone."""
    return _change(kube, path, finalizers, version, present=False) is not None


def _change(
    kube: api.KubeApi, path: str, finalizers: Sequence[str], version: str, *, present: bool
) -> str | None:
    for _ in range(_ATTEMPTS):
        if (FINALIZER in finalizers) == present:
            return version
        wanted = [*finalizers, FINALIZER] if present else [f for f in finalizers if f != FINALIZER]
        patch = {"metadata": {"finalizers": wanted or None, "resourceVersion": version}}
        try:
            written = kube.merge_patch(path, patch)
            return str((written.get("metadata") or {}).get("resourceVersion") or "")
        except api.ApiError as error:
            if error.not_found:
                return None
            if error.status == 422 and present:  # being deleted: no finalizer may be added
                return None
            if not error.conflict:
                raise
        current = _read(kube, path)
        if current is None:
            return None
        metadata = current.get("metadata") or {}
        finalizers = list(metadata.get("finalizers") or [])
        version = str(metadata.get("resourceVersion") or "")
    raise api.ApiError(
        "PATCH", path, 409, {"reason": "Conflict", "message": "the object kept changing"}
    )


def _read(kube: api.KubeApi, path: str) -> Obj | None:
    try:
        return kube.get(path)
    except api.ApiError as error:
        if error.not_found:
            return None
        raise
