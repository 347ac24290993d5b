"""The run API against the real server on a real database: what a pod gets, and what a
hostile tenant's pod gets when it tries what a database session allowed (docs/run-api.md)."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
import uuid

from prometheus_client import REGISTRY

from factories import RecordingLauncher, define
from pgsched.engine import dispatch, runs
from pgsched.engine.lease import Lease
from pgsched.runapi import presence
from pgsched.runapi.limits import Limits


def start(conn, job, token):
    runs.run_now(conn, job.id, token=token)
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id]).claimed
    return Lease(run.id, run.lease_token)


def beat(run_api, run_lease, lease_text=None):
    return run_api.request(
        "POST",
        f"/v1/runs/{run_lease.run_id}/heartbeat",
        lease=lease_text if lease_text is not None else run_lease.token,
    )


def refused_count(namespace):
    found = REGISTRY.get_sample_value(
        "pgsched_run_api_refused_total", {"namespace": namespace, "why": "rate"}
    )
    return found or 0.0


def row(conn, run_id):
    return conn.execute("SELECT * FROM pgsched.job_runs WHERE id = %s", (run_id,)).fetchone()


def test_a_pod_heartbeats_notes_its_end_and_finishes_through_the_api(conn, run_api):
    job = define(conn, maxConcurrentRuns=5)
    mine = start(conn, job, "mine")
    assert beat(run_api, mine).body == {"state": "active"}
    assert row(conn, mine.run_id)["heartbeat_at"] is not None
    ended = run_api.request("POST", f"/v1/runs/{mine.run_id}/workload-ended", lease=mine.token)
    assert ended.body == {"marked": True}
    body = json.dumps({"status": "FAILED", "reason": "Boom", "error": "e" * 10, "exitCode": 3})
    finished = run_api.request(
        "POST", f"/v1/runs/{mine.run_id}/finish", lease=mine.token, body=body.encode()
    )
    assert (finished.status, finished.body) == (200, {"finished": True})
    found = row(conn, mine.run_id)
    assert (found["status"], found["reason"], found["exit_code"]) == ("FAILED", "Boom", 3)
    # Ended: the same lease now learns it lost the run, and changes nothing.
    assert beat(run_api, mine).body == {"state": "lost"}


def test_a_made_up_lease_or_another_runs_lease_is_refused_and_changes_nothing(conn, run_api):
    job = define(conn, maxConcurrentRuns=5)
    mine = start(conn, job, "mine")
    other = start(conn, job, "other")
    for lease_text in (uuid.uuid4(), mine.token, "not-a-uuid", ""):
        answer = beat(run_api, other, lease_text)
        assert answer.status == 401, answer
        assert "lease" in answer.body["error"]
    finish = json.dumps({"status": "COMPLETED"}).encode()
    stolen = run_api.request(
        "POST", f"/v1/runs/{other.run_id}/finish", lease=mine.token, body=finish
    )
    assert stolen.status == 401
    missing = run_api.request("POST", f"/v1/runs/{other.run_id}/heartbeat")
    assert missing.status == 401
    found = row(conn, other.run_id)
    assert (found["status"], found["heartbeat_at"]) == ("RUNNING", None)


def test_a_ten_megabyte_body_is_refused_with_413_and_changes_nothing(conn, run_api):
    job = define(conn, maxConcurrentRuns=5)
    mine = start(conn, job, "mine")
    huge = json.dumps({"status": "COMPLETED", "error": "x" * 10_000_000}).encode()
    answer = run_api.request("POST", f"/v1/runs/{mine.run_id}/finish", lease=mine.token, body=huge)
    assert answer.status == 413
    assert row(conn, mine.run_id)["status"] == "RUNNING"
    # The server is still there for the next request.
    assert beat(run_api, mine).body == {"state": "active"}


def test_bad_bodies_and_queries_get_a_message_naming_the_field(conn, run_api):
    job = define(conn, maxConcurrentRuns=5)
    mine = start(conn, job, "mine")
    path = f"/v1/runs/{mine.run_id}/finish"
    for body, field in (
        (b"[1]", "JSON object"),
        (b"{", "JSON object"),
        (json.dumps({"status": "DONE"}).encode(), "status"),
        (json.dumps({"status": "FAILED", "exitCode": 1e9}).encode(), "exitCode"),
        (json.dumps({"status": "FAILED", "retryHint": "always"}).encode(), "retryHint"),
        (json.dumps({"status": "FAILED", "reason": 7}).encode(), "reason"),
    ):
        answer = run_api.request("POST", path, lease=mine.token, body=body)
        assert answer.status == 400 and field in answer.body["error"], (body, answer)
    bad_wait = run_api.request(
        "GET", f"/v1/runs/{mine.run_id}/lease?state=active&wait=soon", lease=mine.token
    )
    assert bad_wait.status == 400 and "wait" in bad_wait.body["error"]
    assert run_api.request("GET", "/v1/runs/-1/lease", lease=mine.token).status == 404
    assert run_api.request("GET", f"/v1/runs/{'9' * 40}/lease", lease=mine.token).status == 404
    assert row(conn, mine.run_id)["status"] == "RUNNING"


def test_a_cancel_ends_the_long_poll_at_once(conn, run_api):
    job = define(conn, maxConcurrentRuns=5)
    mine = start(conn, job, "mine")
    answers = []

    def poll():
        started = time.monotonic()
        answer = run_api.request(
            "GET", f"/v1/runs/{mine.run_id}/lease?state=active&wait=25", lease=mine.token
        )
        answers.append((answer, time.monotonic() - started))

    waiter = threading.Thread(target=poll)
    waiter.start()
    time.sleep(1.0)  # the poll is waiting
    requested = time.monotonic()
    runs.cancel_run(conn, mine.run_id, by=runs.BY_CLI)
    waiter.join(30)
    heard = time.monotonic() - requested
    [(answer, _took)] = answers
    assert answer.body == {"state": "cancel_requested"}
    assert heard < 1.0, f"the long poll answered {heard:.2f}s after the cancel"


def test_a_long_poll_with_nothing_to_tell_answers_at_its_wait(conn, run_api):
    job = define(conn, maxConcurrentRuns=5)
    mine = start(conn, job, "mine")
    started = time.monotonic()
    answer = run_api.request(
        "GET", f"/v1/runs/{mine.run_id}/lease?state=active&wait=1", lease=mine.token
    )
    assert answer.body == {"state": "active"}
    assert 0.9 < time.monotonic() - started < 5


def test_a_namespace_over_its_rate_gets_429_and_another_namespace_does_not(
    conn, dsn, start_run_api
):
    api = start_run_api(dsn, limits=Limits(rate=5.0, burst=5, concurrency=4, waiters=10))
    flooder = start(conn, define(conn, "flood", namespace="team-a"), "a")
    neighbour = start(conn, define(conn, "calm", namespace="team-b"), "b")
    before = refused_count("team-a")
    answers = [beat(api, flooder) for _ in range(30)]
    codes = [answer.status for answer in answers]
    assert codes.count(429) >= 20, codes
    assert refused_count("team-a") - before == codes.count(429)  # what the operator sees
    # One of those refusals, not a 31st beat: on a loaded machine 30 beats take long enough
    # for the bucket (5 a second) to have a token again.
    refused = answers[-1] if codes[-1] == 429 else answers[codes.index(429)]
    assert "team-a" in refused.body["error"]
    assert int(refused.headers["retry-after"]) >= 1
    assert beat(api, neighbour).status == 200
    # Forged leases spend a budget of their own, not team-b's.
    for _ in range(30):
        beat(api, neighbour, uuid.uuid4())
    assert beat(api, neighbour).status == 200


def test_a_connection_refused_429_is_not_read_again_until_its_retry_after(conn, dsn, start_run_api):
    """A flood on one keep-alive connection waits in its own buffers (bench run_api_flood);
    another namespace's requests are answered meanwhile."""
    api = start_run_api(dsn, limits=Limits(rate=1.0, burst=1, concurrency=4, waiters=10))
    flooder = start(conn, define(conn, "flood", namespace="team-a"), "a")
    neighbour = start(conn, define(conn, "calm", namespace="team-b"), "b")
    kept = http.client.HTTPSConnection(
        "127.0.0.1", api.port, context=ssl.create_default_context(cadata=api.ca), timeout=10
    )
    path, headers = (
        f"/v1/runs/{flooder.run_id}/heartbeat",
        {"Authorization": f"Bearer {flooder.token}"},
    )
    statuses = []
    for _ in range(2):
        kept.request("POST", path, headers=headers)
        response = kept.getresponse()
        response.read()
        statuses.append(response.status)
    assert statuses == [200, 429]
    retry_after = float(response.getheader("Retry-After"))
    sent = time.monotonic()
    kept.request("POST", path, headers=headers)
    assert beat(api, neighbour).status == 200  # meanwhile, at once
    response = kept.getresponse()
    response.read()
    assert time.monotonic() - sent >= retry_after - 0.1
    assert response.status == 200  # a token came back while it waited
    kept.close()


def test_connections_refused_together_are_not_read_again_all_at_once(conn, dsn, start_run_api):
    """Held back each for its Retry-After and up to half as long again: a flood's
    connections, refused in the same moment, come back spread out, not in one burst that a
    neighbour's requests would meet (bench run_api_flood)."""
    api = start_run_api(dsn, limits=Limits(rate=1.0, burst=1, concurrency=4, waiters=10))
    flooder = start(conn, define(conn, "flood", namespace="team-a"), "a")
    context = ssl.create_default_context(cadata=api.ca)
    kept = [
        http.client.HTTPSConnection("127.0.0.1", api.port, context=context, timeout=10)
        for _ in range(10)
    ]
    path, headers = (
        f"/v1/runs/{flooder.run_id}/heartbeat",
        {"Authorization": f"Bearer {flooder.token}"},
    )
    refused_at: dict[int, float] = {}
    for index, connection_ in enumerate(kept):  # the burst's one token, then refusals
        connection_.request("POST", path, headers=headers)
        answer = connection_.getresponse()
        answer.read()
        if answer.status == 429:
            refused_at[index] = time.monotonic()
            retry_after = float(answer.getheader("Retry-After"))
    assert len(refused_at) >= 9, refused_at
    held: dict[int, float] = {}  # connection -> seconds from its refusal to its next answer

    def again(index: int) -> None:
        kept[index].request("POST", path, headers=headers)
        kept[index].getresponse().read()
        held[index] = time.monotonic() - refused_at[index]

    senders = [threading.Thread(target=again, args=(index,)) for index in refused_at]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(10)
    assert len(held) == len(refused_at)
    assert min(held.values()) >= retry_after - 0.1, held  # never before its Retry-After
    assert max(held.values()) <= 1.5 * retry_after + 1.0, held
    spread = max(held.values()) - min(held.values())
    assert spread >= 0.15, f"held back {sorted(held.values())}: all for the same time"
    for connection_ in kept:
        connection_.close()


def test_stopping_the_server_answers_its_open_long_polls(conn, dsn, start_run_api, caplog):
    api = start_run_api(dsn)
    mine = start(conn, define(conn, maxConcurrentRuns=5), "mine")
    answers = []
    poll = threading.Thread(
        target=lambda: answers.append(
            api.request(
                "GET", f"/v1/runs/{mine.run_id}/lease?state=active&wait=25", lease=mine.token
            )
        )
    )
    poll.start()
    time.sleep(1.0)
    stopping = time.monotonic()
    api.serving.stop(timeout=10)
    poll.join(10)
    assert [answer.body for answer in answers] == [{"state": "active"}]
    assert time.monotonic() - stopping < 5
    assert "Task was destroyed" not in caplog.text


def test_a_replica_whose_server_stopped_stamps_no_presence(conn, dsn, start_run_api, caplog):
    """The presence stamp tells the reaper pods can beat; a replica whose server thread is
    gone (planted here by stopping the server alone) must stop saying so, and log why."""
    api = start_run_api(dsn)

    def seen_at():
        found = conn.execute("SELECT seen_at FROM pgsched.run_api_presence").fetchone()
        return found and found["seen_at"]

    stamped = seen_at()
    deadline = time.monotonic() + 10
    while seen_at() == stamped and time.monotonic() < deadline:  # a second stamp: it beats
        time.sleep(0.2)
    assert seen_at() != stamped, "a serving replica stamps its presence"
    api.serving._server.stop(timeout=10)  # the fault: its server's thread ends
    time.sleep(presence.INTERVAL_SECONDS)  # a stamp in flight may land
    last = seen_at()
    time.sleep(presence.INTERVAL_SECONDS * 2.5)
    assert seen_at() == last, "no stamp while the server is not running"
    assert "the run API server has stopped" in caplog.text
