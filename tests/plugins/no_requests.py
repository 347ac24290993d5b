"""An API client for the tests that sync ScheduledJobs with no API server: it has the
memory of namespaces seen going every client has (``reads.being_deleted`` looks there on
every event) and nothing else, so any request a test did not expect fails loudly."""

from __future__ import annotations

from pgsched.k8s.client.endings import NamespaceEndings


class NoRequests:
    def __init__(self) -> None:
        self.endings = NamespaceEndings()  # none seen going
