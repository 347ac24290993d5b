"""``make demo``: the quickstart — pgsched installed as a user would, on this machine.

1. a local Kubernetes cluster with one real node, kubelet + containerd + runc
   (``devenv.controlplane``), running the images ``make images`` built from this checkout;
2. a throwaway Postgres with the roles a real installation uses (``ROLES_SQL``): the
   operator's role owns the database and the schema but cannot create roles; the example
   jobs bring a role of their own; job pods need none (they talk to the operator's run API);
3. two namespaces that enforce Pod Security ``restricted``: ``pgsched-system`` for the
   operator, ``pgsched-demo`` for the ScheduledJobs;
4. ``helm install`` of ``charts/pgsched`` from the checkout with the operator's connection
   string (at the Service through which pods reach this host's Postgres), the run API's
   address as job pods reach it without DNS (``devenv.run_api.chart_url``) and the chart's
   default image, ``ghcr.io/pgsched/pgsched:<appVersion>``, built from the root Dockerfile;
5. ``kubectl apply`` of every ``examples/*.yaml``, then ``kubectl get sj`` until each
   example that asks for an immediate run (``pgsched.dev/run-now``) shows COMPLETED.

Then it prints how to look around, ending with ``kubectl logs`` of a run's pod, and runs
until Ctrl-C (``--once``: exit 0 as soon as everything is green, 1 if it is not within
``--timeout``), stopping everything on the way out.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from devenv import run_api
from devenv.adminclient import ApiError
from devenv.binaries import REPO_ROOT
from devenv.commands import CommandError
from devenv.controlplane import ControlPlane
from devenv.postgres import PostgresServer
from pgsched.db import connection

RELEASE = "pgsched"
SYSTEM_NAMESPACE = "pgsched-system"
JOBS_NAMESPACE = "pgsched-demo"
CHART = REPO_ROOT / "charts" / "pgsched"
EXAMPLES = REPO_ROOT / "examples"
EXAMPLES_SECRET = "pgsched-examples-dsn"
RUN_NOW = "pgsched.dev/run-now"

# What a database administrator runs once (docs/install.md has the same statements).
# Passwords are omitted: the throwaway server trusts local connections. pgsched_job, which
# no one logs in as any more, is still granted to by the migrations (docs/install.md).
ROLES_SQL = (
    "CREATE ROLE pgsched LOGIN",
    "CREATE DATABASE pgsched OWNER pgsched",
    "CREATE ROLE pgsched_job NOLOGIN",
    "CREATE ROLE pgsched_examples LOGIN",
    "GRANT CREATE ON DATABASE pgsched TO pgsched_examples",
)


class DemoError(RuntimeError):
    """The demo cannot go on; the message says what was seen."""


@dataclass(frozen=True)
class Connections:
    admin: str
    operator: str
    examples: str


class Stopwatch:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def __str__(self) -> str:
        return f"{time.monotonic() - self.started:5.1f}s"


def say(clock: Stopwatch, message: str) -> None:
    print(f"[{clock}] {message}", flush=True)


def create_roles(server: PostgresServer) -> Connections:
    with connection.connect(server.dsn()) as admin:
        for statement in ROLES_SQL:
            admin.execute(statement)
    return Connections(
        admin=server.dsn("pgsched"),
        operator=server.dsn("pgsched", user="pgsched"),
        examples=server.dsn("pgsched", user="pgsched_examples"),
    )


def create_namespaces(cp: ControlPlane) -> None:
    for name in (SYSTEM_NAMESPACE, JOBS_NAMESPACE):
        labels = {
            f"pod-security.kubernetes.io/{mode}": "restricted"
            for mode in ("enforce", "audit", "warn")
        }
        if name == JOBS_NAMESPACE:
            labels["pgsched.dev/serve"] = "true"  # the chart's default namespaceLabels
        cp.api.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
        )
    # Pods are only admitted once the ServiceAccount controller created `default`.
    for name in (SYSTEM_NAMESPACE, JOBS_NAMESPACE):
        account = f"/api/v1/namespaces/{name}/serviceaccounts/default"
        _until(functools.partial(_exists, cp, account), 30, f"ServiceAccount {name}/default")


def install_chart(cp: ControlPlane, dsns: Connections, work_dir: Path) -> None:
    values = {
        "database": {"dsn": cp.in_cluster_dsn(dsns.operator)},
        "runApi": {"url": run_api.chart_url(cp, release=RELEASE, namespace=SYSTEM_NAMESPACE)},
    }
    values_file = work_dir / "demo-values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    cp.helm("install", RELEASE, CHART, "-n", SYSTEM_NAMESPACE, "-f", values_file)


def wait_for_operator(cp: ControlPlane, clock: Stopwatch, *, timeout: float) -> None:
    path = f"/apis/apps/v1/namespaces/{SYSTEM_NAMESPACE}/deployments/{RELEASE}"
    seen = ""
    deadline = time.monotonic() + timeout
    while True:
        deployment = cp.api.get(path)
        status, wanted = deployment.get("status") or {}, deployment["spec"]["replicas"]
        ready = f"{status.get('readyReplicas', 0)}/{wanted}"
        if ready != seen:
            say(clock, f"operator pods ready: {ready}")
            seen = ready
        if status.get("readyReplicas", 0) == wanted:
            return
        if time.monotonic() > deadline:
            raise DemoError(
                f"the operator pods were not ready after {timeout:g}s:\n"
                + cp.kubectl("get", "pods", "-n", SYSTEM_NAMESPACE, "-o", "wide").stdout
            )
        time.sleep(0.5)


def example_manifests() -> Iterator[dict[str, Any]]:
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                yield document


def apply_examples(cp: ControlPlane, dsns: Connections) -> list[str]:
    """Apply the examples; return the names of those that ask for an immediate run."""
    cp.kubectl(
        "create",
        "secret",
        "generic",
        EXAMPLES_SECRET,
        "-n",
        JOBS_NAMESPACE,
        f"--from-literal=dsn={cp.in_cluster_dsn(dsns.examples)}",
    )
    manifests = list(example_manifests())
    documents = "---\n".join(yaml.safe_dump(manifest) for manifest in manifests)
    cp.kubectl("apply", "-n", JOBS_NAMESPACE, "-f", "-", input=documents)
    return [
        m["metadata"]["name"] for m in manifests if RUN_NOW in m["metadata"].get("annotations", {})
    ]


def watch_until_green(
    cp: ControlPlane, clock: Stopwatch, expected: list[str], *, timeout: float
) -> bool:
    """Print ``kubectl get sj`` as it changes until every expected run COMPLETED."""
    shown = ""
    deadline = time.monotonic() + timeout
    while True:
        table = cp.kubectl("get", "sj", "-n", JOBS_NAMESPACE).stdout
        if table != shown:
            print(f"\n[{clock}] $ kubectl get sj -n {JOBS_NAMESPACE}\n{table}", flush=True)
            shown = table
        items = json.loads(cp.kubectl("get", "sj", "-n", JOBS_NAMESPACE, "-o", "json").stdout)
        last = {
            item["metadata"]["name"]: ((item.get("status") or {}).get("lastRun") or {})
            for item in items["items"]
        }
        if all(last.get(name, {}).get("status") == "COMPLETED" for name in expected):
            # The status may have changed after the table above was printed: show the
            # table that is green, then say so.
            table = cp.kubectl("get", "sj", "-n", JOBS_NAMESPACE).stdout
            if table != shown:
                print(f"\n[{clock}] $ kubectl get sj -n {JOBS_NAMESPACE}\n{table}", flush=True)
            say(clock, f"green: {', '.join(expected)} completed")
            return True
        if time.monotonic() > deadline:
            print(f"not green after {timeout:g}s; last runs: {json.dumps(last, indent=2)}")
            print(cp.kubectl("get", "jobs,pods", "-n", JOBS_NAMESPACE, "-o", "wide").stdout)
            return False
        time.sleep(1.0)


def _shown(path: Path) -> str:
    """A path as a user would type it from the current directory."""
    with contextlib.suppress(ValueError):
        return str(path.relative_to(Path.cwd()))
    return str(path)


def print_howto(cp: ControlPlane, dsns: Connections) -> None:
    kubectl = _shown(cp.binaries.kubectl)
    pgsched = _shown(Path(sys.executable).parent / "pgsched")
    psql = Path(os.environ.get("PGSCHED_PG_BIN", "/usr/lib/postgresql/15/bin")) / "psql"
    print(
        f"""
pgsched runs in {SYSTEM_NAMESPACE} (release {RELEASE!r}); the examples in {JOBS_NAMESPACE}.

  export KUBECONFIG={cp.kubeconfig}
  {kubectl} -n {JOBS_NAMESPACE} get sj -w
  {kubectl} -n {JOBS_NAMESPACE} annotate sj hello-every-minute {RUN_NOW}=$(date +%s) --overwrite
  {kubectl} -n {JOBS_NAMESPACE} get jobs,pods,events
  {kubectl} -n {SYSTEM_NAMESPACE} get deploy,pods,svc,pdb
  {_shown(cp.binaries.helm)} -n {SYSTEM_NAMESPACE} get values {RELEASE}

Logs of a run's pod (`{pgsched} describe RUN` names its Job):
  {kubectl} -n {JOBS_NAMESPACE} logs job/JOB --all-containers

The database (every run, every attempt, every skipped occurrence):
  {psql} '{dsns.admin}' -c 'SELECT id, status, reason, trigger, attempt, scheduled_for FROM pgsched.job_runs ORDER BY id'
  PGSCHED_DSN='{dsns.operator}' {pgsched} migrate --check
  {pgsched} --help
""",
        flush=True,
    )


def show_run_logs(cp: ControlPlane, scheduled_job: str, *, timeout: float = 30.0) -> None:
    """The last screen: ``kubectl logs --all-containers`` of the newest pod whose workload
    container ended.

    A run is COMPLETED as soon as its Job reports ``SuccessCriteriaMet``, which can be a
    moment before the pod itself is ``Succeeded`` (the heartbeat sidecar is still stopping),
    so the pod is chosen by its ``hello`` container having exited 0, waiting briefly for it.
    """
    container = "hello"
    deadline = time.monotonic() + timeout
    while True:
        pods = json.loads(
            cp.kubectl(
                "get",
                "pods",
                "-n",
                JOBS_NAMESPACE,
                "-l",
                f"pgsched.dev/scheduledjob={scheduled_job}",
                "-o",
                "json",
            ).stdout
        )["items"]
        done = [pod for pod in pods if _exited_cleanly(pod, container)]
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if not done:
        print(
            f"(no pod of {scheduled_job} has finished yet: `kubectl -n {JOBS_NAMESPACE} logs job/JOB --all-containers` shows a run once it has)"
        )
        return
    pod = max(done, key=lambda p: p["metadata"]["creationTimestamp"])["metadata"]["name"]
    # Every container: the heartbeat sidecar's lines (lease, workload ended) with the job's own.
    logs = cp.kubectl(
        "logs", "-n", JOBS_NAMESPACE, pod, "--all-containers", "--prefix", check=False
    )
    print(
        f"$ kubectl -n {JOBS_NAMESPACE} logs {pod} --all-containers --prefix\n"
        f"{logs.stdout}{logs.stderr}",
        flush=True,
    )


def _exited_cleanly(pod: dict[str, Any], container: str) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any(
        item.get("name") == container
        and ((item.get("state") or {}).get("terminated") or {}).get("exitCode") == 0
        for item in statuses
    )


def _exists(cp: ControlPlane, path: str) -> bool:
    try:
        cp.api.get(path)
    except ApiError as error:
        if error.status == 404:
            return False
        raise
    return True


def _until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.2)


def run(*, once: bool, timeout: float, work_dir: Path | None) -> int:
    clock = Stopwatch()
    say(clock, "starting a local Kubernetes cluster (etcd, kube-apiserver, controllers, scheduler)")
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
    with ControlPlane(work_dir=work_dir, keep_work_dir=work_dir is not None) as cp:
        cp.add_node("node-1")
        say(clock, f"cluster ready with node-1 (kubelet + containerd); kubeconfig: {cp.kubeconfig}")
        with PostgresServer() as server:
            dsns = create_roles(server)
            say(clock, f"Postgres {server.port} ready: roles pgsched, pgsched_examples")
            create_namespaces(cp)
            say(clock, f"helm install {RELEASE} charts/pgsched -n {SYSTEM_NAMESPACE}")
            install_chart(cp, dsns, cp.work_dir)
            wait_for_operator(cp, clock, timeout=timeout)
            expected = apply_examples(cp, dsns)
            say(clock, f"applied examples/*.yaml to {JOBS_NAMESPACE}")
            green = watch_until_green(cp, clock, expected, timeout=timeout)
            print_howto(cp, dsns)
            show_run_logs(cp, "hello-every-minute")
            if once or not green:
                return 0 if green else 1
            say(clock, "running until Ctrl-C")
            while True:
                time.sleep(3600)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devenv.demo",
        description="Install pgsched with its Helm chart on a local control plane, apply the "
        "examples and show them run.",
    )
    parser.add_argument(
        "--once", action="store_true", help="exit once the examples ran (0) or failed to (1)"
    )
    parser.add_argument(
        "--timeout", type=float, default=180.0, help="seconds to wait for each stage (180)"
    )
    parser.add_argument(
        "--work-dir", type=Path, help="keep the cluster's state and logs here (default: temp)"
    )
    args = parser.parse_args(argv)
    try:
        return run(once=args.once, timeout=args.timeout, work_dir=args.work_dir)
    except KeyboardInterrupt:
        print("\nstopped", flush=True)
        return 130
    except (DemoError, CommandError) as error:
        print(f"demo failed: {error}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
