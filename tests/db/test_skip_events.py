"""A skip that is a plan (a suspended job, a Calendar's holiday) posts a Normal RunSkipped
Event; one that is trouble (a starting deadline missed) a Warning: `kubectl get events
--field-selector type=Warning` lists trouble only (docs/notifications.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from factories import define, runs_of
from pgsched.engine import materialize, reap
from pgsched.k8s.client.endings import NamespaceEndings
from pgsched.k8s.reporting.publisher import Publisher

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


class Events:
    """The publisher's API: Events recorded, every ScheduledJob gone (no status patch)."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str]] = []  # (type, reason, message)
        self.endings = NamespaceEndings()  # none seen going

    def create(self, path, body):
        self.posted.append((body["type"], body["reason"], body["message"]))
        return body

    def get(self, path, **params):
        return {"metadata": {"uid": "another"}}


def test_a_planned_skip_is_a_normal_event_and_a_missed_deadline_a_warning(conn):
    paused = define(conn, "paused", schedule="*/5 * * * *", suspend=True, now=T0)
    late = define(conn, "late", schedule="*/5 * * * *", startingDeadlineSeconds=10, now=T0)
    materialize.run_once(conn, now=T0 + timedelta(minutes=5))
    reap.run_once(conn, now=T0 + timedelta(minutes=5, seconds=11))  # "late" never claimed
    assert [row["reason"] for row in runs_of(conn, paused)] == ["Suspended"]
    assert [row["reason"] for row in runs_of(conn, late)] == ["DeadlineMissed"]
    api = Events()
    Publisher(api).run_once(conn)  # type: ignore[arg-type]
    skips = {
        message.split(" (")[0]: kind
        for kind, reason, message in api.posted
        if reason == "RunSkipped"
    }
    [paused_run] = runs_of(conn, paused)
    [late_run] = runs_of(conn, late)
    assert skips == {f"run {paused_run['id']}": "Normal", f"run {late_run['id']}": "Warning"}, (
        api.posted
    )
