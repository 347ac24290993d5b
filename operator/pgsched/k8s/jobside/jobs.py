"""The batch/v1 Job for a claimed run (pure: no API calls).

The Job is the ScheduledJob's ``jobTemplate`` plus what pgsched needs: a deterministic name
(``<scheduledjob>-<run-id>``, so launching twice is one Job), the ScheduledJob as owner, the
run's labels and annotations, no pod restarts (a retry is a new run and a new Job), the
shared ``/pgsched`` volume, the heartbeat sidecar or the SDK runner, the run's parameters
as ``PGSCHED_PARAM_<NAME>`` (escaped for kubelet's ``$(VAR)`` expansion: :func:`_literal`),
and the ServiceAccount the jobTemplate policy judged (``jobpolicy.service_account``), in
``serviceAccountName`` alone.

pgsched's containers talk to the operator's run API (docs/run-api.md), never to the
database: they are given its address and the CA to trust, both public, and the run's lease
token, their one credential, from a per-run Secret (:func:`lease_secret`), so neither the
ScheduledJob nor the Job shows a credential to someone who may only read them.

Each addition and why: docs/architecture.md, "The Job of a run".
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field

from pgsched.engine import parameters
from pgsched.engine.models import Definition, Run
from pgsched.k8s import names
from pgsched.k8s.jobside import jobpolicy
from pgsched.k8s.names import Obj
from pgsched.k8s.scheduledjobs import commands

# Restricted Pod Security for what pgsched adds to a pod.
_RESTRICTED: Obj = {
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


@dataclass(frozen=True)
class JobSettings:
    image: str
    # Where pods reach the run API (the operator's PGSCHED_RUN_API_URL) and the PEM text of
    # the CA its certificate chains to, the only one they trust.
    run_api_url: str
    run_api_ca: str
    image_pull_policy: str = "IfNotPresent"
    policy: jobpolicy.JobPolicy = field(default_factory=jobpolicy.JobPolicy)


def build(definition: Definition, run: Run, settings: JobSettings) -> Obj:
    spec = definition.spec
    template = copy.deepcopy(spec.get("jobTemplate") or {})
    metadata = template.get("metadata") or {}
    job_spec: Obj = template.get("spec") or {}
    pod_template: Obj = job_spec.setdefault("template", {})
    pod_metadata: Obj = pod_template.setdefault("metadata", {})
    pod_spec: Obj = pod_template.setdefault("spec", {})

    run_labels = {
        names.LABEL_RUN_ID: str(run.id),
        names.LABEL_SCHEDULED_JOB: names.label_value(definition.name),
        names.LABEL_ATTEMPT: str(run.attempt),
    }
    pod_metadata["labels"] = {**(pod_metadata.get("labels") or {}), **run_labels}
    job_spec["backoffLimit"] = 0
    if definition.active_deadline_seconds:
        job_spec["activeDeadlineSeconds"] = definition.active_deadline_seconds
    pod_spec["restartPolicy"] = "Never"
    # The account the jobTemplate policy judged, in the one field the API server reads
    # first: never an empty serviceAccountName beside a deprecated serviceAccount.
    account = jobpolicy.service_account(pod_spec)[1]
    pod_spec.pop("serviceAccount", None)
    pod_spec.pop("serviceAccountName", None)
    if account is not None:
        pod_spec["serviceAccountName"] = account
    # No API token in the pod unless the jobTemplate asks for one: pgsched's own containers
    # never call the API, and most workloads do not either.
    pod_spec.setdefault("automountServiceAccountToken", False)
    pod_spec["volumes"] = [
        *(pod_spec.get("volumes") or []),
        {"name": names.SHARED_VOLUME, "emptyDir": {"sizeLimit": "1Mi"}},
    ]

    containers: list[Obj] = pod_spec.get("containers") or []
    for container in containers:
        container["volumeMounts"] = [
            *(container.get("volumeMounts") or []),
            {"name": names.SHARED_VOLUME, "mountPath": names.SHARED_MOUNT},
        ]
        container["env"] = [*(container.get("env") or []), *_workload_env(run)]
    # spec.parameters: the main container gets the run's values (engine/parameters.py).
    declared = parameters.declared(spec)
    values = parameters.environment(declared, run.parameters)
    if containers and values:
        containers[0]["env"] += [
            {"name": item.env_name, "value": _literal(values[item.name])}
            for item in declared
            if item.name in values
        ]
    job = spec.get("job")
    if job:
        main = containers[0]
        main["command"] = ["pgsched", "run"]
        main["args"] = []
        # A runner that cannot start (bad arguments, an unknown kind, a runner of another
        # release) says why in its log; the log's tail becomes the container's termination
        # message, which the run's error quotes (outcomes._failure).
        main.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
        main["env"] += [*_lease_env(definition, run, settings), *_sdk_env(job, values)]
    else:
        pod_spec["initContainers"] = [
            *(pod_spec.get("initContainers") or []),
            _sidecar(definition, run, settings, _sees_workload_exit(pod_spec)),
        ]

    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": names.job_name(definition.name, run.id),
            "namespace": definition.namespace,
            "labels": {**(metadata.get("labels") or {}), **run_labels},
            "annotations": {
                **(metadata.get("annotations") or {}),
                names.ANNOTATION_LEASE_SHA256: names.lease_fingerprint(str(run.lease_token)),
                names.ANNOTATION_SCHEDULED_FOR: run.scheduled_for.isoformat(),
                **_row_annotations(run),
            },
            "ownerReferences": [
                owner(names.API_VERSION, names.KIND, definition.name, definition.id)
            ],
        },
        "spec": job_spec,
    }


def _row_annotations(run: Run) -> dict[str, str]:
    """What the run's row holds beyond its labels, for a restore of a row a failover lost
    (k8s/failover/restoration.py). The run-now token and the parameters are the requester's own
    text, already on the ScheduledJob (and the parameters in the pod's environment) for
    anyone who may read it: no secret."""
    given = commands.parameters_value(run.parameters) if run.parameters else None
    carried = {
        names.ANNOTATION_TRIGGER: run.trigger,
        names.ANNOTATION_RETRY_OF: run.retry_of,
        names.ANNOTATION_UPSTREAM_RUN: run.upstream_run_id,
        names.ANNOTATION_REQUEST_TOKEN: run.request_token,
        names.ANNOTATION_PARAMETERS: given,
    }
    return {key: str(value) for key, value in carried.items() if value is not None}


def lease_secret(definition: Definition, run: Run) -> Obj:
    """The Secret that carries the run's lease token into its pod.

    Created before the Job (so the pod never waits for it) and owned by the ScheduledJob,
    so it is garbage-collected if the Job is never created; once the Job exists the
    launcher hands ownership to the Job (:func:`owned_by_job`), and the Secret goes
    with it when the history limits delete the Job."""
    job = names.job_name(definition.name, run.id)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": names.lease_secret_name(job),
            "namespace": definition.namespace,
            "labels": {
                names.LABEL_RUN_ID: str(run.id),
                names.LABEL_SCHEDULED_JOB: names.label_value(definition.name),
            },
            "ownerReferences": [
                owner(names.API_VERSION, names.KIND, definition.name, definition.id, block=False)
            ],
        },
        "stringData": {names.LEASE_SECRET_KEY: str(run.lease_token)},
    }


def owned_by_job(job: Obj) -> Obj:
    """The merge patch that makes the created Job the lease Secret's only owner."""
    meta = job["metadata"]
    return {
        "metadata": {
            "ownerReferences": [owner("batch/v1", "Job", meta["name"], meta["uid"], block=False)]
        }
    }


def owner(api_version: str, kind: str, name: str, uid: object, *, block: bool = True) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": str(uid),
        "controller": True,
        "blockOwnerDeletion": block,
    }


def _literal(value: str) -> str:
    """A parameter's value as kubelet must pass it on. kubelet expands ``$(NAME)`` in a
    container's env values, command and args with the pod's variables, and reads ``$$``
    as ``$``: a value ``$(DB_PASSWORD)`` would reach the workload as the password. Every
    ``$`` doubled is the documented escape, and the exact inverse of that expansion
    (doubling only ``$(`` would let ``$$(X)`` through as ``$`` and then ``$(X)``)."""
    return value.replace("$", "$$")


def _workload_env(run: Run) -> list[Obj]:
    return [
        {"name": "PGSCHED_RUN_ID", "value": str(run.id)},
        {"name": "PGSCHED_ATTEMPT", "value": str(run.attempt)},
        {"name": "PGSCHED_SCHEDULED_FOR", "value": run.scheduled_for.isoformat()},
        {"name": "PGSCHED_CANCEL_FILE", "value": names.CANCEL_FILE},
    ]


def _lease_env(definition: Definition, run: Run, settings: JobSettings) -> list[Obj]:
    job = names.job_name(definition.name, run.id)
    return [
        {
            "name": "PGSCHED_LEASE_TOKEN",
            "valueFrom": {
                "secretKeyRef": {
                    "name": names.lease_secret_name(job),
                    "key": names.LEASE_SECRET_KEY,
                }
            },
        },
        {"name": "PGSCHED_RUN_API_URL", "value": settings.run_api_url},
        # A certificate is public: the environment is a fine place for it, and the pod needs
        # no Secret or volume of pgsched's besides its lease.
        {"name": "PGSCHED_RUN_API_CA", "value": settings.run_api_ca},
        {
            "name": "PGSCHED_HEARTBEAT_INTERVAL_SECONDS",
            "value": str(definition.heartbeat_interval_seconds),
        },
    ]


def _sdk_env(job: Obj, values: dict[str, str]) -> list[Obj]:
    """The SDK runner's contract; the run's parameters are keyword arguments too, over
    ``spec.job.args``."""
    arguments = {**(job.get("args") or {}), **{k: _literal(v) for k, v in values.items()}}
    return [
        {"name": "PGSCHED_JOB_KIND", "value": str(job["kind"])},
        {"name": "PGSCHED_JOB_ARGS", "value": json.dumps(arguments)},
        {"name": "PGSCHED_JOB_MODULES", "value": ",".join(job.get("modules") or [])},
    ]


# The sidecar is PID 1 of its container, and the kernel drops a signal sent to a PID 1 that
# has no handler for it. kubelet starts the main containers as soon as the sidecar's
# process exists and sends it SIGTERM when they end: a workload that ends before Python has
# installed its handler (a fast command on a busy node) would leave the sidecar deaf, and
# the pod would end only after its grace period (30 s by default), holding the run's cap all
# the while. kubelet starts the main containers only after a sidecar's postStart hook
# returns, so the hook waits until the sidecar says it is listening, for at most 30 s (then
# it lets the workload start as before; it always exits 0, since a failing hook would kill
# the sidecar).
_WAIT_UNTIL_LISTENING = [
    "sh",
    "-c",
    f"for _ in $(seq 300); do [ -e {names.HEARTBEAT_LISTENING_FILE} ] && exit 0; sleep 0.1;"
    " done; exit 0",
]


def _sees_workload_exit(pod_spec: Obj) -> bool:
    """Whether the sidecar can tell the workload's end by its processes: the pod shares its
    process namespace and has no native sidecar of its own, whose restart would look like a
    workload that started and ended (runner/workload_exit.py)."""
    return pod_spec.get("shareProcessNamespace") is True and not any(
        container.get("restartPolicy") == "Always"
        for container in pod_spec.get("initContainers") or []
    )


def _sidecar(
    definition: Definition, run: Run, settings: JobSettings, shared_processes: bool
) -> Obj:
    """The heartbeat sidecar. In a pod that shares its process namespace it is told so: it
    then sees the workload end at once, not at kubelet's SIGTERM about a second later
    (runner/workload_exit.py)."""
    told = (
        [{"name": "PGSCHED_SHARED_PROCESS_NAMESPACE", "value": "true"}] if shared_processes else []
    )
    return {
        "name": names.SIDECAR_NAME,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "restartPolicy": "Always",
        "command": ["pgsched", "heartbeat"],
        "lifecycle": {"postStart": {"exec": {"command": _WAIT_UNTIL_LISTENING}}},
        "env": [
            *_workload_env(run),
            *_lease_env(definition, run, settings),
            *told,
        ],
        "volumeMounts": [{"name": names.SHARED_VOLUME, "mountPath": names.SHARED_MOUNT}],
        "resources": {
            "requests": {"cpu": "10m", "memory": "32Mi"},
            "limits": {"memory": "128Mi"},
        },
        "securityContext": dict(_RESTRICTED),
    }
