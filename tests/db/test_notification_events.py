"""Which events reach which targets: notifications page for trouble, not for plans.

A skipped occurrence is most often a plan — a suspended job, a calendar's holiday, a
concurrency policy that skips on purpose — so a target without an ``events`` list, a
namespace's NotificationPolicy default above all, gets failures, retries, suspensions,
recoveries and missed deadlines, never skips; a target that lists ``skipped`` gets every
skip, with its reason. Only the derivation is under test (the outbox rows the trigger
writes, ``sql/functions/derive_notifications.sql``): nothing is delivered.
"""

from __future__ import annotations

from datetime import UTC, datetime

from db.test_calendar_exclusions import store_uk
from db.test_notifications import fail
from factories import define, runs_of
from pgsched.engine import materialize, notifications

T0 = datetime(2027, 3, 24, 12, 0, tzinfo=UTC)  # Wednesday before Good Friday (26 March)
GOOD_FRIDAY_NOON = datetime(2027, 3, 26, 12, 0, tzinfo=UTC)
SIGNED = {"signingSecretRef": {"name": "hooks", "key": "hmac"}}


def target(name: str, **fields):
    return {
        "name": name,
        "type": "Webhook",
        "url": f"https://{name}.example.com/",
        **SIGNED,
        **fields,
    }


def derived(conn) -> set[tuple[str, str, str]]:
    """(job, target, event) of every notification the trigger wrote."""
    rows = conn.execute("SELECT name, target_name, event FROM pgsched.notifications").fetchall()
    return {(row["name"], row["target_name"], row["event"]) for row in rows}


def planned_skips_and_a_failure(conn, **notify):
    """A suspended job and one on a holiday, both skipping, and a job that fails."""
    store_uk(conn)
    paused = define(conn, "paused", schedule="0 9 * * *", suspend=True, now=T0, **notify)
    holiday = define(
        conn,
        "holiday",
        schedule="0 9 * * 1-5",
        timeZone="Europe/London",
        calendars={"exclude": ["uk-bank-holidays"]},
        catchUp="none",
        now=T0,
        **notify,
    )
    broken = define(conn, "broken", schedule="0 0 1 1 *", now=T0, **notify)
    materialize.run_once(conn, now=GOOD_FRIDAY_NOON)
    fail(conn, broken, GOOD_FRIDAY_NOON)
    skips = {
        (job.name, row["reason"])
        for job in (paused, holiday)
        for row in runs_of(conn, job)
        if row["status"] == "SKIPPED"
    }
    assert {("paused", "Suspended"), ("holiday", "CalendarExcluded")} <= skips, skips
    return skips


def test_a_policy_target_without_events_gets_the_failure_but_no_planned_skip(conn):
    with conn.transaction():
        notifications.upsert_policy(
            conn,
            "default",
            {"targets": [target("oncall"), target("audit", events=["skipped", "failed"])]},
        )
    skips = planned_skips_and_a_failure(conn)

    sent = derived(conn)
    assert {(job, event) for job, name, event in sent if name == "oncall"} == {("broken", "failed")}
    audited = {(job, event) for job, name, event in sent if name == "audit"}
    assert audited == {("broken", "failed")} | {(job, "skipped") for job, _ in skips}


def test_a_jobs_own_target_without_events_gets_no_skip_either(conn):
    planned_skips_and_a_failure(conn, notify={"targets": [target("team")]})
    assert derived(conn) == {("broken", "team", "failed")}


def test_a_target_listing_skipped_gets_each_skip_with_its_reason(conn):
    skips = planned_skips_and_a_failure(
        conn, notify={"targets": [target("team", events=["skipped"])]}
    )
    rows = conn.execute(
        "SELECT name, payload->'run'->>'reason' AS reason FROM pgsched.notifications"
    ).fetchall()
    assert {(row["name"], row["reason"]) for row in rows} == skips
