"""Calendars with the real operator: a holiday feed in a ConfigMap excludes its days from
status.nextRuns exactly as `pgsched next` predicts, a calendar change re-plans its jobs,
a missing calendar is a condition, a bad feed is the Calendar's own Ready=False; and a
two-schedule job shows both entries in its printer column."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
import yaml

from cli_runner import pgsched
from devenv.waiting import wait_for
from holidays import uk_2027_ics
from plugins.operator import busybox

pytestmark = pytest.mark.cluster

# Weekdays at 09:00 London from the Thursday before Easter 2027: Good Friday (26 March)
# and Easter Monday (29 March, after the clocks went forward) are bank holidays.
EASTER_WEEKDAYS = "DTSTART:20270325T090000\nRRULE:FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR"


def apply(cluster, namespace: str, kind: str, name: str, body: dict) -> None:
    api_version = "v1" if kind == "ConfigMap" else "pgsched.dev/v1alpha1"
    manifest = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        **body,
    }
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))


def next_runs(sj, name: str, differing_from: list[str] | None = None) -> list[str]:
    return wait_for(
        lambda: (
            (runs := (sj.get(name).get("status") or {}).get("nextRuns"))
            and runs != differing_from
            and runs
        ),
        60,
        describe=lambda: f"status.nextRuns of {name} (other than {differing_from})",
    )


def test_a_holiday_feed_excludes_its_days_from_next_runs_as_pgsched_next_predicts(
    operators, sj, cluster, namespace
):
    operators.start()
    apply(cluster, namespace, "ConfigMap", "uk-holidays", {"data": {"2027.ics": uk_2027_ics()}})
    apply(
        cluster,
        namespace,
        "Calendar",
        "uk-bank-holidays",
        {
            "spec": {
                "exclude": {"ics": {"configMapRef": {"name": "uk-holidays", "key": "2027.ics"}}}
            }
        },
    )
    sj.apply(
        "payments",
        {
            "rrule": EASTER_WEEKDAYS,
            "timeZone": "Europe/London",
            "calendars": {"exclude": ["uk-bank-holidays"]},
            "jobTemplate": busybox("true"),
        },
    )

    shown = wait_for(
        lambda: (runs := next_runs(sj, "payments")) and "2027-03-26T09:00:00Z" not in runs and runs,
        60,
        describe=lambda: "nextRuns without Good Friday",
    )
    predicted = pgsched(
        "next", "payments", "--namespace", namespace, "-n", "3", "-o", "json", dsn=operators.dsn
    )
    assert predicted.code == 0, predicted.err
    listed = [datetime.fromisoformat(item["at"]) for item in predicted.json()["occurrences"]]

    assert shown == ["2027-03-25T09:00:00Z", "2027-03-30T08:00:00Z", "2027-03-31T08:00:00Z"]
    assert [at.strftime("%Y-%m-%dT%H:%M:%SZ") for at in listed] == shown
    ready = sj.condition("payments", "CalendarsReady")
    assert ready is not None and (ready["status"], ready["reason"]) == ("True", "CalendarsFound")
    calendar = json.loads(
        cluster.kubectl("get", "cal", "uk-bank-holidays", "-n", namespace, "-o", "json").stdout
    )
    [condition] = calendar["status"]["conditions"]
    assert (condition["status"], condition["message"]) == (
        "True",
        "excludes 0 dates, 8 ranges, 0 rules",
    )

    # The calendar changes: the job is re-planned (its status rendered again) at once.
    apply(
        cluster,
        namespace,
        "Calendar",
        "uk-bank-holidays",
        {"spec": {"exclude": {"dates": ["2027-03-25"]}}},
    )
    assert next_runs(sj, "payments", differing_from=shown) == [
        "2027-03-26T09:00:00Z",
        "2027-03-29T08:00:00Z",
        "2027-03-30T08:00:00Z",
    ]


def test_a_missing_calendar_is_a_condition_until_it_is_created(operators, sj, cluster, namespace):
    operators.start()
    sj.apply(
        "typo",
        {
            "rrule": EASTER_WEEKDAYS,
            "timeZone": "Europe/London",
            "calendars": {"exclude": ["closures"]},
            "jobTemplate": busybox("true"),
        },
    )
    missing = wait_for(
        lambda: sj.condition("typo", "CalendarsReady"), 60, describe=lambda: "CalendarsReady"
    )
    assert (missing["status"], missing["reason"]) == ("False", "CalendarNotFound")
    assert missing["message"].startswith(
        "Calendar closures (spec.calendars.exclude) does not exist"
    )

    apply(
        cluster, namespace, "Calendar", "closures", {"spec": {"exclude": {"dates": ["2027-03-25"]}}}
    )
    found = wait_for(
        lambda: (c := sj.condition("typo", "CalendarsReady")) and c["status"] == "True" and c,
        60,
        describe=lambda: "CalendarsReady to turn True",
    )
    assert found["reason"] == "CalendarsFound"
    assert sj.get("typo")["status"]["nextRuns"][0] == "2027-03-26T09:00:00Z"

    # A feed the reader refuses: the Calendar says why (the line), its days stay as they were.
    apply(
        cluster,
        namespace,
        "ConfigMap",
        "broken",
        {
            "data": {
                "x.ics": "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:20271301\nEND:VEVENT\nEND:VCALENDAR\n"
            }
        },
    )
    apply(
        cluster,
        namespace,
        "Calendar",
        "closures",
        {"spec": {"exclude": {"ics": {"configMapRef": {"name": "broken", "key": "x.ics"}}}}},
    )
    refused = wait_for(
        lambda: (
            (
                cal := json.loads(
                    cluster.kubectl("get", "cal", "closures", "-n", namespace, "-o", "json").stdout
                )
            )
            and cal.get("status", {}).get("conditions", [{}])[0].get("status") == "False"
            and cal["status"]["conditions"][0]
        ),
        60,
        describe=lambda: "the Calendar's Ready=False",
    )
    assert refused["reason"] == "InvalidSpec"
    assert refused["message"].startswith(
        "spec.exclude.ics: ConfigMap broken key x.ics: line 3: DTSTART is not a date like 20270101"
    )
    assert sj.get("typo")["status"]["nextRuns"][0] == "2027-03-26T09:00:00Z"


def test_a_two_schedule_job_shows_both_in_its_printer_column(operators, sj, cluster, namespace):
    operators.start()
    sj.apply(
        "digest",
        {
            "timeZone": "Europe/London",
            "schedules": [
                {"schedule": "30 8 * * 1-5"},
                {"rrule": "FREQ=WEEKLY;BYDAY=SA;BYHOUR=10", "timeZone": "America/New_York"},
            ],
            "jobTemplate": busybox("true"),
        },
    )
    next_runs(sj, "digest")
    table = cluster.kubectl("get", "sj", "digest", "-n", namespace).stdout
    assert "30 8 * * 1-5 | FREQ=WEEKLY;BYDAY=SA;BYHOUR=10 (America/New_York)" in table
