"""Pods on the real node (kubelet + containerd): what pgsched relies on, proven once."""

from __future__ import annotations

import functools
import time
from typing import Any

import pytest

from devenv.adminclient import ApiError, namespaced
from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from plugins.cluster import container, pod_manifest

pytestmark = pytest.mark.cluster

Obj = dict[str, Any]


def create_pod(cluster: ControlPlane, namespace: str, manifest: Obj) -> None:
    cluster.api.create(namespaced("pods", namespace), manifest)


def get_pod(cluster: ControlPlane, namespace: str, name: str) -> Obj:
    return cluster.api.get(namespaced("pods", namespace, name))


def wait_phase(cluster: ControlPlane, namespace: str, name: str, phase: str) -> Obj:
    pod: Obj = {}

    def reached() -> bool:
        nonlocal pod
        pod = get_pod(cluster, namespace, name)
        return bool(pod.get("status", {}).get("phase") == phase)

    wait_for(reached, 60, describe=lambda: f"pod {name} phase {phase}; status: {pod.get('status')}")
    return pod


def gone(cluster: ControlPlane, namespace: str, name: str) -> bool:
    try:
        get_pod(cluster, namespace, name)
    except ApiError as error:
        return error.status == 404
    return False


def terminated(pod: Obj, name: str, *, init: bool = False) -> Obj:
    key = "initContainerStatuses" if init else "containerStatuses"
    (status,) = [s for s in pod["status"][key] if s["name"] == name]
    assert "terminated" in status["state"], f"{name} not terminated: {pod['status']}"
    return dict(status["state"]["terminated"])


def test_env_sources_expansion_and_downward_api_reach_the_process(
    cluster: ControlPlane, namespace: str
) -> None:
    cluster.kubectl("create", "configmap", "settings", "-n", namespace, "--from-literal=color=blue")
    cluster.kubectl("create", "secret", "generic", "creds", "-n", namespace, "--from-literal=pw=s3")
    env = [
        {"name": "GREETING", "value": "hello"},
        {"name": "PHRASE", "value": "$(GREETING) world $$(GREETING) $(UNDEFINED)"},
        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "pw"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    script = 'echo "$PHRASE|$PW|$CFG_color|$NODE|$ME|$POD_IP|$(pwd)" "$1"'
    main = container(
        "main",
        "busybox:1.36",
        "sh",
        "-c",
        script,
        "sh",
        "arg=$(GREETING)",
        env=env,
        envFrom=[{"prefix": "CFG_", "configMapRef": {"name": "settings"}}],
        workingDir="/work",
        volumeMounts=[{"name": "scratch", "mountPath": "/work"}],
    )
    create_pod(
        cluster, namespace, pod_manifest("env", main, volumes=[{"name": "scratch", "emptyDir": {}}])
    )

    pod = wait_phase(cluster, namespace, "env", "Succeeded")

    pod_ip = pod["status"]["podIP"]
    assert pod_ip.startswith("10.244.0.")  # the CNI bridge's subnet on the node
    output = cluster.pod_logs(namespace, "env").strip()
    phrase, pw, color, node, me, ip, cwd = output.split(" arg=")[0].split("|")
    assert phrase == "hello world $(GREETING) $(UNDEFINED)"
    assert (pw, color, node, me, ip) == ("s3", "blue", "node-1", "env", pod_ip)
    assert cwd == "/work"  # the emptyDir, mounted in the container
    assert output.endswith(" arg=hello")


def test_native_sidecar_runs_until_the_main_container_exits(
    cluster: ControlPlane, namespace: str
) -> None:
    shared = [{"name": "shared", "mountPath": "/shared"}]
    sidecar = container(
        "beat",
        "busybox:1.36",
        "sh",
        "-c",
        'trap "echo beat got TERM; exit 0" TERM; '
        "while true; do date +%s >> /shared/beats; sleep 0.2; done",
        restartPolicy="Always",
        volumeMounts=shared,
    )
    main = container(
        "main", "busybox:1.36", "sh", "-c", "sleep 2; test -s /shared/beats", volumeMounts=shared
    )
    manifest = pod_manifest(
        "sidecar", main, initContainers=[sidecar], volumes=[{"name": "shared", "emptyDir": {}}]
    )
    create_pod(cluster, namespace, manifest)

    pod = wait_phase(cluster, namespace, "sidecar", "Succeeded")

    main_end = terminated(pod, "main")
    beat_end = terminated(pod, "beat", init=True)
    assert main_end["exitCode"] == 0  # it saw the sidecar's beats in the shared emptyDir
    assert beat_end["finishedAt"] >= main_end["finishedAt"]
    assert beat_end["startedAt"] <= main_end["startedAt"]
    assert "beat got TERM" in cluster.pod_logs(namespace, "sidecar", "beat")


def test_deletion_sends_sigterm_and_sigkill_after_the_grace_period(
    cluster: ControlPlane, namespace: str
) -> None:
    polite = container(
        "main",
        "busybox:1.36",
        "sh",
        "-c",
        'trap "echo got TERM; exit 0" TERM; while true; do sleep 0.1; done',
    )
    stubborn = container(
        "main",
        "busybox:1.36",
        "sh",
        "-c",
        'trap "echo ignoring TERM" TERM; while true; do sleep 0.1; done',
    )
    create_pod(cluster, namespace, pod_manifest("polite", polite, terminationGracePeriodSeconds=30))
    create_pod(
        cluster, namespace, pod_manifest("stubborn", stubborn, terminationGracePeriodSeconds=2)
    )
    wait_phase(cluster, namespace, "polite", "Running")
    wait_phase(cluster, namespace, "stubborn", "Running")

    started = time.monotonic()
    cluster.kubectl("delete", "pod", "polite", "stubborn", "-n", namespace, "--wait=false")
    wait_for(lambda: gone(cluster, namespace, "polite"), 20, describe="polite pod deleted")
    polite_seconds = time.monotonic() - started
    wait_for(lambda: gone(cluster, namespace, "stubborn"), 20, describe="stubborn pod deleted")
    stubborn_seconds = time.monotonic() - started

    assert polite_seconds < 5  # it exited on SIGTERM, long before its 30 s grace
    assert 2 <= stubborn_seconds < 10  # SIGKILL came at the end of its 2 s grace


def test_active_deadline_fails_the_pod_with_reason_deadline_exceeded(
    cluster: ControlPlane, namespace: str
) -> None:
    manifest = pod_manifest(
        "deadline",
        container("main", "busybox:1.36", "sleep", "300"),
        activeDeadlineSeconds=2,
        terminationGracePeriodSeconds=1,
    )
    create_pod(cluster, namespace, manifest)

    pod = wait_phase(cluster, namespace, "deadline", "Failed")

    assert pod["status"]["reason"] == "DeadlineExceeded"
    # `sleep` is PID 1 of its container: the kernel does not deliver SIGTERM to a PID 1
    # without a handler, so it is SIGKILLed at the end of the grace period.
    assert terminated(pod, "main")["exitCode"] == 137


def test_an_image_that_is_not_on_the_node_and_cannot_be_pulled_waits_with_err_image_pull(
    cluster: ControlPlane, namespace: str
) -> None:
    create_pod(cluster, namespace, pod_manifest("nope", container("main", "nginx:1.27", "nginx")))

    def waiting_reason() -> str | None:
        statuses = get_pod(cluster, namespace, "nope").get("status", {}).get("containerStatuses")
        return statuses[0]["state"].get("waiting", {}).get("reason") if statuses else None

    wait_for(lambda: waiting_reason() == "ErrImagePull", 30, describe="ErrImagePull")
    status = get_pod(cluster, namespace, "nope")["status"]
    assert status["phase"] == "Pending"
    assert "nginx" in status["containerStatuses"][0]["state"]["waiting"]["message"]


def test_readiness_probes_reach_replicas_on_their_own_pod_ips(
    cluster: ControlPlane, namespace: str
) -> None:
    server = container(
        "web",
        "ghcr.io/pgsched/pgsched:dev",
        "python3",
        "-m",
        "http.server",
        "--bind",
        "$(POD_IP)",
        "8080",
        env=[{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        ports=[{"name": "http", "containerPort": 8080}],
        readinessProbe={"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
        livenessProbe={"tcpSocket": {"port": 8080}, "periodSeconds": 1},
    )
    for name in ("web-a", "web-b"):
        create_pod(cluster, namespace, pod_manifest(name, server, restart_policy="Always"))

    def ready(name: str) -> bool:
        conditions = get_pod(cluster, namespace, name).get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    for name in ("web-a", "web-b"):
        wait_for(functools.partial(ready, name), 30, describe=f"{name} Ready")
    ips = {get_pod(cluster, namespace, n)["status"]["podIP"] for n in ("web-a", "web-b")}
    assert len(ips) == 2
    restarts = [
        get_pod(cluster, namespace, n)["status"]["containerStatuses"][0]["restartCount"]
        for n in ("web-a", "web-b")
    ]
    assert restarts == [0, 0]


def test_failing_liveness_probe_restarts_the_container(
    cluster: ControlPlane, namespace: str
) -> None:
    main = container(
        "main",
        "busybox:1.36",
        "sleep",
        "300",
        livenessProbe={"exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 1},
        terminationMessagePolicy="File",
    )
    create_pod(
        cluster,
        namespace,
        pod_manifest("unwell", main, restart_policy="Always", terminationGracePeriodSeconds=1),
    )

    def restarted() -> bool:
        statuses = get_pod(cluster, namespace, "unwell").get("status", {}).get("containerStatuses")
        return bool(statuses and statuses[0]["restartCount"] >= 1)

    wait_for(restarted, 30, describe="a liveness restart")
    status = get_pod(cluster, namespace, "unwell")["status"]["containerStatuses"][0]
    assert status["lastState"]["terminated"]["exitCode"] == 137  # PID 1 ignores SIGTERM
