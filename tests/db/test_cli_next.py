"""``pgsched next``: the engine's own occurrences, for stored definitions and expressions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cli_runner import pgsched
from factories import define, reload, runs_of
from pgsched.engine import materialize

T0 = datetime(2027, 3, 26, 12, 0, tzinfo=UTC)


def test_next_agrees_with_what_the_engine_materializes(dsn, conn):
    """Across the spring-forward night in Sofia, with a gap-skip policy: `pgsched next`
    lists exactly the instants the materializer queues when its clock reaches them."""
    job = define(
        conn,
        "nightly",
        schedule="30 3 * * *",
        timeZone="Europe/Sofia",
        dstPolicy={"gap": "skip"},
        now=T0,
    )
    predicted = pgsched(
        "next", "nightly", "-n", "4", "--after", "2027-03-26T12:00:00Z", "-o", "json", dsn=dsn
    ).json()
    instants = [datetime.fromisoformat(item["at"]) for item in predicted["occurrences"]]

    for at in instants:
        materialize.run_once(conn, now=at + timedelta(seconds=1))
    queued = [row["scheduled_for"] for row in runs_of(conn, job) if row["status"] == "QUEUED"]

    assert queued == instants
    # 28 March 03:30 does not exist in Sofia: neither listed nor queued (recorded as a gap).
    assert [item["local"] for item in predicted["occurrences"]][:2] == [
        "2027-03-27T03:30:00+02:00",
        "2027-03-29T03:30:00+03:00",
    ]
    assert any(row["reason"] == "DSTGap" for row in runs_of(conn, job))
    assert reload(conn, job).next_run_at > instants[-1]


def test_next_of_a_stored_job_prints_local_time_and_utc(dsn, conn):
    define(
        conn,
        "standup",
        namespace="team",
        rrule="FREQ=DAILY;BYHOUR=8",
        timeZone="Europe/Sofia",
        now=T0,
    )
    result = pgsched(
        "next", "standup", "--namespace", "team", "-n", "2", "--after", "2027-03-27", dsn=dsn
    )
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "team/standup: rrule 'FREQ=DAILY;BYHOUR=8' in Europe/Sofia"
    assert lines[2].split() == ["1", "2027-03-27", "08:00:00", "EET", "2027-03-27T06:00:00Z"]
    assert lines[3].split() == ["2", "2027-03-28", "08:00:00", "EEST", "2027-03-28T05:00:00Z"]


def test_next_checks_an_expression_without_a_database(conn):
    result = pgsched(
        "next", "--cron", "30 8 * * MON-FRI", "--tz", "Europe/Sofia", "-n", "3",
        "--after", "2027-03-26T09:00", "-o", "json",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert [item["local"] for item in result.json()["occurrences"]] == [
        "2027-03-29T08:30:00+03:00",
        "2027-03-30T08:30:00+03:00",
        "2027-03-31T08:30:00+03:00",
    ]


def test_next_hashes_h_fields_like_the_named_job(dsn, conn):
    define(conn, "spread", namespace="team", schedule="H H * * *", now=T0)
    after = ("--after", "2027-04-01T00:00:00Z")
    common = ("-n", "2", "-o", "json", *after)
    stored = pgsched("next", "spread", "--namespace", "team", *common, dsn=dsn)
    named = pgsched("next", "spread", "--namespace", "team", "--cron", "H H * * *", *common)
    anonymous = pgsched("next", "--cron", "H H * * *", "-n", "2")
    assert stored.json()["occurrences"] == named.json()["occurrences"]
    assert "H fields hash the ScheduledJob's namespace/name" in anonymous.out


def test_next_after_a_time_lists_only_occurrences_strictly_after_it(dsn, conn):
    """`--after 08:00` answers "what runs after the 08:00 run": not 08:00 itself, for an
    expression and for a stored job alike (as the help says, and croniter's and dateutil's
    `after` mean)."""
    define(conn, "morning", namespace="team", schedule="0 8 * * *", now=T0)
    after = ("-n", "2", "-o", "json", "--after", "2027-04-01T08:00:00Z")
    stored = pgsched("next", "morning", "--namespace", "team", *after, dsn=dsn).json()
    expression = pgsched("next", "--cron", "0 8 * * *", *after).json()
    expected = ["2027-04-02T08:00:00Z", "2027-04-03T08:00:00Z"]
    assert [item["at"] for item in stored["occurrences"]] == expected
    assert [item["at"] for item in expression["occurrences"]] == expected
    one_shot = pgsched("next", "--run-at", "2027-04-01T08:00:00Z", *after)
    assert one_shot.code == 0 and one_shot.json()["occurrences"] == []


def test_next_of_a_stored_job_starts_at_its_next_run(dsn, conn):
    job = define(conn, "later", schedule="0 8 * * *", now=T0)
    listed = pgsched("next", "later", "-n", "1", "-o", "json", dsn=dsn).json()
    assert listed["occurrences"][0]["at"] == job.next_run_at.isoformat().replace("+00:00", "Z")


def test_next_refuses_bad_expressions_with_the_flag_and_an_example(conn):
    for argv, message in (
        (["--cron", "61 * * * *"], "--cron: minute value 61"),
        (["--rrule", "FREQ=DAILY;BYHOUR=25"], "--rrule:"),
        (["--cron", "* * * * *", "--tz", "Europe/Sofiya"], "unknown time zone 'Europe/Sofiya'"),
        (["--cron", "* * * * *", "-n", "prod"], "the namespace is --namespace for this command"),
        (["--cron", "* * * * *", "--rrule", "FREQ=DAILY"], "not allowed with argument"),
        ([], "name a ScheduledJob, or give an expression to check"),
        (["--cron", "* * * * *", "--after", "yesterday"], "--after 'yesterday' is not an ISO 8601"),
    ):
        result = pgsched("next", *argv)
        assert result.code == 2 and message in result.err, (argv, result)
        assert "example" in result.err or "usage" in result.err, (argv, result)


def test_next_says_when_a_one_shot_has_passed_and_when_a_job_is_suspended(dsn, conn):
    define(conn, "paused", schedule="0 8 * * *", suspend=True, now=T0)
    paused = pgsched("next", "paused", "-n", "1", dsn=dsn)
    assert "note: suspended (spec.suspend is true)" in paused.out
    gone = pgsched("next", "--run-at", "2020-01-01T00:00:00Z")
    assert gone.code == 0 and "no occurrence after" in gone.out


def test_a_stored_schedule_this_release_rejects_is_a_usage_error_and_blocks_no_other(dsn, conn):
    # Stored by an older release that accepted what RFC 5545 forbids (BYEASTER, dateutil's).
    define(conn, "steady", rrule="FREQ=DAILY;BYHOUR=8", now=T0)
    old = define(conn, "legacy", rrule="FREQ=DAILY;BYHOUR=8", now=T0)
    conn.execute(
        "UPDATE pgsched.job_definitions SET schedule = 'FREQ=DAILY;BYEASTER=0' WHERE id = %s",
        [old.id],
    )
    result = pgsched("next", "legacy", dsn=dsn)
    assert result.code == 2, result
    assert "BYEASTER is not an RFC 5545 rule part" in result.err
    assert "Traceback" not in result.err

    done = materialize.run_once(conn, now=T0 + timedelta(days=1))
    assert done.failed_definitions == [old.key]
    assert done.queued == 1  # the steady job's 08:00 run


def test_next_of_a_job_that_only_runs_after_others_says_so(dsn, conn):
    define(conn, "load", after=[{"scheduledJob": "extract"}])
    result = pgsched("next", "load", dsn=dsn)
    assert result.code == 0, result.err
    assert "runs only after its upstreams (spec.after)" in result.out


def test_next_of_a_job_with_several_schedules_says_them_in_words(dsn, conn):
    entries = [
        {"schedule": "30 8 * * 1-5", "timeZone": "Europe/Sofia"},
        {"schedule": "0 10 * * 6"},
    ]
    define(conn, "twice", schedules=entries, now=T0)
    result = pgsched("next", "twice", "-n", "1", "--after", "2027-03-27", dsn=dsn)
    assert result.code == 0, result.err
    heading = result.out.splitlines()[0]
    assert heading.startswith("default/twice: schedules "), heading
    assert "{" not in heading and "Europe/Sofia" in heading and " and " in heading, heading
