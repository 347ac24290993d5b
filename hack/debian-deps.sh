#!/usr/bin/env bash
# Install the Debian packages the local node and the image build need, if any is missing:
# runc and the CNI plugins (the node's runtime and network), iptables (kube-proxy), socat
# (relays into the node's network namespace), buildah, mmdebstrap, gcc (the images),
# busybox-static (the busybox image). containerd itself is built by hack/k8s/build.sh.
# With --test, also what the test suite itself needs, so that `make test` skips nothing on a
# fresh machine: chromium (the web UI's browser tests), pgbouncer (the pooler check's tests),
# lua5.4 (the tests run deploy/argocd/*.lua in it).
# Usage: hack/debian-deps.sh [--test]   (root; `apt-get update` runs only when something is missing)
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "$2" ]; }
have runc /usr/sbin/runc || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
have iptables /usr/sbin/iptables || need+=(iptables)
have socat /usr/bin/socat || need+=(socat)
have buildah /usr/bin/buildah || need+=(buildah)
have mmdebstrap /usr/bin/mmdebstrap || need+=(mmdebstrap)
have gcc /usr/bin/gcc || need+=(gcc libc6-dev)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -f /usr/lib/"$(uname -m)"-linux-gnu/libc.a ] || need+=(libc6-dev)
have nsenter /usr/bin/nsenter || need+=(util-linux)
have ip /usr/sbin/ip || need+=(iproute2)
have conntrack /usr/sbin/conntrack || need+=(conntrack)
# busybox-static, not busybox: the image must not depend on the host's libc.
if ! { [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; }; then need+=(busybox-static); fi

if [ "${1:-}" = --test ]; then
    have chromium /usr/bin/chromium || need+=(chromium)
    have pgbouncer /usr/sbin/pgbouncer || need+=(pgbouncer)
    have lua5.4 /usr/bin/lua5.4 || need+=(lua5.4)
fi

if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "node: missing Debian packages: ${need[*]}; install them as root:" >&2
        echo "    apt-get install --no-install-recommends ${need[*]}" >&2
        exit 1
    fi
    echo "node: installing ${need[*]} from Debian"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${need[@]}"; }; then
        echo "node: could not install ${need[*]}: is the Debian package index reachable" \
            "(apt-get update)? Install them by hand and retry." >&2
        exit 1
    fi
fi

if ! grep -qw overlay /proc/filesystems && ! modprobe overlay 2>/dev/null; then
    echo "node: this kernel has no overlayfs (containerd's and buildah's image storage need it);" \
        "load the module (modprobe overlay) or use a kernel with CONFIG_OVERLAY_FS" >&2
    exit 1
fi
