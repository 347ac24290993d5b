"""A run's lease is verifiable without the row that stored it (migration 0032).

A lease is 8 bytes of claim nonce and the first 8 bytes of HMAC-SHA256(key, run id ||
nonce) under a key only the schema owner can read. So a claim the database lost (a failover
before the claim's WAL reached the standby: the run is QUEUED again, its pod heartbeating)
is re-established by the pod's next call, once, within the definition's cap; and a forged
lease is refused exactly as before. Every pod call here is made by a real job login
against the real functions. The failover itself, with a real promoted standby, is in
test_failover.py; here the lost claim is written as that standby has it.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import uuid
from datetime import timedelta

import psycopg
import pytest

from factories import RecordingLauncher, define, lose_claim, runs_of
from invariants import launches_hold_their_claim, never_over_cap, no_double_launch
from pgsched.db import connection
from pgsched.engine import dispatch, lease, runs
from pgsched.k8s import names


def start(conn, job, token, **kwargs):
    runs.run_now(conn, job.id, token=token, **kwargs)
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id]).claimed
    return lease.Lease(run.id, run.lease_token)


def row(conn, run_id):
    return conn.execute("SELECT * FROM pgsched.job_runs WHERE id = %s", [run_id]).fetchone()


def mac(key: bytes, run_id: int, nonce: bytes) -> bytes:
    return hmac.new(key, run_id.to_bytes(8, "big") + nonce, hashlib.sha256).digest()[:8]


def test_a_lease_is_a_nonce_and_an_hmac_sha256_of_the_run_id_under_the_owners_key(conn):
    key = conn.execute("SELECT key FROM pgsched.lease_key").fetchone()["key"]
    assert len(key) == 32
    job = define(conn, maxConcurrentRuns=5)
    leases = [start(conn, job, token) for token in ("a", "b", "c")]
    for held in leases:
        nonce, tag = held.token.bytes[:8], held.token.bytes[8:]
        assert tag == mac(key, held.run_id, nonce)
    assert len({held.token.bytes[:8] for held in leases}) == 3
    # Any run id (a later timeline's start at 2^40 x n) and nonce, against Python's hmac.
    for run_id in (1, 2**40 + 7, 2**62):
        nonce = uuid.uuid4().bytes[8:]
        made = conn.execute("SELECT pgsched.lease_for(%s, %s) AS l", [run_id, nonce]).fetchone()
        assert made["l"].bytes == nonce + mac(key, run_id, nonce)


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT key FROM pgsched.lease_key",
        "SELECT pgsched.lease_for(1, '\\x0001020304050607'::bytea)",
        "SELECT pgsched.lease_is_genuine(1, gen_random_uuid())",
        "SELECT pgsched.reestablish_claim(1, gen_random_uuid())",
        "SELECT pgsched.adopt_lease(1, gen_random_uuid(), gen_random_uuid())",
        "SELECT pgsched.hmac_pad('\\x00'::bytea, 54)",
    ],
)
def test_the_job_role_can_neither_read_the_key_nor_make_or_check_a_lease(conn, job_dsn, statement):
    with connection.connect(job_dsn) as pod, pytest.raises(psycopg.errors.InsufficientPrivilege):
        pod.execute(statement)


def test_a_pods_heartbeat_re_establishes_a_claim_the_database_lost_once(conn, job_dsn):
    job = define(conn, maxConcurrentRuns=1)
    mine = start(conn, job, "mine")
    lose_claim(conn, mine.run_id)

    with connection.connect(job_dsn) as pod:
        assert lease.heartbeat(pod, mine) == "active"
        assert lease.heartbeat(pod, mine) == "active"
    again = row(conn, mine.run_id)
    assert (again["status"], again["lease_token"]) == ("RUNNING", mine.token)
    assert again["started_at"] is not None and again["heartbeat_at"] is not None
    assert again["attempt"] == 1  # the same attempt, not a retry

    # The dispatcher does not claim it a second time.
    launcher = RecordingLauncher()
    assert dispatch.run_once(conn, launcher, definition_ids=[job.id]).claimed == []
    assert (
        launches_hold_their_claim(conn, [(mine.run_id, names.lease_fingerprint(mine.token))]) == []
    )


def previous_release_heartbeat(pod, held):
    """The signature the previous release's pods call (a trailing time, ignored)."""
    return pod.execute(
        "SELECT pgsched.heartbeat(%s, %s, 'infinity') AS state", [held.run_id, held.token]
    ).fetchone()["state"]


@pytest.mark.parametrize(
    ("call", "answer", "status"),
    [
        (lambda pod, held: lease.finish(pod, held, "COMPLETED", exit_code=0), True, "COMPLETED"),
        (lambda pod, held: lease.workload_ended(pod, held), True, "RUNNING"),
        (lambda pod, held: lease.state(pod, held), "active", "RUNNING"),
        (lambda pod, held: lease.listen(pod, held), "active", "RUNNING"),
        (previous_release_heartbeat, "active", "RUNNING"),
    ],
    ids=["finish_run", "workload_ended", "lease_state", "listen_for_cancel", "previous release"],
)
def test_every_call_of_the_pod_re_establishes_a_lost_claim(conn, job_dsn, call, answer, status):
    """A finish after the loss records the outcome (it was lost before: `lost`); the SDK
    runner's checkpoint (lease_state) must not answer `lost` where the heartbeat would not."""
    job = define(conn, maxConcurrentRuns=1)
    mine = start(conn, job, "mine")
    lose_claim(conn, mine.run_id)
    with connection.connect(job_dsn) as pod:
        assert call(pod, mine) == answer
    again = row(conn, mine.run_id)
    assert (again["status"], again["lease_token"]) == (status, mine.token)
    if status == "COMPLETED":
        assert again["exit_code"] == 0
        assert again["started_at"] <= again["finished_at"]
    else:  # a sign of life: a silent run's verdict is then looked up by its Job's name
        assert again["heartbeat_at"] is not None


def forgeries(conn, mine, other):
    """Every lease a job login could present for `mine` that is not its claim's."""
    wrong_mac = uuid.UUID(bytes=mine.token.bytes[:15] + bytes([mine.token.bytes[15] ^ 1]))
    never_had = 987654321
    nonce = uuid.uuid4().bytes[8:]
    genuine_elsewhere = conn.execute(
        "SELECT pgsched.lease_for(%s, %s) AS l", [never_had, nonce]
    ).fetchone()["l"]
    return {
        "wrong MAC": lease.Lease(mine.run_id, wrong_mac),
        "another run's lease": lease.Lease(mine.run_id, other.token),
        "a random uuid": lease.Lease(mine.run_id, uuid.uuid4()),
        "no lease at all (NULL)": lease.Lease(mine.run_id, None),
        "a lease of a run id the database never had, for it": lease.Lease(
            never_had, genuine_elsewhere
        ),
        "a lease of a run id the database never had, for this run": lease.Lease(
            mine.run_id, genuine_elsewhere
        ),
    }


def refused_everywhere(pod, forged):
    return {
        "heartbeat": lease.heartbeat(pod, forged),
        "lease_state": lease.state(pod, forged),
        "listen_for_cancel": lease.listen(pod, forged),
        "workload_ended": lease.workload_ended(pod, forged),
        "finish_run": lease.finish(pod, forged, "COMPLETED"),
    }


REFUSED = {
    "heartbeat": "lost",
    "lease_state": "lost",
    "listen_for_cancel": "lost",
    "workload_ended": False,
    "finish_run": False,
}


def test_a_forged_lease_for_a_queued_run_is_refused_and_changes_nothing(conn, job_dsn):
    """Only the MAC tells a genuine lease of a QUEUED run from a forged one: the run has no
    lease on its row to compare with. A version that skipped the MAC check (re-establishing
    any lease presented for a QUEUED run) would answer `active` to the first forgery and
    make the run RUNNING under it — the end of this test plants exactly that version and
    shows it."""
    job = define(conn, maxConcurrentRuns=5)
    mine = start(conn, job, "mine")
    other = start(conn, job, "other")  # RUNNING: its lease is genuine, for its own run
    lose_claim(conn, mine.run_id)
    before = runs_of(conn, job)
    forged = forgeries(conn, mine, other)

    with connection.connect(job_dsn) as pod:
        for what, presented in forged.items():
            assert refused_everywhere(pod, presented) == REFUSED, what
        assert runs_of(conn, job) == before
        assert conn.execute("SELECT count(*) AS n FROM pgsched.job_runs").fetchone()["n"] == 2
        assert pod.execute("SELECT pg_listening_channels() AS c").fetchall() == []

        # The planted bug: the MAC check skipped. The same forgery now takes the run.
        conn.execute(
            "CREATE OR REPLACE FUNCTION pgsched.lease_is_genuine(run_id bigint, lease uuid)"
            " RETURNS boolean LANGUAGE sql AS 'SELECT true'"
        )
        assert lease.heartbeat(pod, forged["wrong MAC"]) == "active"
    assert row(conn, mine.run_id)["status"] == "RUNNING"


def test_a_genuine_lease_never_takes_a_run_running_under_another_lease_or_ended(conn, job_dsn):
    job = define(conn, maxConcurrentRuns=1)
    first = start(conn, job, "mine")
    lose_claim(conn, first.run_id)
    [reclaimed] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id]).claimed
    second = lease.Lease(reclaimed.id, reclaimed.lease_token)
    assert second.run_id == first.run_id and second.token != first.token

    with connection.connect(job_dsn) as pod:
        assert refused_everywhere(pod, first) == REFUSED
        assert row(conn, first.run_id)["lease_token"] == second.token
        assert lease.finish(pod, second, "COMPLETED")
        assert refused_everywhere(pod, first) == REFUSED
    assert row(conn, first.run_id)["status"] == "COMPLETED"


def test_a_re_established_claim_keeps_the_definitions_cap(conn, job_dsn):
    """A re-establishment is a claim: with the definition at its cap the run stays QUEUED
    (the pod is told `lost` as before); once there is room, its next call takes it."""
    job = define(conn, maxConcurrentRuns=1)
    lost = start(conn, job, "lost")
    lose_claim(conn, lost.run_id)
    earlier = row(conn, lost.run_id)["scheduled_for"] - timedelta(minutes=1)
    busy = start(conn, job, "busy", scheduled_for=earlier)  # first in queue order

    with connection.connect(job_dsn) as pod:
        assert lease.heartbeat(pod, lost) == "lost"
        assert row(conn, lost.run_id)["status"] == "QUEUED"
        assert lease.finish(pod, busy, "COMPLETED")
        assert lease.heartbeat(pod, lost) == "active"
        assert lease.finish(pod, lost, "COMPLETED")
    assert never_over_cap(conn) == []


def test_adopting_moves_a_run_to_a_genuine_earlier_lease_fenced_on_the_current_one(conn, job_dsn):
    job = define(conn, maxConcurrentRuns=5)
    first = start(conn, job, "mine")
    other = start(conn, job, "other")
    lose_claim(conn, first.run_id)
    [reclaimed] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id]).claimed
    current = lease.Lease(reclaimed.id, reclaimed.lease_token)

    assert not lease.adopt(conn, current, uuid.uuid4())  # not genuine
    assert not lease.adopt(conn, current, other.token)  # genuine, for another run
    assert not lease.adopt(conn, lease.Lease(first.run_id, uuid.uuid4()), first.token)  # fence
    assert row(conn, first.run_id)["lease_token"] == current.token

    assert lease.adopt(conn, current, first.token)
    assert not lease.adopt(conn, current, first.token)  # once: the fence moved with it
    with connection.connect(job_dsn) as pod:
        assert lease.heartbeat(pod, first) == "active"
        assert lease.heartbeat(pod, current) == "lost"
    assert row(conn, first.run_id)["lease_token"] == first.token


def test_pods_and_the_dispatcher_racing_for_lost_claims_take_each_run_exactly_once(
    conn, dsn, job_dsn
):
    """40 lost claims; the pods heartbeat them from one session (last first) while the
    dispatcher claims them from another (first first, one a round), as fast as they can. Each run ends up held by exactly one of them:
    either a pod was answered `active` (and the dispatcher never launched it) or the
    dispatcher launched it (and every one of that pod's beats was `lost`)."""
    job = define(conn, maxConcurrentRuns=100)
    lost = [start(conn, job, f"run-{n}") for n in range(40)]
    for held in lost:
        lose_claim(conn, held.run_id)
    answers: dict[int, set[str]] = {held.run_id: set() for held in lost}
    launcher = RecordingLauncher()
    go = threading.Barrier(2)

    def pods() -> None:
        with connection.connect(job_dsn) as pod:
            go.wait()
            for _ in range(3):
                for held in reversed(lost):  # the dispatcher claims from the front
                    answers[held.run_id].add(lease.heartbeat(pod, held))

    def dispatcher() -> None:
        with connection.connect(dsn) as own:
            go.wait()
            for _ in range(len(lost)):
                dispatch.run_once(own, launcher, batch_size=1, definition_ids=[job.id])

    threads = [threading.Thread(target=pods), threading.Thread(target=dispatcher)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    launched = {run.id for run in launcher.launched}
    for held in lost:
        by_pod = "active" in answers[held.run_id]
        assert by_pod != (held.run_id in launched), (held.run_id, answers[held.run_id])
        if by_pod:
            assert answers[held.run_id] == {"active"}
    assert no_double_launch(run.id for run in launcher.launched) == []
    assert (
        launches_hold_their_claim(
            conn,
            [(run.id, names.lease_fingerprint(str(run.lease_token))) for run in launcher.launched],
        )
        == []
    )
    statuses = {row["status"] for row in runs_of(conn, job)}
    assert statuses == {"RUNNING"}
    print(f"\n{len(lost) - len(launched)} taken back by their pods, {len(launched)} claimed again")
