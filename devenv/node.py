"""The real node: kubelet + containerd + runc + kube-proxy in a network namespace of its own.

Everything that runs pods does so as real containers of images built locally
(``hack/images/build.sh``): the control plane (etcd, kube-apiserver, controllers, the real
kube-scheduler) and the node's daemons all run inside the network namespace ``pgsched-node``
(entered with ``nsenter --net=…``, never ``ip netns exec``, which remounts ``/sys`` and hides
the cgroup mounts from kubelet). The node's IP is an address on that namespace's ``lo``; pods
sit on a CNI bridge inside it; kube-proxy (iptables, ``masqueradeAll``) makes Services work,
including ``10.96.0.1:443``. Nothing is routed to or from the host's network: the host reaches
the API server through a relay over a UNIX socket (:class:`Relay`), and pods reach a Postgres
on the host through another one, published as a selector-less Service.

kubelet and containerd still write a few fixed host paths and the ``/kubepods`` cgroup, so
there is one node per machine: :class:`MachineLock` makes a second session wait, and
:func:`clean_host` removes whatever a crashed session left (at start and at stop).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from devenv import processes

NETNS = "pgsched-node"
NETNS_PATH = Path("/run/netns") / NETNS
NODE_IP = "10.200.0.1"
POD_SUBNET = "10.244.0.0/24"
CLUSTER_CIDR = "10.244.0.0/16"
LOCK_PATH = Path("/run/pgsched-node.lock")
# Fixed locations, so that a crashed session's leftovers can be found by the next one.
RUN_DIR = Path("/run/pgsched-node")
STATE_DIR = Path("/var/lib/pgsched-node")
HOST_DIRS = (
    Path("/var/lib/kubelet"),
    Path("/run/containerd"),
    Path("/var/lib/cni"),
    Path("/var/log/pods"),
    Path("/var/log/containers"),
    RUN_DIR,
    STATE_DIR,
)
CGROUP_PARENT = "kubepods"
CONTAINERD_SOCKET = RUN_DIR / "containerd.sock"


class NodeSetupError(RuntimeError):
    """The machine cannot run the node; the message says what is missing and the fix."""


def in_netns(argv: Sequence[str | os.PathLike[str]]) -> list[str]:
    """``argv`` run inside the node's network namespace (same PID: nsenter execs it)."""
    return ["nsenter", f"--net={NETNS_PATH}", "--", *(os.fspath(arg) for arg in argv)]


def check_machine() -> None:
    """Fail with the fix when something the node needs is missing."""
    problems = []
    if os.geteuid() != 0:
        problems.append("the local node needs root (network namespaces, mounts, cgroups)")
    for tool, package in (
        ("/usr/sbin/runc", "runc"),
        ("/usr/lib/cni/bridge", "containernetworking-plugins"),
        ("/usr/bin/socat", "socat"),
        ("/usr/sbin/iptables", "iptables"),
        ("/usr/bin/nsenter", "util-linux"),
        ("/usr/sbin/ip", "iproute2"),
    ):
        if not Path(tool).exists():
            problems.append(f"{tool} is missing (Debian package {package})")
    if "overlay" not in Path("/proc/filesystems").read_text():
        subprocess.run(["modprobe", "overlay"], capture_output=True, check=False)
        if "overlay" not in Path("/proc/filesystems").read_text():
            problems.append("the kernel has no overlayfs (modprobe overlay, CONFIG_OVERLAY_FS)")
    if problems:
        raise NodeSetupError(
            "cannot start the local node: "
            + "; ".join(problems)
            + ". `hack/debian-deps.sh` (run by make and .ci/run) installs the packages."
        )


class MachineLock:
    """An exclusive flock on /run/pgsched-node.lock for the node's lifetime."""

    def __init__(self) -> None:
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        handle = open(LOCK_PATH, "a+")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another session"
            print(
                f"devenv: waiting for the local node lock {LOCK_PATH} (held by {holder}); "
                "one real node per machine",
                file=sys.stderr,
                flush=True,
            )
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.truncate(0)
            self._file.close()  # closing drops the flock
            self._file = None


# -- network namespace -------------------------------------------------------------------------


def create_netns(service_cidr: str) -> None:
    """The node's namespace: its IP on ``lo``, and a route for the Services' ClusterIPs.

    The route is for connections made in the namespace itself (the harness's probe that a
    Service is routed, ``ControlPlane.publish_host_port``): with no route at all, connecting
    to a ClusterIP fails with "network unreachable" before kube-proxy's rules could rewrite
    the destination, as a host with no default route would. Pods need none of it (their
    packets reach kube-proxy's rules on the way in)."""
    _run("ip", "netns", "add", NETNS)
    _run("ip", "-n", NETNS, "link", "set", "lo", "up")
    _run("ip", "-n", NETNS, "addr", "add", f"{NODE_IP}/32", "dev", "lo")
    _run("ip", "-n", NETNS, "route", "add", service_cidr, "dev", "lo")


def write_cni_config(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "cniVersion": "1.0.0",
        "name": "pgsched",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "loopback"},
        ],
    }
    (directory / "10-pgsched.conflist").write_text(json.dumps(config, indent=2) + "\n")


# -- cleaning up -----------------------------------------------------------------------------


def clean_host() -> None:
    """Stop and remove everything a node leaves on the machine, whether it was stopped
    cleanly or crashed: processes in the namespace, container shims and containers (by their
    cgroup), mounts, the fixed host directories, the ``kubepods`` cgroups, the namespace."""
    if NETNS_PATH.exists():
        pids = subprocess.run(
            ["ip", "netns", "pids", NETNS], capture_output=True, text=True, check=False
        ).stdout.split()
        _kill(int(pid) for pid in pids)
    _kill(_shim_pids(shims_only=False))
    _kill_cgroup_members()
    _unmount_under([*HOST_DIRS, NETNS_PATH.parent / f"cni-{NETNS}"])
    for directory in HOST_DIRS:
        subprocess.run(["rm", "-rf", "--one-file-system", str(directory)], check=False)
    _remove_cgroups()
    if NETNS_PATH.exists():
        subprocess.run(["ip", "netns", "delete", NETNS], capture_output=True, check=False)


def _shim_pids(*, shims_only: bool = True) -> Iterator[int]:
    """Container shims (they daemonize away from containerd) and, unless ``shims_only``, the
    host side of the API server relay: processes naming a path under RUN_DIR on their
    command line."""
    marker = f"{RUN_DIR}/".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes()
            if marker in cmdline and (not shims_only or b"containerd-shim" in cmdline):
                yield int(entry.name)


def _cgroup_dirs() -> list[Path]:
    """Every ``kubepods`` cgroup directory, deepest first (cgroup v1 hierarchies and v2)."""
    roots = [Path("/sys/fs/cgroup") / CGROUP_PARENT]
    roots += [p / CGROUP_PARENT for p in Path("/sys/fs/cgroup").iterdir() if p.is_dir()]
    found: list[Path] = []
    for root in roots:
        if root.is_dir():
            found += sorted((p for p in root.rglob("*") if p.is_dir()), key=_depth, reverse=True)
            found.append(root)
    return found


def _depth(path: Path) -> int:
    return len(path.parts)


def _kill_cgroup_members() -> None:
    """Kill every process left in the pods' cgroups (thawing frozen ones first), for up to
    5 s: a container's processes may still be forking while the first ones die."""
    for _ in range(50):
        members = list(_cgroup_members())
        if not members:
            return
        _thaw_cgroups()
        _kill(members)
        time.sleep(0.1)


def _cgroup_members() -> Iterator[int]:
    for directory in _cgroup_dirs():
        with contextlib.suppress(OSError):
            for line in (directory / "cgroup.procs").read_text().split():
                yield int(line)


def _thaw_cgroups() -> None:
    for directory in _cgroup_dirs():
        state = directory / "freezer.state"
        if state.exists():
            with contextlib.suppress(OSError):
                state.write_text("THAWED")


def _remove_cgroups() -> None:
    for directory in _cgroup_dirs():
        with contextlib.suppress(OSError):
            directory.rmdir()


def _kill(pids: Iterator[int] | list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _unmount_under(prefixes: list[Path]) -> None:
    """Lazily unmount every mount point below the prefixes, deepest first."""
    for _ in range(5):
        points = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if any(point == str(p) or point.startswith(f"{p}/") for p in prefixes):
                points.append(point)
        if not points:
            return
        for point in sorted(points, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise NodeSetupError(f"{' '.join(argv)} failed: {result.stderr.strip()}")


# -- configuration files -----------------------------------------------------------------------


def containerd_config(*, cni_conf_dir: Path, sandbox_image: str) -> str:
    return f"""version = 3
root = "{STATE_DIR / "containerd"}"
state = "{RUN_DIR / "containerd"}"

[grpc]
  address = "{CONTAINERD_SOCKET}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{sandbox_image}"

[plugins."io.containerd.cri.v1.runtime"]
  # Without it every sandbox fails ("can't get final child's PID from pipe: EOF"): the
  # machine lacks CAP_SYS_RESOURCE, so runc may not lower oom_score_adj below ours.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_cdi = false
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{cni_conf_dir}"

[plugins."io.containerd.nri.v1.nri"]
  disable = true
"""


def kubelet_config(*, ca_file: Path, resolv_conf: Path, work_dir: Path) -> str:
    return f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {NODE_IP}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
containerRuntimeEndpoint: unix://{CONTAINERD_SOCKET}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {ca_file}}}
authorization:
  mode: Webhook
resolvConf: {resolv_conf}
volumePluginDir: {work_dir / "volume-plugins"}
serializeImagePulls: false
# Nothing can be pulled here: never garbage-collect the imported images, never evict for disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
  nodefs.inodesFree: "1%"
nodeStatusUpdateFrequency: 4s
nodeStatusReportFrequency: 10s
syncFrequency: 10s
"""


def kube_proxy_config(*, kubeconfig: Path, hostname: str) -> str:
    return f"""apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
hostnameOverride: {hostname}
mode: iptables
clusterCIDR: {CLUSTER_CIDR}
bindAddress: {NODE_IP}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
iptables:
  masqueradeAll: true
conntrack:
  # Leave the machine-wide conntrack table size alone.
  maxPerCore: 0
"""


def read_image_index(path: Path) -> list[list[str]]:
    """``images/index`` lines: ``TAR REFERENCE [MORE TAGS...]``."""
    if not path.is_file():
        raise NodeSetupError(
            f"no local images: {path} does not exist; build them with `make images` "
            "(hack/images/build.sh)"
        )
    entries = [line.split() for line in path.read_text().splitlines() if line.strip()]
    for entry in entries:
        if not Path(entry[0]).is_file():
            raise NodeSetupError(f"{entry[0]} (listed in {path}) is missing: run `make images`")
    return entries


class RealNode:
    """containerd, kubelet and kube-proxy of the one node, inside the namespace.

    ``start()`` imports the local images and waits until the Node is Ready and schedulable;
    ``stop()`` is "the node dies": kubelet, kube-proxy and containerd are stopped and every
    container is killed, while the Node object and its pods stay in the API (as when a
    machine loses power). ``start()`` again brings it back.
    """

    def __init__(
        self,
        name: str,
        *,
        work_dir: Path,
        bin_dir: Path,
        image_index: Path,
        kubelet_kubeconfig: Path,
        proxy_kubeconfig: Path,
        ca_file: Path,
        verbosity: int,
    ) -> None:
        self.name = name
        self.work_dir = work_dir
        self.bin_dir = bin_dir
        self.image_index = image_index
        self.ctr = bin_dir / "ctr"
        logs = work_dir / "logs"
        cni_dir = work_dir / "cni"
        write_cni_config(cni_dir)
        config = work_dir / "containerd.toml"
        config.write_text(
            containerd_config(cni_conf_dir=cni_dir, sandbox_image="registry.k8s.io/pause:3.10")
        )
        resolv_conf = work_dir / "resolv.conf"
        resolv_conf.write_text("# no DNS in the local cluster (docs/local-cluster.md)\n")
        kubelet_yaml = work_dir / "kubelet.yaml"
        kubelet_yaml.write_text(
            kubelet_config(ca_file=ca_file, resolv_conf=resolv_conf, work_dir=work_dir)
        )
        proxy_yaml = work_dir / "kube-proxy.yaml"
        proxy_yaml.write_text(kube_proxy_config(kubeconfig=proxy_kubeconfig, hostname=name))
        path = f"{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        env = {**os.environ, "PATH": path}  # containerd 2's shim first on PATH
        self.containerd = processes.ManagedProcess(
            "containerd",
            in_netns([bin_dir / "containerd", f"--config={config}"]),
            log_path=logs / "containerd.log",
            env=env,
        )
        self.kubelet = processes.ManagedProcess(
            "kubelet",
            in_netns(
                [
                    bin_dir / "kubelet",
                    f"--config={kubelet_yaml}",
                    f"--kubeconfig={kubelet_kubeconfig}",
                    f"--hostname-override={name}",
                    f"--node-ip={NODE_IP}",
                    f"--v={verbosity}",
                ]
            ),
            log_path=logs / "kubelet.log",
            env=env,
        )
        self.kube_proxy = processes.ManagedProcess(
            "kube-proxy",
            in_netns([bin_dir / "kube-proxy", f"--config={proxy_yaml}", f"--v={verbosity}"]),
            log_path=logs / "kube-proxy.log",
            env=env,
        )
        self._imported = False

    def start(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        self.containerd.start()
        deadline = time.monotonic() + 30
        while self._ctr("version", check=False).returncode != 0:
            self.containerd.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"containerd did not answer on {CONTAINERD_SOCKET} in 30s")
            time.sleep(0.1)
        if not self._imported:
            self.import_images()
        self.kubelet.start()
        self.kube_proxy.start()

    def import_images(self) -> None:
        for tar, reference, *tags in read_image_index(self.image_index):
            self._ctr("images", "import", tar)
            for tag in tags:
                if tag != reference:
                    self._ctr("images", "tag", "--force", reference, tag)
        self._imported = True

    def stop(self) -> None:
        """The node dies: daemons stopped, containers killed; the API objects stay."""
        self.kube_proxy.stop(grace=5.0)
        self.kubelet.stop(grace=5.0)
        self.containerd.stop(grace=5.0)
        _kill(_shim_pids())
        _kill_cgroup_members()
        _unmount_under([Path("/var/lib/kubelet/pods"), RUN_DIR / "containerd"])
        _remove_cgroups()

    def running(self) -> bool:
        return self.kubelet.running()

    def _ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.ctr), f"--address={CONTAINERD_SOCKET}", "--namespace=k8s.io", *args],
            capture_output=True,
            text=True,
            check=False,
        )
        if check and result.returncode != 0:
            raise NodeSetupError(f"ctr {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def memory(self) -> dict[str, int]:
        running = [self.containerd, self.kubelet, self.kube_proxy]
        return {p.name: p.rss_bytes() for p in running if p.running()}
