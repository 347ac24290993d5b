"""What only a real node proves: pods are real containers of the images ``make images`` built
(kubelet + containerd + runc), so signals, memory limits, the image's user, a dead node and
``kubectl logs`` behave as on any cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from devenv.waiting import wait_for
from plugins.operator import busybox

pytestmark = pytest.mark.cluster

# A container's securityContext that Pod Security `restricted` admits.
RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "seccompProfile": {"type": "RuntimeDefault"},
}
FAST_HEARTBEAT = {"intervalSeconds": 1, "timeoutSeconds": 4, "orphanTimeoutSeconds": 30}


def pods_of(cluster: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    output = cluster.kubectl(
        "get", "pods", "-n", namespace, "-l", f"pgsched.dev/scheduledjob={name}", "-o", "json"
    ).stdout
    return list(json.loads(output)["items"])


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def main_exit_to_job_complete(cluster: Any, namespace: str, name: str, run: dict[str, Any]):
    """Seconds from the main container's exit to the Job's Complete condition, and the
    pod's grace period: a sidecar that missed its SIGTERM makes the first near the second."""
    [pod] = pods_of(cluster, namespace, name)
    [main] = pod["status"]["containerStatuses"]
    main_exit = parse_time(main["state"]["terminated"]["finishedAt"])
    job = json.loads(
        cluster.kubectl("get", "job", run["k8s_job_name"], "-n", namespace, "-o", "json").stdout
    )
    [complete] = [c for c in job["status"]["conditions"] if c["type"] == "Complete"]
    delay = (parse_time(complete["lastTransitionTime"]) - main_exit).total_seconds()
    return delay, pod["spec"]["terminationGracePeriodSeconds"]


def run_now_until_completed(sj: Any, name: str, command: str) -> dict[str, Any]:
    sj.apply(name, {"schedule": "0 0 1 1 *", "jobTemplate": busybox(command)})
    sj.annotate(name, "pgsched.dev/run-now", "go")
    [run] = sj.wait_runs(
        name, lambda runs: runs and runs[0]["status"] == "COMPLETED", 90, "completion"
    )
    return dict(run)


def test_the_heartbeat_sidecar_exits_on_sigterm_so_a_short_job_completes_promptly(
    operators, sj, cluster, namespace
):
    """The sidecar (``pgsched heartbeat`` as PID 1 of the real image) must end on the
    kubelet's SIGTERM once the main container exits: if it ignored it, the Job would only
    complete after the pod's 30 s grace period."""
    operators.start()
    run = run_now_until_completed(sj, "short", "sleep 3")
    delay, grace = main_exit_to_job_complete(cluster, namespace, "short", run)
    print(f"main container exit -> Job Complete: {delay:.1f}s (grace {grace}s)")
    assert delay < grace / 3, f"{delay:.1f}s from the main container's exit to Job Complete"


class SidecarStopper:
    """Stops every containerised ``pgsched heartbeat`` for ``seconds`` as soon as it is
    exec'd, before Python can install a SIGTERM handler: a busy node, made certain."""

    def __init__(self, seconds: float, *, run_api_url: str) -> None:
        self.seconds = seconds
        # This test's pods only: other tests share the node (parallel workers), and their
        # sidecars must not be stopped. A pod's containers carry the run API address of the
        # operator that launched them, one per test's installation.
        self._marker = f"PGSCHED_RUN_API_URL={run_api_url}".encode()
        self.stopped: list[int] = []
        self._done = threading.Event()
        self._own_pid_namespace = os.readlink("/proc/self/ns/pid")
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> SidecarStopper:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        seen: set[int] = set()
        while not self._done.is_set():
            for pid in (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()):
                if pid not in seen and self._is_a_containerised_sidecar(pid):
                    seen.add(pid)
                    os.kill(pid, signal.SIGSTOP)
                    self.stopped.append(pid)
                    threading.Timer(self.seconds, os.kill, (pid, signal.SIGCONT)).start()
            time.sleep(0.005)

    def _is_a_containerised_sidecar(self, pid: int) -> bool:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            namespace = os.readlink(f"/proc/{pid}/ns/pid")
        except OSError:
            return False
        # `pgsched heartbeat` runs as `<python> <bin>/pgsched heartbeat`; cmdline ends in NUL.
        is_sidecar = len(argv) >= 3 and argv[-3].endswith(b"/pgsched") and argv[-2] == b"heartbeat"
        if not is_sidecar or namespace == self._own_pid_namespace:
            return False
        try:
            return self._marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            return False


def test_a_sidecar_slow_to_start_still_hears_sigterm_so_a_fast_job_completes_promptly(
    operators, sj, cluster, namespace
):
    """A PID 1 without a handler never receives SIGTERM. A workload that ends before the
    sidecar has installed its handler (``true`` on a busy node) used to leave the sidecar
    deaf: the pod ended 30 s later, at its grace period, and the run held its cap all that
    time (a 5-second job started 29 s late in CI). The Job's postStart hook now holds the
    workload back until the sidecar listens; here the sidecar is stopped for 3 s right
    after its exec, so without the hook the workload would always end first."""
    operator = operators.start()
    with SidecarStopper(seconds=3, run_api_url=operator.run_api.url) as stopper:
        run = run_now_until_completed(sj, "fast", "true")
    assert stopper.stopped, "no sidecar was caught before it started (the test proved nothing)"
    delay, grace = main_exit_to_job_complete(cluster, namespace, "fast", run)
    print(f"sidecar stopped 3 s at start; main container exit -> Job Complete: {delay:.1f}s")
    assert delay < grace / 3, f"{delay:.1f}s from the main container's exit to Job Complete"


def test_a_container_over_its_memory_limit_is_oom_killed_and_never_retried(operators, sj):
    operators.start()
    template = busybox("sleep 1; dd if=/dev/zero of=/dev/null bs=200M count=1")
    [main] = template["spec"]["template"]["spec"]["containers"]
    main["resources"] = {"limits": {"memory": "32Mi"}}
    sj.apply(
        "hungry",
        {
            "schedule": "0 0 1 1 *",
            "retryPolicy": {"neverRetryOn": ["OOMKilled"], "backoff": {"initialSeconds": 0}},
            "jobTemplate": template,
        },
    )
    sj.annotate("hungry", "pgsched.dev/run-now", "go")
    sj.wait_runs("hungry", lambda runs: runs and runs[0]["status"] == "FAILED", 90, "the OOM")
    wait_for(lambda: sj.runs("hungry")[0]["settled_at"], 15, describe="the failure settled")
    runs = sj.runs("hungry")
    assert [(r["status"], r["reason"]) for r in runs] == [("FAILED", "OOMKilled")]


def test_jobs_run_under_pod_security_restricted_as_the_images_non_root_user(
    operators, sj, cluster, namespace
):
    cluster.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )
    operators.start()
    template = busybox("id -u; touch /tmp/x 2>&1 || echo read-only")
    [main] = template["spec"]["template"]["spec"]["containers"]
    main["securityContext"] = {**RESTRICTED, "readOnlyRootFilesystem": True}
    sj.apply("locked", {"schedule": "0 0 1 1 *", "jobTemplate": template})
    sj.annotate("locked", "pgsched.dev/run-now", "go")
    [run] = sj.wait_runs(
        "locked", lambda runs: runs and runs[0]["status"] in ("COMPLETED", "FAILED"), 90, "end"
    )
    assert run["status"] == "COMPLETED", run
    [pod] = pods_of(cluster, namespace, "locked")
    logs = cluster.kubectl("logs", "-n", namespace, pod["metadata"]["name"], "-c", "main").stdout
    assert logs.splitlines()[0] == "65534" and "Read-only file system" in logs, logs
    # The heartbeat sidecar ran as the image's own user (10001) under the same policy.
    [sidecar] = pod["status"]["initContainerStatuses"]
    assert sidecar["name"] and pod["spec"]["initContainers"][0]["securityContext"]["runAsNonRoot"]


def busybox_with(command: str, security_context: dict[str, Any]) -> dict[str, Any]:
    template = busybox(command)
    [main] = template["spec"]["template"]["spec"]["containers"]
    main["securityContext"] = security_context
    return template


def ready_column(cluster, namespace: str, name: str) -> str:
    """The READY column of ``kubectl get sj``, as a person reads it."""
    header, row = cluster.kubectl("get", "sj", name, "-n", namespace).stdout.splitlines()[:2]
    start = header.index("READY")  # columns are aligned; values may hold spaces
    return row[start:].split()[0]


def test_a_jobtemplate_violating_enforced_pod_security_fails_podsecurityrejected_naming_the_violation(
    operators, sj, cluster, namespace
):
    """Pod Security enforces only on pods: without the operator's check the Job would be
    created, its pods refused one by one, and the run would wait for its orphan timeout."""
    cluster.kubectl(
        "label",
        "namespace",
        namespace,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/warn=restricted",
    )
    operators.start()
    once = {"schedule": "0 0 1 1 *", "retryPolicy": {"maxAttempts": 1}}
    sj.apply("bad", {**once, "jobTemplate": busybox_with("true", {"privileged": True})})
    sj.apply("good", {**once, "jobTemplate": busybox_with("echo fine", RESTRICTED)})
    sj.annotate("bad", "pgsched.dev/run-now", "go")
    sj.annotate("good", "pgsched.dev/run-now", "go")
    [failed] = sj.wait_runs("bad", lambda runs: runs and runs[0]["status"] == "FAILED", 60, "fail")
    assert failed["reason"] == "PodSecurityRejected", failed
    assert "violates Pod Security restricted:latest" in failed["error"], failed["error"]
    assert (
        'privileged (container "main" must not set securityContext.privileged=true)'
        in (failed["error"])
    )
    # kubectl get sj says it cannot start (READY False, the run's reason) within a
    # publish round or two.
    refused_at = time.monotonic()
    wait_for(
        lambda: ready_column(cluster, namespace, "bad") == "False",
        10,
        describe=lambda: cluster.kubectl("get", "sj", "bad", "-n", namespace).stdout,
    )
    seconds = time.monotonic() - refused_at
    condition = sj.condition("bad")
    assert condition is not None and condition["reason"] == "PodSecurityRejected", condition
    assert f"run {failed['id']} could not start" in condition["message"], condition
    print(f"READY False {seconds:.2f}s after the refused run was seen FAILED")
    # Nothing is left of it: no Job whose pods would be refused over and over.
    wait_for(lambda: not sj.jobs("bad"), 15, describe="the refused Job deleted")
    # The namespace's other job is not affected.
    [run] = sj.wait_runs(
        "good", lambda runs: runs and runs[0]["status"] in ("COMPLETED", "FAILED"), 90, "end"
    )
    assert run["status"] == "COMPLETED", run
    assert ready_column(cluster, namespace, "good") == "True"

    # A level that is only warned about, not enforced, does not stop a run.
    cluster.kubectl(
        "label",
        "namespace",
        namespace,
        "--overwrite",
        "pod-security.kubernetes.io/enforce=baseline",
    )
    sj.apply("rooted", {**once, "jobTemplate": busybox("echo as root")})  # not restricted
    sj.annotate("rooted", "pgsched.dev/run-now", "go")
    [run] = sj.wait_runs(
        "rooted", lambda runs: runs and runs[0]["status"] in ("COMPLETED", "FAILED"), 90, "end"
    )
    assert run["status"] == "COMPLETED", run


def test_kubectl_logs_shows_a_runs_output_and_describe_says_how_to_get_it(
    operators, sj, cluster, namespace, dsn
):
    operators.start()
    sj.apply(
        "talker", {"schedule": "0 0 1 1 *", "jobTemplate": busybox("echo run $PGSCHED_RUN_ID")}
    )
    sj.annotate("talker", "pgsched.dev/run-now", "go")
    [run] = sj.wait_runs(
        "talker", lambda runs: runs and runs[0]["status"] == "COMPLETED", 90, "completion"
    )
    described = subprocess.run(
        [sys.executable, "-m", "pgsched.cli.main", "describe", str(run["id"])],
        capture_output=True,
        text=True,
        env={"PGSCHED_DSN": dsn, "PATH": "/usr/bin:/bin"},
        check=True,
    ).stdout
    [command] = [
        line.split(":", 1)[1].strip() for line in described.splitlines() if line.startswith("Logs:")
    ]
    assert command == f"kubectl logs -n {namespace} job/{run['k8s_job_name']} --all-containers"
    output = cluster.kubectl(*command.split()[1:]).stdout
    assert f"run {run['id']}" in output.splitlines()


@pytest.mark.exclusive  # kills the node every test's pods run on
def test_a_dead_node_fails_its_runs_and_they_are_retried_once_it_is_back(
    operators, sj, cluster, namespace
):
    operators.start()
    sj.apply(
        "stranded",
        {
            "schedule": "0 0 1 1 *",
            "heartbeat": FAST_HEARTBEAT,
            "retryPolicy": {"retryOn": ["HeartbeatLost"], "backoff": {"initialSeconds": 1}},
            "jobTemplate": busybox("sleep 8"),
        },
    )
    sj.annotate("stranded", "pgsched.dev/run-now", "go")
    sj.wait_runs("stranded", lambda runs: runs and runs[0]["heartbeat_at"], 90, "a heartbeat")
    cluster.stop_node()
    try:
        runs = sj.wait_runs(
            "stranded",
            lambda runs: runs[0]["status"] == "FAILED" and len(runs) > 1,
            60,
            "the failure and its retry",
        )
        assert runs[0]["reason"] == "HeartbeatLost", runs[0]
    finally:
        cluster.start_node()
    runs = sj.wait_runs(
        "stranded", lambda runs: runs[-1]["status"] == "COMPLETED", 120, "the retry to complete"
    )
    assert [r["status"] for r in runs][:1] == ["FAILED"] and runs[-1]["retry_of"] is not None
