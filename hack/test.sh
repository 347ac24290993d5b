#!/usr/bin/env bash
# `make test`: the whole suite as two pytest processes at once, because the two halves want
# different things of a 2-core machine. The tests that need the machine's one Kubernetes
# node (markers `cluster`, `own_cluster`: chart, operator, real node, chaos on the cluster)
# mostly wait — for pods, timeouts, minute boundaries; the others (unit, database, UI, the
# database chaos) mostly compute. Run one after the other, the waiting leaves a core idle.
#
# The cluster half prints as it goes; the other half's output follows when both are done.
# The exit status is the first non-zero one (5, "no tests collected", counts as success:
# arguments may select tests of one half only). Arguments go to both pytest processes.
set -uo pipefail
cd "$(dirname "$0")/.."

export PGSCHED_REQUIRE_CLUSTER=1
log=$(mktemp /tmp/pgsched-test-rest.XXXXXX)
trap 'rm -f "$log"' EXIT

started=$(date +%s)
.venv/bin/pytest -m "not cluster and not own_cluster" "$@" >"$log" 2>&1 &
rest=$!
trap 'kill "$rest" 2>/dev/null; rm -f "$log"' EXIT INT TERM

.venv/bin/pytest -m "cluster or own_cluster" "$@"
cluster_status=$?
echo "test: the cluster half ended after $(($(date +%s) - started))s (status $cluster_status)"
wait "$rest"
rest_status=$?
echo "----- the tests without the cluster (pytest -m 'not cluster and not own_cluster') -----"
cat "$log"
echo "test: both halves done in $(($(date +%s) - started))s (status $cluster_status, $rest_status)"

for status in "$cluster_status" "$rest_status"; do
    if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then
        exit "$status"
    fi
done
