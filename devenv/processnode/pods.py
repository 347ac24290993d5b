"""The life of one pod on the process node, from sandbox to deletion.

One thread per pod runs a small reconcile loop, woken whenever a container exits, a probe
verdict changes or the API object changes (deletion requested, pod vanished):

1. sandbox: pod IP, volumes, ServiceAccount kubeconfig (retried while a referenced
   Secret/ConfigMap is missing, like kubelet's CreateContainerConfigError);
2. init containers one by one; a native sidecar (init container with ``restartPolicy:
   Always``) is started, must pass its startup probe, and keeps running;
3. main containers in parallel, restarted per ``restartPolicy`` with a short back-off;
4. termination — main containers done, ``activeDeadlineSeconds`` passed or deletion
   requested: SIGTERM main containers, then sidecars, SIGKILL whatever is left at the end of
   the grace period; write the terminal status; if the pod was being deleted, delete it with
   grace 0 as the kubelet does.

Every change is written to ``pods/<name>/status``; a failed write (API server restarting) is
retried on the next wake-up, so the API converges to the node's view.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from devenv.adminclient import AdminClient, ApiError, namespaced
from devenv.processnode import env as envs
from devenv.processnode import logs, probes, serviceaccount, volumes
from devenv.processnode.containers import ContainerProcess, ContainerSlot, Termination, now
from devenv.processnode.images import ImageMap, ImagePullError, ImageRule
from devenv.processnode.status import (
    Condition,
    Conditions,
    container_status,
    timestamp,
    unready_message,
)

Obj = dict[str, Any]
log = logging.getLogger(__name__)

RESTART_BACKOFF_INITIAL = 0.5  # seconds; the kubelet's 10 s would only slow tests down
RESTART_BACKOFF_MAX = 30.0
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"


@dataclass(frozen=True)
class NodeContext:
    """What every pod on the node shares."""

    api: AdminClient
    node_name: str
    host_ip: str
    state_dir: Path
    images: ImageMap


class PodRunner:
    def __init__(self, pod: Obj, *, context: NodeContext, pod_ip: str) -> None:
        self.pod = pod
        self.ctx = context
        self.pod_ip = pod_ip
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.ref = f"{meta['namespace']}/{meta['name']}"
        self.root = logs.pod_dir(context.state_dir, meta["namespace"], meta["name"], self.uid)
        spec = pod["spec"]
        self.restart_policy: str = spec.get("restartPolicy", "Always")
        self.init_slots = [
            ContainerSlot(c, "sidecar" if c.get("restartPolicy") == "Always" else "init")
            for c in spec.get("initContainers") or []
        ]
        self.main_slots = [ContainerSlot(c, "main") for c in spec["containers"]]
        self.conditions = Conditions()
        self.start_time = now()
        self.phase = "Pending"
        self.reason = ""
        self.message = ""
        self.initialized = False
        self.sandbox_ready = False
        self.volume_paths: dict[str, Path] = {}
        self.kubeconfig: Path | None = None
        self.wake = threading.Event()
        self.done = threading.Event()
        # Set from the watch thread:
        self.deletion_deadline: float | None = None  # monotonic; shrinks on a shorter delete
        self.vanished = False
        # Termination bookkeeping:
        self.stopping_reason: str | None = None  # "completed", "deleted", "deadline", "init"
        self.kill_deadline = 0.0
        self._last_status: Obj | None = None
        self._sync_failed = False

    # -- called from the node's watch thread -----------------------------------------------

    def observe(self, pod: Obj) -> None:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            grace = meta.get("deletionGracePeriodSeconds")
            self._request_deletion(float(grace if grace is not None else self._grace()))
        self.pod = pod
        self.wake.set()

    def forget(self) -> None:
        """The pod is gone from the API (force-deleted): kill everything now."""
        self.vanished = True
        self._request_deletion(0.0)
        self.wake.set()

    def _request_deletion(self, grace: float) -> None:
        deadline = time.monotonic() + grace
        if self.deletion_deadline is None or deadline < self.deletion_deadline:
            self.deletion_deadline = deadline

    # -- the pod thread --------------------------------------------------------------------

    def run(self) -> None:
        try:
            while not self.done.is_set():
                self.wake.clear()
                self._step()
                self._sync_status()
                if not self.done.is_set():
                    self.wake.wait(self._sleep_time())
        except Exception:
            log.exception("pod %s: runner crashed; killing its containers", self.ref)
            for slot in self._slots():
                if slot.process is not None:
                    slot.process.stop(0)
            raise
        finally:
            self.done.set()

    def _step(self) -> None:
        for slot in self._slots():
            termination = slot.collect_exit()
            if termination is not None:
                log.info("pod %s: %s exited %s", self.ref, slot.name, termination.exit_code)
                self._after_exit(slot)
        if self.stopping_reason is None:
            self.stopping_reason = self._why_stop()
            if self.stopping_reason is not None:
                self._begin_stopping()
        if self.stopping_reason is not None:
            self._continue_stopping()
            return
        if not self.sandbox_ready:
            self._prepare_sandbox()
            if not self.sandbox_ready:
                return
        if not self.initialized:
            self._run_init_containers()
            if not self.initialized:
                return
        for slot in [*self._sidecars(), *self.main_slots]:
            if not slot.running and slot.waiting_reason and time.monotonic() >= slot.not_before:
                self._start(slot)
        if any(slot.instances for slot in self.main_slots):
            self.phase = "Running"  # and it stays so through restarts, until terminal

    def _why_stop(self) -> str | None:
        if self.deletion_deadline is not None:
            return "deleted"
        deadline = self.pod["spec"].get("activeDeadlineSeconds")
        if deadline is not None and _age(self.start_time) >= float(deadline):
            return "deadline"
        if self.initialized and all(
            not s.running and not s.waiting_reason for s in self.main_slots
        ):
            return "completed"
        return None

    def _after_exit(self, slot: ContainerSlot) -> None:
        """Decide whether an exited container restarts (waiting) or stays terminated."""
        assert slot.termination is not None
        failed = slot.termination.exit_code != 0
        if slot.kind == "sidecar":
            restart = self.stopping_reason is None
        elif slot.kind == "init":
            restart = failed and self.restart_policy != "Never"
            if failed and not restart and self.stopping_reason is None:
                self.stopping_reason = "init"
                self._begin_stopping()
        else:
            restart = self.restart_policy == "Always" or (
                failed and self.restart_policy == "OnFailure"
            )
        if restart and self.stopping_reason is None:
            delay = min(RESTART_BACKOFF_MAX, RESTART_BACKOFF_INITIAL * 2**slot.restart_count)
            slot.not_before = time.monotonic() + delay
            slot.waiting_reason = "CrashLoopBackOff"
            slot.waiting_message = (
                f"back-off {delay:g}s restarting failed container={slot.name} pod={self.ref}"
            )
        else:
            slot.waiting_reason = ""

    # -- sandbox and containers ------------------------------------------------------------

    def _prepare_sandbox(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self.volume_paths = volumes.prepare(
                self.pod, self.root, lookup=self._lookup, issue_token=self._issue_token
            )
            if any(serviceaccount.mounts_token(s.spec) for s in self._slots()):
                self.kubeconfig = serviceaccount.write_pod_kubeconfig(
                    self.ctx.api, self.pod, self.root / "serviceaccount.kubeconfig"
                )
        except (envs.ContainerConfigError, ApiError, OSError) as error:
            self._all_waiting("CreateContainerConfigError", str(error))
            return
        self.sandbox_ready = True

    def _run_init_containers(self) -> None:
        for slot in self.init_slots:
            if slot.kind == "sidecar":
                if not slot.running and time.monotonic() >= slot.not_before:
                    self._start(slot)
                if not slot.started.is_set():
                    return  # the next init container waits for this sidecar to be started
                continue
            if slot.succeeded:
                continue
            if not slot.running and time.monotonic() >= slot.not_before:
                self._start(slot)
            return
        self.initialized = True
        for slot in self.main_slots:
            slot.waiting_reason = "ContainerCreating"

    def _start(self, slot: ContainerSlot) -> None:
        spec = slot.spec
        try:
            rule = self.ctx.images.resolve(spec["image"])
            probes.check_supported(spec)
            rewriter = volumes.MountRewriter(spec, self.volume_paths)
            node_env, declared = self._environment(slot, rule)
            environment = {**node_env, **declared}
            argv = [
                rewriter.rewrite(envs.expand(word, environment))
                for word in rule.argv(spec.get("command") or [], spec.get("args") or [])
            ]
            # Only what the container declared names paths inside its mounts; the node's own
            # paths (HOME, KUBECONFIG under the state dir) must survive a mount at e.g. /tmp.
            environment = {
                **node_env,
                **{key: rewriter.rewrite(value) for key, value in declared.items()},
            }
            cwd = self._working_dir(spec.get("workingDir"), rewriter)
        except ImagePullError as error:
            slot.waiting_reason, slot.waiting_message = "ErrImagePull", str(error)
            return
        except envs.ContainerConfigError as error:
            slot.waiting_reason, slot.waiting_message = "CreateContainerConfigError", str(error)
            slot.not_before = time.monotonic() + 1.0
            return
        except OSError as error:  # e.g. the working directory cannot be created
            slot.waiting_reason, slot.waiting_message = "CreateContainerError", str(error)
            slot.not_before = time.monotonic() + 1.0
            return
        if not argv:
            slot.waiting_reason = "CreateContainerError"
            slot.waiting_message = "no command specified"
            return
        slot.last_termination = slot.termination if slot.instances else None
        slot.termination = None
        slot.instances += 1
        try:
            slot.process = ContainerProcess(
                argv,
                env=environment,
                cwd=cwd,
                log_path=logs.log_path(self.root, slot.name, slot.restart_count),
                markers=self.ctx.state_dir / "pgids",
                on_exit=self.wake.set,
            )
        except OSError as error:
            moment = now()
            slot.termination = Termination(
                exit_code=128,
                reason="StartError",
                message=f"failed to start {argv[0]!r}: {error.strerror or error}",
                started_at=moment,
                finished_at=moment,
            )
            self._after_exit(slot)
            return
        slot.waiting_reason = slot.waiting_message = ""
        log.info("pod %s: started %s (pid %s): %s", self.ref, slot.name, slot.process.pid, argv)
        self._start_probers(slot, environment, cwd, rewriter)

    def _environment(
        self, slot: ContainerSlot, rule: ImageRule
    ) -> tuple[dict[str, str], dict[str, str]]:
        """The variables the node provides, and those the container declares (which win)."""
        service = serviceaccount.service_env(self.ctx.api)
        pod = self._pod_with_ips()
        declared = envs.container_env(slot.spec, pod, lookup=self._lookup, service_env=service)
        base = {
            "PATH": rule.search_path(),
            "HOME": str(self.root / "home"),
            "HOSTNAME": pod["metadata"]["name"],
        }
        if self.kubeconfig is not None and serviceaccount.mounts_token(slot.spec):
            base["KUBECONFIG"] = str(self.kubeconfig)
        (self.root / "home").mkdir(exist_ok=True)
        return {**base, **service}, declared

    def _working_dir(self, working_dir: str | None, rewriter: volumes.MountRewriter) -> Path:
        if not working_dir:
            path = self.root / "rootfs"
        else:
            rewritten = rewriter.rewrite(working_dir)
            if rewriter.mounts_path(rewritten) or Path(rewritten).is_dir():
                path = Path(rewritten)
            else:
                # A directory of the image we do not have: give the pod its own copy.
                path = self.root / "rootfs" / rewritten.lstrip("/")
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _start_probers(
        self,
        slot: ContainerSlot,
        environment: dict[str, str],
        cwd: Path,
        rewriter: volumes.MountRewriter,
    ) -> None:
        spec = slot.spec
        if "startupProbe" not in spec:
            slot.started.set()
        if "readinessProbe" not in spec:
            slot.ready = slot.kind != "init"
        for kind in probes.KINDS:
            probe = spec.get(kind)
            if probe is None:
                continue
            if "exec" in probe:
                command = [rewriter.rewrite(w) for w in probe["exec"]["command"]]
                probe = {**probe, "exec": {"command": command}}
            slot.probers.append(
                probes.Prober(
                    probe,
                    container=spec,
                    pod_ip=self.pod_ip,
                    env=environment,
                    cwd=cwd,
                    on_result=self._probe_handler(slot, kind),
                    gate=None if kind == "startupProbe" else slot.started,
                )
            )

    def _probe_handler(self, slot: ContainerSlot, kind: str) -> Callable[[bool], None]:
        process = slot.process

        def handle(passed: bool) -> None:
            if slot.process is not process:
                return  # a verdict about an instance that has already gone
            if kind == "readinessProbe":
                slot.ready = passed
            elif kind == "startupProbe" and passed:
                slot.started.set()
            elif not passed and process is not None:
                log.info("pod %s: %s failed its %s; killing it", self.ref, slot.name, kind)
                process.stop(self._grace())
            self.wake.set()

        return handle

    # -- stopping --------------------------------------------------------------------------

    def _begin_stopping(self) -> None:
        self.kill_deadline = time.monotonic() + self._grace()
        grace = max(self._stop_deadline() - time.monotonic(), 0.0)
        log.info("pod %s: stopping (%s, grace %gs)", self.ref, self.stopping_reason, grace)
        for slot in self._slots():
            if slot.termination is not None and not slot.running:
                slot.waiting_reason = ""  # no restart is coming: report how it ended
        first = [s for s in self._slots() if s.kind != "sidecar"]
        for slot in first:
            if slot.process is not None:
                slot.process.stop(grace)

    def _continue_stopping(self) -> None:
        remaining = max(self._stop_deadline() - time.monotonic(), 0.0)
        if any(s.running for s in self._slots() if s.kind != "sidecar"):
            if remaining == 0.0:
                for slot in self._slots():
                    if slot.process is not None:
                        slot.process.stop(0)
            return
        sidecars = [s for s in self._sidecars() if s.running]
        if sidecars:
            for slot in sidecars:
                assert slot.process is not None
                slot.process.stop(remaining)
            return
        self._finish()

    def _finish(self) -> None:
        if not self.vanished:
            self._settle_phase()
            if not self._sync_status():
                return  # retried on the next wake-up
            if self.deletion_deadline is not None and not self._delete():
                return
        self.done.set()

    def _settle_phase(self) -> None:
        if self.stopping_reason == "deadline":
            self.phase, self.reason, self.message = "Failed", "DeadlineExceeded", DEADLINE_MESSAGE
            return
        mains_ok = all(s.succeeded for s in self.main_slots)
        self.phase = "Succeeded" if mains_ok and self.stopping_reason != "init" else "Failed"

    def _delete(self) -> bool:
        meta = self.pod["metadata"]
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}}
        try:
            self.ctx.api.delete(namespaced("pods", meta["namespace"], meta["name"]), body)
        except ApiError as error:
            if error.status not in (404, 409):
                log.warning("pod %s: delete failed (%s); retrying", self.ref, error)
                return False
        except OSError as error:
            log.warning("pod %s: delete failed (%s); retrying", self.ref, error)
            return False
        return True

    # -- status ----------------------------------------------------------------------------

    def _sync_status(self) -> bool:
        """Write the status if it changed; False if the write failed (retry later)."""
        if self.vanished:
            return True
        status = self._status()
        if status == self._last_status:
            return True
        meta = self.pod["metadata"]
        path = namespaced("pods", meta["namespace"], meta["name"]) + "/status"
        try:
            self.ctx.api.patch(path, {"metadata": {"uid": self.uid}, "status": status})
        except ApiError as error:
            if error.status == 404:
                self.vanished = True
                return True
            log.warning("pod %s: status write failed: %s", self.ref, error)
            self._sync_failed = True
            return False
        except OSError as error:
            log.info("pod %s: status write failed (%s); will retry", self.ref, error)
            self._sync_failed = True
            return False
        self._last_status = status
        self._sync_failed = False
        return True

    def _status(self) -> Obj:
        image_ids = {s.name: f"devenv://{s.spec['image']}" for s in self._slots()}
        terminal = self.phase in ("Succeeded", "Failed")
        self._update_conditions(terminal)
        status: Obj = {
            "phase": self.phase,
            "conditions": self.conditions.render(),
            "hostIP": self.ctx.host_ip,
            "hostIPs": [{"ip": self.ctx.host_ip}],
            "startTime": timestamp(self.start_time),
            "initContainerStatuses": [
                container_status(s, image_id=image_ids[s.name]) for s in self.init_slots
            ],
            "containerStatuses": [
                container_status(s, image_id=image_ids[s.name]) for s in self.main_slots
            ],
        }
        if self.sandbox_ready:
            status["podIP"] = self.pod_ip
            status["podIPs"] = [{"ip": self.pod_ip}]
        if self.reason:
            status["reason"], status["message"] = self.reason, self.message
        return status

    def _update_conditions(self, terminal: bool) -> None:
        c = self.conditions
        c.set("PodReadyToStartContainers", Condition(self.sandbox_ready and not terminal))
        if self.initialized:
            c.set("Initialized", Condition(True))
        else:
            pending = [s for s in self.init_slots if not (s.succeeded or s.started.is_set())]
            message = unready_message("incomplete", pending)
            c.set("Initialized", Condition(False, "ContainersNotInitialized", message))
        unready = [s for s in [*self._sidecars(), *self.main_slots] if not s.ready]
        if terminal:
            ready = Condition(False, "PodCompleted")
        elif unready:
            ready = Condition(False, "ContainersNotReady", unready_message("unready", unready))
        else:
            ready = Condition(True)
        c.set("ContainersReady", ready)
        c.set("Ready", ready)
        c.set("PodScheduled", Condition(True))

    # -- helpers ---------------------------------------------------------------------------

    def _slots(self) -> list[ContainerSlot]:
        return [*self.init_slots, *self.main_slots]

    def _sidecars(self) -> list[ContainerSlot]:
        return [s for s in self.init_slots if s.kind == "sidecar"]

    def _stop_deadline(self) -> float:
        """When everything still running gets SIGKILL: the grace period from the moment
        stopping began, or sooner if a deletion asked for less."""
        if self.deletion_deadline is None:
            return self.kill_deadline
        return min(self.kill_deadline, self.deletion_deadline)

    def _grace(self) -> float:
        return float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))

    def _all_waiting(self, reason: str, message: str) -> None:
        for slot in self._slots():
            slot.waiting_reason, slot.waiting_message = reason, message

    def _sleep_time(self) -> float:
        clock = time.monotonic()
        moments = [s.not_before for s in self._slots() if s.waiting_reason and s.not_before]
        if self._sync_failed or not self.sandbox_ready:
            moments.append(clock + 0.5)
        deadline = self.pod["spec"].get("activeDeadlineSeconds")
        if self.stopping_reason is not None:
            moments.append(max(self._stop_deadline(), clock + 0.1))
        elif deadline is not None:
            moments.append(clock + float(deadline) - _age(self.start_time))
        return min(max(min(moments, default=clock + 5.0) - clock, 0.05), 5.0)

    def _lookup(self, kind: str, name: str) -> Obj | None:
        try:
            return self.ctx.api.get(namespaced(kind, self.pod["metadata"]["namespace"], name))
        except ApiError as error:
            if error.status == 404:
                return None
            raise envs.ContainerConfigError(f"reading {kind} {name}: {error}") from error
        except OSError as error:  # the API server is restarting: retry shortly
            raise envs.ContainerConfigError(f"reading {kind} {name}: {error}") from error

    def _issue_token(self, audience: str | None, expiration: int) -> str:
        return serviceaccount.request_token(
            self.ctx.api, self.pod, audience=audience, expiration=expiration
        )

    def _pod_with_ips(self) -> Obj:
        status = dict(self.pod.get("status") or {})
        status.update(
            podIP=self.pod_ip,
            podIPs=[{"ip": self.pod_ip}],
            hostIP=self.ctx.host_ip,
            hostIPs=[{"ip": self.ctx.host_ip}],
        )
        return {**self.pod, "status": status}


def _age(since: datetime) -> float:
    return (now() - since).total_seconds()
