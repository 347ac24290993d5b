#!/usr/bin/env bash
# Build the images the local node runs, from Debian and this checkout (nothing is pulled):
#   registry.k8s.io/pause:3.10         a static C program (pause.c), from scratch
#   localhost/pgsched-python:3.11-slim Debian bookworm's python3 made to look like the official
#                                      python:3.11-slim (mmdebstrap + the customize step below)
#   ghcr.io/pgsched/pgsched:<appVersion> and :dev   the root Dockerfile, unchanged, on that base
#   busybox:1.36 and busybox:latest    Debian's busybox-static
#   ghcr.io/pgsched/pgsched:previous   the previous release (hack/previous-release), for the
#                                      upgrade test
# Each is exported as a docker-archive tar into ${PGSCHED_CACHE_DIR:-<repo>/.cache}/images/,
# named by the hash of its inputs, so an unchanged image is never rebuilt; the node imports
# the tars listed in images/index, one line each: `TAR REFERENCE [MORE TAGS...]`
# (`ctr -n k8s.io images import TAR`, then `ctr images tag REFERENCE TAG`).
#
# After a source change `make images` rebuilds only the pgsched image (about a minute warm).
#
# `build.sh --check` builds nothing: it exits 1, saying so, when images/index does not list
# the pgsched image of the current sources (the cluster tests' fixtures ask before starting).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${PGSCHED_CACHE_DIR:-$repo/.cache}
out=$cache/images
store=$out/buildah # buildah's own storage: nothing of ours lands in /var/lib/containers
app_version=$(awk -F'"' '$1 == "appVersion: " {print $2}' "$repo/charts/pgsched/Chart.yaml")
PAUSE_IMAGE=registry.k8s.io/pause:3.10
BASE_IMAGE=localhost/pgsched-python:3.11-slim
PGSCHED_IMAGE=ghcr.io/pgsched/pgsched

hash_of() { sha256sum | cut -c1-16; }

# The Python base and the pgsched image are named by these hashes (computed first: --check).
# mmdebstrap uses this machine's apt sources. The customize step does what the official slim
# image has: pip and setuptools in /usr/local (not Debian's), no EXTERNALLY-MANAGED marker.
mmdebstrap_args=(--variant=minbase
    --include=python3,python3-venv,python3-pip,python-is-python3,passwd,ca-certificates bookworm)
customize='apt-get purge -y -qq python3-pip python3-setuptools python3-wheel >/dev/null
rm -f /usr/lib/python3.*/EXTERNALLY-MANAGED
python3 "$(echo /usr/share/python-wheels/pip-*.whl)/pip" install --quiet --root-user-action=ignore --no-index \
    --find-links /usr/share/python-wheels pip setuptools
apt-get clean && rm -rf /var/lib/apt/lists/* /root/.cache'
rootfs_hash=$( { printf '%s\n' "${mmdebstrap_args[@]}"; cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources 2>/dev/null || true; } | hash_of)
base_hash=$( { echo "$rootfs_hash"; echo "$customize"; } | hash_of)
# The build context is what .dockerignore lets through.
pgsched_hash=$( { echo "$base_hash"; cd "$repo" && git ls-files -co --exclude-standard -- \
    Dockerfile .dockerignore pyproject.toml README.md operator examples/pgsched_examples |
    grep -v -e __pycache__ -e '\.egg-info/' | LC_ALL=C sort | xargs sha256sum; } | hash_of)
pgsched_tar=$out/pgsched-$pgsched_hash.tar
if [ "${1:-}" = --check ]; then
    grep -qF "$pgsched_tar " "$out/index" 2>/dev/null && exit 0
    echo "images: $out/index does not list the pgsched image of the current sources" \
        "($(basename "$pgsched_tar")): pods would run an older build; run \`make images\`" >&2
    exit 1
fi

"$repo/hack/debian-deps.sh"
mkdir -p "$out"
exec 9>"$out/.build.lock"
flock 9

buildah() { command buildah --root "$store/root" --runroot "$store/run" --storage-driver overlay "$@"; }
fail() { echo "images: $*" >&2; exit 1; }
index=()

# -- pause -----------------------------------------------------------------------------------
pause_hash=$( { cat "$here/pause.c"; echo "$PAUSE_IMAGE"; gcc --version | head -1; } | hash_of)
pause_tar=$out/pause-$pause_hash.tar
if [ ! -f "$pause_tar" ]; then
    echo "images: building $PAUSE_IMAGE"
    tmp=$(mktemp -d)
    gcc -static -Os -s -o "$tmp/pause" "$here/pause.c" || fail "gcc -static failed (Debian: libc6-dev)"
    c=$(buildah from scratch)
    buildah copy "$c" "$tmp/pause" /pause >/dev/null
    buildah config --entrypoint '["/pause"]' --user 65535:65535 "$c"
    buildah commit --quiet --rm "$c" "$PAUSE_IMAGE" >/dev/null
    rm -rf "$tmp"
    buildah push --quiet "$PAUSE_IMAGE" "docker-archive:$pause_tar.part:$PAUSE_IMAGE"
    mv "$pause_tar.part" "$pause_tar"
fi
index+=("$pause_tar $PAUSE_IMAGE")

# -- busybox ---------------------------------------------------------------------------------
busybox_hash=$( { sha256sum /bin/busybox; echo v1; } | hash_of)
busybox_tar=$out/busybox-$busybox_hash.tar
if [ ! -f "$busybox_tar" ]; then
    echo "images: building busybox:1.36 from Debian's busybox-static"
    tmp=$(mktemp -d)
    mkdir -p "$tmp/bin" "$tmp/tmp" "$tmp/etc"
    cp /bin/busybox "$tmp/bin/busybox"
    for applet in $("$tmp/bin/busybox" --list); do
        [ "$applet" = busybox ] || ln -s busybox "$tmp/bin/$applet"
    done
    chmod 1777 "$tmp/tmp"
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' >"$tmp/etc/passwd"
    printf 'root:x:0:\nnobody:x:65534:\n' >"$tmp/etc/group"
    c=$(buildah from scratch)
    buildah copy "$c" "$tmp" / >/dev/null
    buildah config --cmd '["sh"]' --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$c"
    buildah commit --quiet --rm "$c" docker.io/library/busybox:1.36 >/dev/null
    rm -rf "$tmp"
    buildah push --quiet docker.io/library/busybox:1.36 \
        "docker-archive:$busybox_tar.part:docker.io/library/busybox:1.36"
    mv "$busybox_tar.part" "$busybox_tar"
fi
index+=("$busybox_tar docker.io/library/busybox:1.36 docker.io/library/busybox:latest")

# -- the Python base -------------------------------------------------------------------------
base_tar=$out/python-base-$base_hash.tar
if [ ! -f "$base_tar" ]; then
    rootfs=$out/python-rootfs-$rootfs_hash.tar
    if [ ! -f "$rootfs" ]; then
        echo "images: making a Debian bookworm Python root filesystem with mmdebstrap (2-3 minutes)"
        mmdebstrap --quiet "${mmdebstrap_args[@]}" "$rootfs.part" ||
            fail "mmdebstrap failed: can this machine reach its Debian package index (apt-get update)?"
        mv "$rootfs.part" "$rootfs"
    fi
    echo "images: building $BASE_IMAGE"
    c=$(buildah from scratch)
    buildah add "$c" "$rootfs" / >/dev/null
    buildah run --runtime /usr/sbin/runc --network host "$c" -- sh -ec "$customize"
    buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --env LANG=C.UTF-8 --cmd '["python3"]' "$c"
    buildah commit --quiet --rm "$c" "$BASE_IMAGE" >/dev/null
    buildah push --quiet "$BASE_IMAGE" "docker-archive:$base_tar.part:$BASE_IMAGE"
    mv "$base_tar.part" "$base_tar"
fi
if ! buildah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
    buildah pull --quiet "docker-archive:$base_tar" >/dev/null
fi

# -- pgsched, from the root Dockerfile unchanged -----------------------------------------------
if [ ! -f "$pgsched_tar" ]; then
    echo "images: building $PGSCHED_IMAGE:$app_version from the root Dockerfile"
    started=$(date +%s)
    # pip inside the build reaches the package index through a proxy only the host's CA
    # bundle trusts; buildah's default runtime (crun) does not work on cgroup v1 hybrid.
    (cd "$repo" && buildah bud --quiet --runtime /usr/sbin/runc --network host --layers \
        -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
        --build-arg "PYTHON_IMAGE=$BASE_IMAGE" \
        -t "$PGSCHED_IMAGE:$app_version" -t "$PGSCHED_IMAGE:dev" . >/dev/null) ||
        fail "building the pgsched image failed (see above); if pip could not reach the package" \
            "index, check the network and /etc/ssl/certs/ca-certificates.crt"
    buildah push --quiet "$PGSCHED_IMAGE:$app_version" \
        "docker-archive:$pgsched_tar.part:$PGSCHED_IMAGE:$app_version"
    mv "$pgsched_tar.part" "$pgsched_tar"
    echo "images: pgsched built in $(($(date +%s) - started))s"
fi
index+=("$pgsched_tar $PGSCHED_IMAGE:$app_version $PGSCHED_IMAGE:dev")

# -- the previous release's pgsched, for the upgrade test ---------------------------------------
# Its pods heartbeat with a database login of their own; tests/cluster/test_upgrade_in_place.py
# runs them under this release's operator. Built from that commit's tree, once.
previous=$(grep -v '^#' "$repo/hack/previous-release" | head -1)
previous_tar=$out/previous-pgsched-$( { echo "$previous"; echo "$base_hash"; } | hash_of).tar
if [ ! -f "$previous_tar" ]; then
    echo "images: building $PGSCHED_IMAGE:previous from commit $previous (hack/previous-release)"
    git -C "$repo" cat-file -e "$previous^{commit}" 2>/dev/null ||
        fail "commit $previous (hack/previous-release) is not in this clone: git fetch --unshallow"
    tmp=$(mktemp -d)
    git -C "$repo" archive "$previous" | tar -x -C "$tmp"
    (cd "$tmp" && buildah bud --quiet --runtime /usr/sbin/runc --network host --layers \
        -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
        --build-arg "PYTHON_IMAGE=$BASE_IMAGE" -t "$PGSCHED_IMAGE:previous" . >/dev/null) ||
        fail "building the previous release's pgsched image failed (see above)"
    rm -rf "$tmp"
    buildah push --quiet "$PGSCHED_IMAGE:previous" \
        "docker-archive:$previous_tar.part:$PGSCHED_IMAGE:previous"
    mv "$previous_tar.part" "$previous_tar"
fi
index+=("$previous_tar $PGSCHED_IMAGE:previous")

printf '%s\n' "${index[@]}" >"$out/index.part"
mv "$out/index.part" "$out/index"
# Older pgsched tars are superseded: keep the cache from growing with every source change.
find "$out" -maxdepth 1 -name 'pgsched-*.tar' ! -name "*$pgsched_hash*" -delete
find "$out" -maxdepth 1 -name 'python-base-*.tar' ! -name "*$base_hash*" -delete
find "$out" -maxdepth 1 -name 'previous-pgsched-*.tar' ! -name "$(basename "$previous_tar")" -delete
