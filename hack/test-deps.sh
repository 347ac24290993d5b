#!/usr/bin/env bash
# Install the Debian packages the test suite itself needs, if any is missing, so that
# `make test` skips nothing on a fresh machine (CI's .ci/run calls `make test` unchanged):
# chromium (the web UI's browser tests) and pgbouncer (the pooler check's tests).
# The node's and the image build's packages are hack/debian-deps.sh's.
# Usage: hack/test-deps.sh   (root; `apt-get update` runs only when something is missing)
set -euo pipefail

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || need+=(pgbouncer)

if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "test: missing Debian packages: ${need[*]}; install them as root:" >&2
        echo "    apt-get install --no-install-recommends ${need[*]}" >&2
        exit 1
    fi
    echo "test: installing ${need[*]} from Debian"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
