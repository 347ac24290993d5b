"""List-then-watch loops that outlive API server restarts.

A watch stream ends for three reasons: the server's timeout (re-watch), a too-old
resourceVersion (410 Gone: relist) or a dropped connection (the API server restarted:
retry until it answers, then relist). After every relist the handler also receives DELETED
for objects that vanished while we were not watching, so a consumer's view converges to the
server's no matter when the outage happened.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from devenv.adminclient import AdminClient, ApiError, Obj

log = logging.getLogger(__name__)

Handler = Callable[[str, Obj], None]


def run_reflector(
    api: AdminClient,
    path: str,
    *,
    handler: Handler,
    stop: threading.Event,
    query: Mapping[str, str] | None = None,
) -> None:
    """Call ``handler(event_type, obj)`` for every change of the collection until ``stop``."""
    known: dict[str, Obj] = {}
    backoff = 0.2
    while not stop.is_set():
        try:
            listing = api.get(path, **(query or {}))
            resource_version = listing["metadata"]["resourceVersion"]
            current = {item["metadata"]["uid"]: item for item in listing.get("items") or []}
            for uid in known.keys() - current.keys():
                handler("DELETED", known[uid])
            for uid, item in current.items():
                handler("MODIFIED" if uid in known else "ADDED", item)
            known = current
            backoff = 0.2
            while not stop.is_set():
                for event in api.watch(path, resource_version=resource_version, query=query):
                    obj = event["object"]
                    resource_version = obj["metadata"]["resourceVersion"]
                    if event["type"] == "BOOKMARK":
                        continue
                    uid = obj["metadata"]["uid"]
                    if event["type"] == "DELETED":
                        known.pop(uid, None)
                    else:
                        known[uid] = obj
                    handler(event["type"], obj)
        except (ApiError, OSError) as error:
            if isinstance(error, ApiError) and error.status == 410:
                continue  # our resourceVersion was compacted away: relist now
            log.info("watch %s interrupted (%s); relisting in %.1fs", path, error, backoff)
        except Exception:
            # A bug in a handler must not end the watch for everything else on the node.
            log.exception("handler failed on %s; relisting in %.1fs", path, backoff)
        stop.wait(backoff)
        backoff = min(backoff * 2, 2.0)


def reflect_in_background(
    api: AdminClient,
    path: str,
    *,
    handler: Handler,
    name: str,
    query: Mapping[str, str] | None = None,
) -> threading.Event:
    """:func:`run_reflector` on a daemon thread (it ends with its stream when the process
    does); set the returned event to stop it."""
    stop = threading.Event()
    threading.Thread(
        target=run_reflector,
        args=(api, path),
        kwargs={"handler": handler, "stop": stop, "query": query},
        name=name,
        daemon=True,
    ).start()
    return stop
