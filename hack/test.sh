#!/usr/bin/env bash
# `make test`: the whole suite in three pytest runs, two at a time, because the tests want
# different things of a 2-core machine:
#
# - the others (unit, database, UI, the database chaos) mostly compute: one process, in the
#   background from the start (two xdist workers there, tried on 2026-12-06, stretched the
#   tests alone on the node from 28 to 38 min and made the cluster chaos miss its faults:
#   those judge timings, and one process finishes before them anyway);
# - beside them, alone on the machine's one Kubernetes node, the tests that need the
#   cluster to themselves (`exclusive`: API server and node restarts, the cluster chaos,
#   cluster-wide admission, latency) and those that start a cluster of their own
#   (`own_cluster`): these mostly wait;
# - then the tests on the node (marker `cluster`) and those with an API server of their
#   own (`api_only`): PGSCHED_TEST_WORKERS pytest-xdist workers (default 3) attached to
#   one shared cluster (`python -m devenv.controlplane up --state-file`), each test in a
#   namespace of its own, the longest modules first (tests/plugins/ordering.py).
#
# Every run writes a JUnit report to .cache/test-reports/ (the previous run's stay in
# previous/; hack/test_durations.py sums them and makes docs/development.md's table of the
# slowest tests). The cluster runs print as they go; the others' output follows when all
# are done. The exit status is the first non-zero one (5, "no tests collected", counts as
# success: arguments may select tests of one group only). Arguments go to every run.
set -uo pipefail
cd "$(dirname "$0")/.."

export PGSCHED_REQUIRE_CLUSTER=1
export PGSCHED_PORT_SHARE=1/2  # the cluster phases'; the tests without the cluster take 0/2
workers=${PGSCHED_TEST_WORKERS:-3}
reports=.cache/test-reports
# The previous run's reports stay for tests/plugins/ordering.py (longest modules first).
mkdir -p "$reports/previous"
if compgen -G "$reports/*.xml" >/dev/null; then
    rm -f "$reports"/previous/*.xml
    mv "$reports"/*.xml "$reports/previous/"
fi
log=$(mktemp /tmp/pgsched-test-rest.XXXXXX)
state=$(mktemp -u /tmp/pgsched-shared-cluster.XXXXXX)
cluster_pid=
rest=

stop_shared_cluster() {
    if [ -n "$cluster_pid" ]; then
        kill -TERM "$cluster_pid" 2>/dev/null
        wait "$cluster_pid" 2>/dev/null
        cluster_pid=
    fi
}
cleanup() {
    stop_shared_cluster
    [ -n "$rest" ] && kill "$rest" 2>/dev/null
    rm -f "$log" "$state"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# How busy the machine's CPUs were since the last mark: what says whether a phase waited
# (room for more at once) or computed (the cores were the limit).
cpu_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
read -r busy_start total_start < <(cpu_jiffies)
busy_mark=$busy_start total_mark=$total_start
cpu_since_mark() {  # sets cpu_note
    local busy total
    read -r busy total < <(cpu_jiffies)
    cpu_note=$(awk -v b=$((busy - busy_mark)) -v t=$((total - total_mark)) -v hz="$(getconf CLK_TCK)" \
        'BEGIN { if (t > 0) printf "CPUs %.0f%% busy, %.0f core-seconds", 100 * b / t, b / hz }')
    busy_mark=$busy
    total_mark=$total
}

started=$(date +%s)
# The two phases running at once take ports of two residue classes (devenv.processes
# free_port): a port one of them chose and has not bound yet is never the other's.
PGSCHED_PORT_SHARE=0/2 .venv/bin/pytest -m "not cluster and not own_cluster and not api_only" \
    --junitxml="$reports/rest.xml" "$@" >"$log" 2>&1 &
rest=$!

# Alone on the node first: these mostly wait (chaos, restarts, clusters of their own) while
# the tests without the cluster compute; the parallel phase, which computes too, follows
# once those are nearly done and has the cores to itself.
.venv/bin/pytest -m "exclusive or own_cluster" --junitxml="$reports/alone.xml" "$@"
alone_status=$?
cpu_since_mark
echo "test: the cluster tests that run alone ended after $(($(date +%s) - started))s (status $alone_status; $cpu_note)"

# The parallel phase: one shared cluster, started once and stopped after.
.venv/bin/python -m devenv.controlplane up --state-file "$state" --crds crds >/dev/null &
cluster_pid=$!
cluster_started=$(date +%s)
while [ ! -s "$state" ]; do
    if ! kill -0 "$cluster_pid" 2>/dev/null; then
        echo "test: the shared cluster did not start (python -m devenv.controlplane up)" >&2
        exit 1
    fi
    if [ $(($(date +%s) - cluster_started)) -gt 300 ]; then
        echo "test: the shared cluster was not ready within 300 s" >&2
        exit 1
    fi
    sleep 0.5
done
echo "test: shared cluster ready after $(($(date +%s) - started))s"
PGSCHED_SHARED_CLUSTER="$state" .venv/bin/pytest -n "$workers" --dist loadscope \
    -m "(cluster or api_only) and not exclusive and not own_cluster" \
    --junitxml="$reports/parallel.xml" "$@"
parallel_status=$?
stop_shared_cluster
cpu_since_mark
echo "test: the parallel cluster tests ended after $(($(date +%s) - started))s (status $parallel_status; $cpu_note)"

wait "$rest"
rest_status=$?
rest=
echo "----- the tests without the cluster (pytest -m 'not cluster and not own_cluster and not api_only') -----"
cat "$log"
busy_mark=$busy_start total_mark=$total_start
cpu_since_mark
echo "test: all done in $(($(date +%s) - started))s (status $parallel_status, $alone_status, $rest_status; $cpu_note)"
.venv/bin/python hack/test_durations.py

for status in "$parallel_status" "$alone_status" "$rest_status"; do
    if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then
        exit "$status"
    fi
done
