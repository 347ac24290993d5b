"""Every wait explained (issue 26 #3): a queued run says what it waits for, in the same
words on every screen — ``pgsched describe``, the ScheduledJob's status and its
``RunWaiting`` Event (the UI's run page is compared line by line in
tests/ui/test_ui_run_facts.py). Before, a run held by its pool or by maxConcurrentRuns
said only ``QUEUED``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cli_runner import pgsched
from factories import RecordingLauncher, define
from pgsched.engine import dispatch, pools, runs, starts, waits
from pgsched.k8s.client.endings import NamespaceEndings
from pgsched.k8s.reporting.publisher import Publisher

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def claim(conn, job, *, at=T0):
    return dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id], now=at).claimed


def queue(conn, job, token, *, at=T0):
    return runs.run_now(conn, job.id, token=token, scheduled_for=at).run


def test_a_run_held_by_its_pool_names_the_pool_and_the_runs_that_fill_it(dsn, conn):
    pools.upsert(conn, "default", "etl", 2)
    first = define(conn, "first", pool="etl", maxConcurrentRuns=5, schedule="0 0 1 1 *", now=T0)
    second = define(conn, "second", pool="etl", maxConcurrentRuns=5, schedule="0 0 1 1 *", now=T0)
    holding = [queue(conn, first, "a"), queue(conn, first, "b")]
    assert len(claim(conn, first)) == 2
    waiting = queue(conn, second, "c")
    assert claim(conn, second) == []

    said = f"pool etl (2 of 2 running: runs {holding[0].id}, {holding[1].id})"
    wait = waits.of_run(conn, waiting.id, now=T0)
    assert wait is not None and (wait.reason, wait.message) == (waits.POOL_FULL, said)
    shown = pgsched("describe", str(waiting.id), dsn=dsn).out
    assert f"Waiting for:       {said}" in shown, shown
    described = pgsched("describe", str(waiting.id), "-o", "json", dsn=dsn).json()
    assert described["waitingFor"] == {"reason": "PoolFull", "message": said}


def test_the_status_says_what_stays_true_while_the_pool_s_holders_come_and_go(conn):
    """The ScheduledJob's status is rendered when its own runs change, not when another
    job's run leaves the pool and the next takes its place: status.waiting says the pool
    is full, as its RunWaiting Event does, not which runs fill it (describe and the UI name
    them: they read the run now)."""
    pools.upsert(conn, "default", "etl", 1)
    first = define(conn, "first", pool="etl", maxConcurrentRuns=5, schedule="0 0 1 1 *", now=T0)
    second = define(conn, "second", pool="etl", maxConcurrentRuns=5, schedule="0 0 1 1 *", now=T0)
    holder = queue(conn, first, "a")
    assert len(claim(conn, first)) == 1
    waiting = queue(conn, second, "c")
    kube = StatusApi(second)
    Publisher(kube, clock=lambda: T0).patch_status(conn, second, kube.get(""))  # type: ignore[arg-type]
    stored = kube.object["status"]["waiting"]
    assert (stored["runId"], stored["reason"]) == (waiting.id, "PoolFull")
    assert stored["message"] == "pool etl (1 of 1 running)"
    [event] = [item for item in kube.events if item["reason"] == "RunWaiting"]
    assert event["message"] == f"run {waiting.id} waits for pool etl (1 of 1 running)"

    # first's run ends and its next takes the slot: second's status is not rendered again,
    # and what it says is still true.
    conn.execute(
        "UPDATE pgsched.job_runs SET status = 'COMPLETED', finished_at = %s WHERE id = %s",
        [T0, holder.id],
    )
    queue(conn, first, "b")
    [next_holder] = claim(conn, first)
    now = waits.of_run(conn, waiting.id, now=T0)
    assert now is not None
    assert (now.message, now.lasting) == (
        f"pool etl (1 of 1 running: run {next_holder.id})",
        stored["message"],
    )


def test_a_run_held_by_max_concurrent_runs_names_the_running_run(dsn, conn):
    job = define(conn, "report", maxConcurrentRuns=1, schedule="0 0 1 1 *", now=T0)
    running = queue(conn, job, "a")
    claim(conn, job)
    waiting = queue(conn, job, "b")
    assert claim(conn, job) == []

    said = f"maxConcurrentRuns 1 (run {running.id} running)"
    assert waits.of_run(conn, waiting.id, now=T0) == waits.Wait(
        waiting.id, waits.MAX_CONCURRENT_RUNS, said, said
    )
    assert said in pgsched("describe", str(waiting.id), dsn=dsn).out


def test_a_run_of_a_job_whose_pool_does_not_exist_says_so(conn):
    job = define(conn, "lonely", pool="nowhere", schedule="0 0 1 1 *", now=T0)
    waiting = queue(conn, job, "a")
    assert claim(conn, job) == []
    wait = waits.of_run(conn, waiting.id, now=T0)
    assert wait is not None and wait.reason == waits.POOL_NOT_FOUND
    assert wait.message == "pool nowhere (no ConcurrencyPool nowhere in namespace default)"


def test_a_queued_run_counts_down_its_starting_deadline(conn):
    job = define(
        conn,
        "report",
        maxConcurrentRuns=1,
        startingDeadlineSeconds=60,
        schedule="0 0 1 1 *",
        now=T0,
    )
    queue(conn, job, "a")
    claim(conn, job)
    conn.execute(
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for,"
        " deadline_at) VALUES (%s, 'QUEUED', 'schedule', %s, %s)",
        [job.id, T0, T0 + timedelta(seconds=60)],
    )
    held = waits.first_of(conn, job.id, now=T0 + timedelta(seconds=20))
    assert held is not None
    assert held.message.endswith("; starting deadline in 40 s"), held.message
    # the stored status's words do not count down: they name the instant
    assert held.lasting.endswith("; starting deadline at 2026-06-01T12:01:00Z"), held.lasting


def test_a_run_not_due_yet_says_when(conn):
    job = define(conn, "later", schedule="0 0 1 1 *", now=T0)
    waiting = queue(conn, job, "a", at=T0 + timedelta(minutes=5))
    wait = waits.of_run(conn, waiting.id, now=T0)
    assert wait is not None and wait.reason == waits.NOT_DUE
    assert wait.message == "its time, 2026-06-01T12:05:00Z (in 5 min)"
    assert wait.lasting == "its time, 2026-06-01T12:05:00Z"


def test_a_deferred_launch_says_the_api_server_holds_it(dsn, conn):
    class Away:
        def launch(self, run, definition):
            from pgsched.engine.launcher import LaunchDeferred

            raise LaunchDeferred("creating Job x: the API server is unavailable (EOF)")

    job = define(conn, "report", schedule="0 0 1 1 *", now=T0)
    waiting = queue(conn, job, "a")
    assert dispatch.run_once(conn, Away(), definition_ids=[job.id], now=T0).deferred
    said = "the API server (launch deferred: creating Job x: the API server is unavailable (EOF))"
    assert waits.of_run(conn, waiting.id, now=T0) == waits.Wait(
        waiting.id, waits.LAUNCH_DEFERRED, said, said
    )
    assert said in pgsched("describe", str(waiting.id), dsn=dsn).out


def test_a_job_suspended_by_kueue_waits_for_admission_by_its_queue(dsn, conn):
    job = define(
        conn,
        "queued",
        schedule="0 0 1 1 *",
        now=T0,
        jobTemplate={
            "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "busybox"}],
                    }
                }
            },
        },
    )
    queue(conn, job, "a")
    [run] = claim(conn, job)
    assert run.lease_token is not None
    starts.observe(
        conn,
        run.id,
        run.lease_token,
        waiting_reason=starts.AWAITING_ADMISSION,
        waiting_message="Job queued-1 is suspended, waiting for admission by admission queue team-a",
        awaiting_admission=True,
        now=T0,
    )
    said = "admission (Kueue queue team-a)"
    assert waits.of_run(conn, run.id, now=T0) == waits.Wait(
        run.id, waits.AWAITING_ADMISSION, said, said
    )
    assert "Waiting for:       admission (Kueue queue team-a)" in (
        pgsched("describe", str(run.id), dsn=dsn).out
    )


class StatusApi:
    """An API server in memory for one ScheduledJob: its status as patched, and Events."""

    def __init__(self, definition):
        self.object = {"metadata": {"name": definition.name, "uid": str(definition.id)}}
        self.events: list[dict] = []
        self.endings = NamespaceEndings()  # none seen going

    def get(self, path, **params):
        return self.object

    def merge_patch(self, path, body):
        self.object = {**self.object, "status": body["status"]}
        return self.object

    def create(self, path, body):
        self.events.append(body)
        return body


def test_status_and_an_event_say_what_the_oldest_queued_run_waits_for_once_per_reason(conn):
    job = define(conn, "report", maxConcurrentRuns=1, schedule="0 0 1 1 *", now=T0)
    running = queue(conn, job, "a")
    claim(conn, job)
    waiting = queue(conn, job, "b")
    kube = StatusApi(job)
    publisher = Publisher(kube, clock=lambda: T0)  # type: ignore[arg-type]

    publisher.patch_status(conn, job, kube.get(""))
    publisher.patch_status(conn, job, kube.get(""))  # nothing changed: no second Event

    said = f"maxConcurrentRuns 1 (run {running.id} running)"
    assert kube.object["status"]["waiting"] == {
        "runId": waiting.id,
        "reason": "MaxConcurrentRuns",
        "message": said,
        "since": "2026-06-01T12:00:00Z",
    }
    [event] = [item for item in kube.events if item["reason"] == "RunWaiting"]
    assert event["message"] == f"run {waiting.id} waits for {said}"


def test_a_run_nothing_holds_gets_no_waiting_event(conn):
    """Every scheduled run is QUEUED for a moment before its dispatch: no Event for that."""
    job = define(conn, "free", schedule="0 0 1 1 *", now=T0)
    waiting = queue(conn, job, "a")
    kube = StatusApi(job)
    Publisher(kube, clock=lambda: T0).patch_status(conn, job, kube.get(""))  # type: ignore[arg-type]
    assert kube.object["status"]["waiting"]["runId"] == waiting.id
    assert kube.object["status"]["waiting"]["reason"] == "Dispatch"
    assert [item for item in kube.events if item["reason"] == "RunWaiting"] == []
