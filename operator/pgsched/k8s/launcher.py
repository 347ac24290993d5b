"""The engine's Launcher on Kubernetes: one batch/v1 Job per claimed run.

Creating is idempotent: the Job name is deterministic, and ``409 AlreadyExists`` for a Job
that carries the same run id means an earlier attempt to launch this very run got through
(a crash between create and record). A same-named Job of another run is a real conflict
and fails the launch (``LaunchFailed``), as does any error left after the API client's own
retries (rate limiting, 429 and 5xx are handled there).
"""

from __future__ import annotations

import logging

from pgsched import logs
from pgsched.engine.launcher import LaunchError
from pgsched.engine.models import Definition, Run
from pgsched.k8s import api, jobs, names

log = logging.getLogger(__name__)


class KubernetesLauncher:
    # Job creations in flight at once: a round trip each, so a stampede of runs due at the
    # same second is created in a quarter of the time; the token bucket still sets the pace.
    parallelism = 4
    # A Job records its pod's outcome: a silent run waits for that verdict (k8s.verdicts).
    keeps_outcomes = True

    def __init__(self, kube: api.KubeApi, settings: jobs.JobSettings) -> None:
        self._kube = kube
        self._settings = settings

    def launch(self, run: Run, definition: Definition) -> str | None:
        manifest = jobs.build(definition, run, self._settings)
        name = manifest["metadata"]["name"]
        collection = api.path_of(group="batch", namespace=definition.namespace, plural="jobs")
        try:
            self._kube.create(collection, manifest)
        except api.ApiError as error:
            if not error.conflict:
                raise LaunchError(
                    f"creating Job {definition.namespace}/{name}: {error.message}"
                ) from None
            existing = self._kube.get(f"{collection}/{name}")
            owner_run = existing.get("metadata", {}).get("labels", {}).get(names.LABEL_RUN_ID)
            if owner_run != str(run.id):
                raise LaunchError(
                    f"Job {definition.namespace}/{name} already exists for run {owner_run}"
                ) from None
            logs.for_run(log, run, definition).info(
                "run %s: Job %s/%s already existed (launched before)",
                run.id,
                definition.namespace,
                name,
            )
        else:
            logs.for_run(log, run, definition).info(
                "run %s: created Job %s/%s (attempt %s, scheduled for %s)",
                run.id,
                definition.namespace,
                name,
                run.attempt,
                run.scheduled_for.isoformat(),
            )
        return str(name)
