"""The engine's Launcher on Kubernetes: a lease Secret and one batch/v1 Job per claimed run.

The jobTemplate policy (``k8s.jobside.jobpolicy``) is checked again first. Then the run's
lease Secret is created (so the pod never starts before its credential exists), then the
Job, and the Secret is handed to the Job as its owner by a background request, so a launch
costs two requests from the launch threads.

Every step is idempotent, because a launch can be repeated by a crash or by a claim that a
failover lost: a Job already there with this claim's lease is adopted; one whose lease the
database finds genuine for the run (``lease.adopt``) is kept under that lease, so the
workload runs once; any other leftover is replaced. A refusal that is the request's fault
fails the launch (``LaunchFailed``, ``PodSecurityRejected``); the API server away defers it
(``LaunchDeferred``): not the run's fault, so its attempt is not spent.

The cases one by one: docs/architecture.md, "Launching a Job".
"""

from __future__ import annotations

import base64
import binascii
import logging
import queue
import threading
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg

from pgsched import logs
from pgsched.db.connection import Connection
from pgsched.engine import lease, starts
from pgsched.engine.launcher import Adopted, LaunchDeferred, LaunchError
from pgsched.engine.models import Definition, Run
from pgsched.k8s import names
from pgsched.k8s.client import api
from pgsched.k8s.jobside import jobpolicy, jobs, podsecurity

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class KubernetesLauncher:
    # Job creations in flight at once, so that the token bucket, not the round trips, sets
    # a stampede's pace: a launch is two requests one after the other (Secret, Job), and
    # with the API server answering in 25-35 ms while it also serves the watches and the
    # publisher, 4 in flight made 55-80 Jobs/s where 200 qps allows 100 (bench stampede).
    parallelism = 8
    # A Job records its pod's outcome: a silent run waits for that verdict (k8s.jobside.verdicts).
    keeps_outcomes = True
    # Every launch returns the Job's name, and a launch repeated under the same lease finds
    # the Job it made: a claim that has neither was never launched, and is launched again.
    records_every_launch = True

    def __init__(
        self,
        kube: api.KubeApi,
        settings: jobs.JobSettings,
        *,
        connect: Callable[[], Connection],
    ) -> None:
        """``connect``: a new database session, for the rare adoption of an earlier claim's
        Job (closed right after)."""
        self._kube = kube
        self._settings = settings
        self._connect = connect
        self._gate = jobpolicy.Gate(kube, settings.policy)
        self._handovers: queue.SimpleQueue[_Handover] = queue.SimpleQueue()
        self._handover_thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()

    def launch(self, run: Run, definition: Definition) -> str | Adopted | None:
        manifest = jobs.build(definition, run, self._settings)
        name = str(manifest["metadata"]["name"])
        where = f"{definition.namespace}/{name}"
        try:
            refusal = self._gate.refusal(definition.namespace, definition.spec)
        except api.ApiError as error:
            # The API server away defers the launch like any other request of it would.
            doing = f"Job {where}: reading namespace {definition.namespace}'s jobTemplate policy"
            raise _failure(error, doing) from None
        if refusal is not None:
            raise LaunchError(f"Job {where} not created: {refusal}")
        run_log = logs.for_run(log, run, definition)
        secrets = api.path_of(namespace=definition.namespace, plural="secrets")
        secret = jobs.lease_secret(definition, run)
        secret_path = f"{secrets}/{secret['metadata']['name']}"
        collection = api.path_of(group="batch", namespace=definition.namespace, plural="jobs")
        try:
            secret_version = self._create_secret(secrets, secret)
            if secret_version is None:  # left by an earlier claim of this run
                adopted = self._adopt(run, f"{collection}/{name}", name, run_log)
                if adopted is not None:
                    return adopted
                secret_version = self._take_over_secret(secret_path, secret)
        except api.ApiError as error:
            raise _failure(
                error,
                f"creating the lease Secret {definition.namespace}/{secret['metadata']['name']}",
            ) from None
        try:
            job = self._create_job(f"{collection}/{name}", manifest, run, where, run_log)
        except api.ApiError as error:  # reading what stood in the way, or Pod Security
            self._delete_quietly(secret_path)
            raise _failure(error, f"creating Job {where}") from None
        except (LaunchError, LaunchDeferred):
            self._delete_quietly(secret_path)
            raise
        # Not urgent (the pod already has its Secret): behind other launches' creations. The
        # patch is made now so that the queue keeps a few hundred bytes per run, not the
        # created Job: in a stampede thousands wait here for the background share.
        patch = jobs.owned_by_job(job)
        patch["metadata"]["resourceVersion"] = secret_version
        self._hand_over(_Handover(secret_path, patch, run.id, where, run_log))
        return name

    def _create_secret(self, collection: str, secret: Obj) -> str | None:
        """Create the lease Secret; its ``resourceVersion``, or None if it exists."""
        try:
            created = self._kube.create(collection, secret)
        except api.ApiError as error:
            if not error.conflict:
                raise
            return None
        return str(created["metadata"]["resourceVersion"])

    def _take_over_secret(self, path: str, secret: Obj) -> str:
        """The Secret of an earlier claim of this run, not adopted: this claim's token, and
        back to the ScheduledJob, so deleting that claim's Job does not take the Secret
        along. Its ``resourceVersion``."""
        patched = self._kube.merge_patch(
            path,
            {
                "metadata": {"ownerReferences": secret["metadata"]["ownerReferences"]},
                "stringData": secret["stringData"],
            },
        )
        return str(patched["metadata"]["resourceVersion"])

    def _adopt(
        self,
        run: Run,
        job_path: str,
        name: str,
        run_log: logging.Logger | logs.ContextAdapter,
    ) -> Adopted | None:
        """The run's Job of an earlier claim, kept: if it carries the lease the Secret holds
        and the database takes that lease as genuine for this run (see the module's
        docstring). None: nothing adopted, nothing changed."""
        try:
            job = self._kube.get(job_path)
        except api.ApiError as error:
            if error.not_found:
                return None
            raise
        metadata = job.get("metadata") or {}
        if (metadata.get("labels") or {}).get(names.LABEL_RUN_ID) != str(run.id):
            return None
        earlier = held_lease(self._kube, job)
        if earlier is None or earlier == run.lease_token:
            return None
        assert run.lease_token is not None
        try:
            with closing(self._connect()) as conn:
                adopted = lease.adopt(conn, lease.Lease(run.id, run.lease_token), earlier)
        except psycopg.Error as error:
            raise LaunchDeferred(
                f"Job {metadata.get('namespace')}/{name} of an earlier claim of run {run.id}"
                f" could not be adopted: the database did not answer ({error})"
            ) from None
        if not adopted:
            return None
        run_log.warning(
            "run %s: kept Job %s/%s of an earlier claim of this run, lost by the database"
            " (a failover or restore); the run holds that claim's lease again",
            run.id,
            metadata.get("namespace"),
            name,
        )
        return Adopted(name, earlier)

    def _hand_over(self, handover: _Handover) -> None:
        with self._thread_lock:
            if self._handover_thread is None:
                self._handover_thread = threading.Thread(
                    target=self._send_handovers, name="pgsched-lease-handover", daemon=True
                )
                self._handover_thread.start()
        self._handovers.put(handover)

    def _send_handovers(self) -> None:
        housekeeping = self._kube.housekeeping()  # after every status and Event
        while True:
            handover = self._handovers.get()
            try:
                housekeeping.merge_patch(handover.secret_path, handover.patch)
            except api.ApiError as error:
                if error.conflict:  # a later claim of the run rewrote it: that claim's now
                    continue
                # The Job runs either way; the Secret then goes with the ScheduledJob instead.
                handover.log.warning(
                    "run %s: could not hand the lease Secret to Job %s: %s",
                    handover.run_id,
                    handover.where,
                    error,
                )
            except Exception:  # never let the thread die: later hand-overs still go
                log.exception("handing the lease Secret to Job %s", handover.where)

    def _create_job(
        self,
        path: str,
        manifest: Obj,
        run: Run,
        where: str,
        run_log: logging.Logger | logs.ContextAdapter,
    ) -> Obj:
        collection = path.rsplit("/", 1)[0]
        try:
            created = self._create_checked(collection, manifest, where)
        except api.ApiError as error:
            if not error.conflict:
                raise _failure(error, f"creating Job {where}") from None
        else:
            run_log.info(
                "run %s: created Job %s (attempt %s, scheduled for %s)",
                run.id,
                where,
                run.attempt,
                run.scheduled_for.isoformat(),
            )
            return created
        existing = self._kube.get(path)
        metadata = existing.get("metadata") or {}
        owner_run = (metadata.get("labels") or {}).get(names.LABEL_RUN_ID)
        if owner_run != str(run.id):
            raise LaunchError(f"Job {where} already exists for run {owner_run}") from None
        if names.job_lease_fingerprint(metadata.get("annotations")) == names.lease_fingerprint(
            str(run.lease_token)
        ):
            run_log.info("run %s: Job %s already existed (launched before)", run.id, where)
            return existing
        run_log.warning(
            "run %s: Job %s is left from an earlier, lost claim of this run; deleting it",
            run.id,
            where,
        )
        self._delete_quietly(path)
        try:
            created = self._create_checked(collection, manifest, where)
        except api.ApiError as error:
            raise _failure(
                error,
                f"Job {where} is left from an earlier, lost claim of run {run.id} (another"
                " lease) and could not be replaced",
            ) from None
        run_log.info("run %s: replaced Job %s of the lost claim", run.id, where)
        return created

    def _create_checked(self, collection: str, manifest: Obj, where: str) -> Obj:
        """Create the Job; if the namespace enforces a Pod Security level its pod template
        violates (the API server's warning, see k8s.jobside.podsecurity), fail the launch saying
        which checks fail, instead of leaving a run whose Job never gets a pod; the clean-up
        deletes the Job once the run is ended (see the module's docstring)."""
        created, warnings = self._kube.create_with_warnings(collection, manifest)
        namespace = str(manifest["metadata"]["namespace"])
        violation = podsecurity.enforced_violation(self._kube, namespace, warnings)
        if violation is not None:
            raise LaunchError(f"Job {where}: {violation}", reason=starts.POD_SECURITY_REJECTED)
        return created

    def _delete_quietly(self, path: str) -> None:
        try:
            self._kube.delete(path)
        except api.ApiError as error:
            if not error.not_found:
                log.warning("could not delete %s: %s", path, error)


def held_lease(kube: api.KubeApi, job: Obj) -> UUID | None:
    """The lease the pod of ``job`` holds: the token in the Job's lease Secret, if the Job
    carries that token's fingerprint (then the Secret is the one it was launched with);
    None if there is no such Secret or token. Whether the lease is genuine for the Job's
    run only the database can tell (``sql/functions/lease_is_genuine.sql``)."""
    metadata = job.get("metadata") or {}
    path = api.path_of(
        namespace=metadata.get("namespace"),
        plural="secrets",
        name=names.lease_secret_name(str(metadata.get("name"))),
    )
    # The operator may not get Secrets (RBAC: create, patch and delete, narrowed to its
    # lease Secrets by the chart's admission policy): a merge patch that changes nothing
    # is not written, and answers with the Secret as it is.
    try:
        secret = kube.merge_patch(path, {})
    except api.ApiError as error:
        if error.not_found:
            return None
        raise
    encoded = (secret.get("data") or {}).get(names.LEASE_SECRET_KEY)
    try:
        token = UUID(base64.b64decode(encoded, validate=True).decode()) if encoded else None
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    carried = names.job_lease_fingerprint(metadata.get("annotations"))
    return token if token is not None and carried == names.lease_fingerprint(str(token)) else None


def _failure(error: api.ApiError, doing: str) -> LaunchError | LaunchDeferred:
    """What an API error means for the run: the API server away is not the run's fault
    (deferred: the run waits QUEUED); any other answer is (``LaunchFailed``)."""
    if error.unavailable:
        return LaunchDeferred(f"{doing}: the API server is unavailable ({error})")
    return LaunchError(f"{doing}: {error.message}")


@dataclass(frozen=True)
class _Handover:
    """A lease Secret to give to its Job: the patch names the Job as its owner and the
    Secret's ``resourceVersion`` as the launch left it."""

    secret_path: str
    patch: Obj
    run_id: int
    where: str
    log: logging.Logger | logs.ContextAdapter
