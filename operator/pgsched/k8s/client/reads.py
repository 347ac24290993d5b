"""Reads of the API that several controllers share: whether a namespace is going, and the
Jobs and pods of given runs, read by label so a namespace's other objects are never listed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from pgsched.k8s import names
from pgsched.k8s.client.api import ApiError, KubeApi, parse_timestamp, path_of
from pgsched.k8s.names import Obj

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # on a Job's pods, by the Job controller


def namespace_ending(kube: KubeApi, namespace: str, *, created: str | None) -> bool:
    """Whether ``namespace`` is being deleted (Terminating), asked for an object of it
    created at ``created`` (its ``metadata.creationTimestamp``): answered from memory if the
    namespace was seen going since before then (``k8s.client.endings``). An error reading
    it is a no: whoever asks says only what it knows for sure."""
    if kube.endings.known(namespace, parse_timestamp(created)):
        return True
    try:
        found = kube.get(path_of(plural="namespaces", name=namespace))
    except ApiError:
        return False
    since = parse_timestamp((found.get("metadata") or {}).get("deletionTimestamp"))
    if since is None:
        return False
    kube.endings.saw(namespace, since)
    return True


def being_deleted(kube: KubeApi, meta: Obj) -> bool:
    """Whether the object of ``meta`` is to be handled as deleted: it is (its own
    ``deletionTimestamp``), or its namespace is known going (``k8s.client.endings``; the
    Namespace watch says so in label mode). Kubernetes deletes a terminating namespace's
    pods first and its other objects only once they are gone: a finalizer that waited for
    that would ask running runs to stop only after their pods were killed, and would hold
    the namespace an extra pass of its controller (8 s) for nothing. Memory only: asked on
    every watch event of every object."""
    if meta.get("deletionTimestamp"):
        return True
    return kube.endings.known(
        str(meta.get("namespace")), parse_timestamp(meta.get("creationTimestamp"))
    )


def pods_of_job(kube: KubeApi, namespace: str, job_name: str) -> list[Obj]:
    """The pods the Job controller made for ``job_name`` (its ``job-name`` label)."""
    found = kube.get(
        path_of(namespace=namespace, plural="pods"), labelSelector=f"{JOB_NAME_LABEL}={job_name}"
    )
    return list(found.get("items") or [])


def jobs_of_runs(
    kube: KubeApi, namespace: str, run_ids: list[int]
) -> tuple[dict[str, Obj], dict[str, list[Obj]]]:
    """The Jobs of these runs by name, and their pods by Job name (a run's pods carry its
    run-id label from the Job's pod template): two requests that read only these runs'
    objects, however many the namespace holds (thousands after a stampede)."""
    selector = f"{names.LABEL_RUN_ID} in ({','.join(str(i) for i in sorted(set(run_ids)))})"
    listed = kube.get(
        path_of(group="batch", namespace=namespace, plural="jobs"), labelSelector=selector
    )
    jobs = {job["metadata"]["name"]: job for job in listed.get("items") or []}
    pods: dict[str, list[Obj]] = defaultdict(list)
    listed = kube.get(
        path_of(namespace=namespace, plural="pods"), labelSelector=f"{selector},{JOB_NAME_LABEL}"
    )
    for pod in listed.get("items") or []:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        pods[str(labels.get(JOB_NAME_LABEL))].append(pod)
    return jobs, pods


# Runs whose Jobs one request selects by label (``run-id in (...)``): a short URL.
RUNS_PER_REQUEST = 100


def jobs_of_rows(
    kube: KubeApi, rows: list[Obj]
) -> Iterator[tuple[Obj, dict[str, Obj], dict[str, list[Obj]]]]:
    """Each run row (its ``namespace`` and ``id``) with the Jobs and pods of its namespace's
    runs that were read with it (``jobs_of_runs``): two requests per namespace and
    ``RUNS_PER_REQUEST`` runs, never a list of a namespace's other Jobs."""
    by_namespace: dict[str, list[Obj]] = defaultdict(list)
    for row in rows:
        by_namespace[row["namespace"]].append(row)
    for namespace, these in by_namespace.items():
        for start in range(0, len(these), RUNS_PER_REQUEST):
            chunk = these[start : start + RUNS_PER_REQUEST]
            jobs, pods = jobs_of_runs(kube, namespace, [row["id"] for row in chunk])
            for row in chunk:
                yield row, jobs, pods
