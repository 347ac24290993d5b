"""Recurrence arithmetic: cron, RRULE, one-shot, and the DST rules, on pinned instants."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from pgsched import schedule
from pgsched.schedule import zones

SOFIA = "Europe/Sofia"
NEW_YORK = "America/New_York"


def local_times(kind, text, zone, after, count, *, dst=None, include_skipped=False):
    built = schedule.build(kind, text, zone=zone, dst=dst, anchor=after, hash_seed="ns/job")
    found = []
    for occurrence in built.occurrences_after(after):
        if occurrence.skipped and not include_skipped:
            continue
        found.append(occurrence.at.astimezone(ZoneInfo(zone)).isoformat())
        if len(found) == count:
            break
    return found


def utc(*args):
    return datetime(*args, tzinfo=UTC)


class TestFixedTimeJobsAcrossDst:
    """A fixed-time daily job runs exactly once on both transition days."""

    def test_new_york_spring_gap_time_runs_once_at_the_first_valid_instant(self):
        # 2026-03-08: 02:00 EST jumps to 03:00 EDT; 02:30 does not exist.
        assert local_times("cron", "30 2 * * *", NEW_YORK, utc(2026, 3, 7, 12), 3) == [
            "2026-03-08T03:00:00-04:00",
            "2026-03-09T02:30:00-04:00",
            "2026-03-10T02:30:00-04:00",
        ]

    def test_new_york_autumn_repeated_time_runs_once_at_the_first_instant(self):
        # 2026-11-01: 02:00 EDT falls back to 01:00 EST; 01:30 happens twice.
        assert local_times("cron", "30 1 * * *", NEW_YORK, utc(2026, 10, 31, 12), 3) == [
            "2026-11-01T01:30:00-04:00",
            "2026-11-02T01:30:00-05:00",
            "2026-11-03T01:30:00-05:00",
        ]

    def test_sofia_spring_gap_time_runs_at_the_transition(self):
        # 2026-03-29: 03:00 EET jumps to 04:00 EEST.
        assert local_times("cron", "30 3 * * *", SOFIA, utc(2026, 3, 28, 12), 2) == [
            "2026-03-29T04:00:00+03:00",
            "2026-03-30T03:30:00+03:00",
        ]

    def test_sofia_autumn_repeated_time_runs_once(self):
        # 2026-10-25: 04:00 EEST falls back to 03:00 EET; 03:30 happens twice.
        assert local_times("cron", "30 3 * * *", SOFIA, utc(2026, 10, 24, 12), 2) == [
            "2026-10-25T03:30:00+03:00",
            "2026-10-26T03:30:00+02:00",
        ]

    def test_repeat_policy_last_runs_at_the_second_instant(self):
        policy = zones.DstPolicy(repeat="last")
        assert local_times(
            "cron", "30 1 * * *", NEW_YORK, utc(2026, 10, 31, 12), 1, dst=policy
        ) == ["2026-11-01T01:30:00-05:00"]

    def test_repeat_policy_both_runs_at_both_instants(self):
        policy = zones.DstPolicy(repeat="both")
        assert local_times(
            "cron", "30 1 * * *", NEW_YORK, utc(2026, 10, 31, 12), 3, dst=policy
        ) == [
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:30:00-05:00",
            "2026-11-02T01:30:00-05:00",
        ]

    def test_gap_policy_skip_records_the_occurrence_as_skipped(self):
        policy = zones.DstPolicy(gap="skip")
        built = schedule.build(
            "cron", "30 2 * * *", zone=NEW_YORK, dst=policy, anchor=utc(2026, 1, 1)
        )
        first = built.next_after(utc(2026, 3, 7, 12))
        assert first is not None and first.skipped
        assert first.at == utc(2026, 3, 8, 7)  # the transition instant, 03:00 EDT
        assert [o.at for o in built.upcoming(utc(2026, 3, 7, 12), count=1)] == [
            utc(2026, 3, 9, 6, 30)
        ]

    def test_two_gap_times_that_shift_to_the_same_instant_run_once(self):
        assert local_times("cron", "15,45 2 * * *", NEW_YORK, utc(2026, 3, 7, 12), 3) == [
            "2026-03-08T03:00:00-04:00",
            "2026-03-09T02:15:00-04:00",
            "2026-03-09T02:45:00-04:00",
        ]


class TestIntervalJobsAcrossDst:
    """Hourly-style schedules follow elapsed time: no hour lost, no hour doubled up."""

    def test_hourly_job_skips_the_missing_hour_in_spring(self):
        assert local_times("cron", "0 * * * *", NEW_YORK, utc(2026, 3, 8, 5), 3) == [
            "2026-03-08T01:00:00-05:00",
            "2026-03-08T03:00:00-04:00",  # one hour later in real time
            "2026-03-08T04:00:00-04:00",
        ]

    def test_hourly_job_runs_in_both_instances_of_the_repeated_hour(self):
        assert local_times("cron", "0 * * * *", NEW_YORK, utc(2026, 11, 1, 4), 3) == [
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T02:00:00-05:00",
        ]

    def test_hourly_job_runs_every_elapsed_hour_on_transition_days(self):
        for day in (utc(2026, 3, 8, 4), utc(2026, 11, 1, 4)):
            built = schedule.build("cron", "@hourly", zone=NEW_YORK, anchor=day)
            instants = [o.at for o in built.upcoming(day, count=30)]
            gaps = {b - a for a, b in itertools.pairwise(instants)}
            assert gaps == {timedelta(hours=1)}

    def test_rrule_hourly_is_an_interval_schedule(self):
        assert local_times("rrule", "FREQ=HOURLY", SOFIA, utc(2026, 10, 24, 23, 30), 3) == [
            "2026-10-25T03:00:00+03:00",
            "2026-10-25T03:00:00+02:00",
            "2026-10-25T04:00:00+02:00",
        ]


class TestRrule:
    def test_byhour_8_is_eight_local_on_both_sides_of_a_transition(self):
        assert local_times("rrule", "FREQ=DAILY;BYHOUR=8", SOFIA, utc(2026, 3, 27, 12), 3) == [
            "2026-03-28T08:00:00+02:00",
            "2026-03-29T08:00:00+03:00",
            "2026-03-30T08:00:00+03:00",
        ]

    def test_without_dtstart_the_anchor_is_local_midnight_not_the_creation_second(self):
        created = datetime(2026, 5, 4, 14, 23, 17, tzinfo=UTC)
        built = schedule.build("rrule", "FREQ=DAILY;BYHOUR=8", zone=SOFIA, anchor=created)
        assert (
            built.next_after(created).at.astimezone(ZoneInfo(SOFIA)).time().isoformat()
            == "08:00:00"
        )

    def test_monthly_on_the_31st_skips_short_months(self):
        assert local_times("rrule", "FREQ=MONTHLY;BYMONTHDAY=31", "UTC", utc(2026, 1, 1), 4) == [
            "2026-01-31T00:00:00+00:00",
            "2026-03-31T00:00:00+00:00",
            "2026-05-31T00:00:00+00:00",
            "2026-07-31T00:00:00+00:00",
        ]

    def test_leap_day_recurs_every_four_years(self):
        assert local_times(
            "rrule", "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29", "UTC", utc(2026, 1, 1), 2
        ) == [
            "2028-02-29T00:00:00+00:00",
            "2032-02-29T00:00:00+00:00",
        ]

    def test_dtstart_exdate_and_rdate_in_the_definition_zone(self):
        text = (
            "DTSTART;TZID=Europe/Sofia:20260105T093000\n"
            "RRULE:FREQ=DAILY;COUNT=4\n"
            "EXDATE;TZID=Europe/Sofia:20260106T093000\n"
            "RDATE;TZID=Europe/Sofia:20260110T120000"
        )
        assert local_times("rrule", text, SOFIA, utc(2026, 1, 1), 10) == [
            "2026-01-05T09:30:00+02:00",
            "2026-01-07T09:30:00+02:00",
            "2026-01-08T09:30:00+02:00",
            "2026-01-10T12:00:00+02:00",
        ]

    @pytest.mark.parametrize(
        ("text", "complaint"),
        [
            ("FREQ=DAILY;BYHOUR=25", "BYHOUR=25 is out of range 0..23"),
            ("FREQ=SOMETIMES", "FREQ=SOMETIMES is not one of YEARLY"),
            ("FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30", "never produces an occurrence"),
            (
                "DTSTART;TZID=America/New_York:20260105T093000\nRRULE:FREQ=DAILY",
                "TZID=America/New_York",
            ),
            ("DTSTART:20260105T093000Z\nRRULE:FREQ=DAILY", "UTC time"),
            ("", "empty"),
        ],
    )
    def test_invalid_rules_are_rejected_with_an_example(self, text, complaint):
        with pytest.raises(schedule.ScheduleError) as caught:
            schedule.build("rrule", text, zone=SOFIA, anchor=utc(2026, 1, 1))
        assert complaint in str(caught.value)
        assert "(example: " in str(caught.value)


class TestCron:
    def test_macros_expand(self):
        assert local_times("cron", "@daily", "UTC", utc(2026, 1, 1, 12), 1) == [
            "2026-01-02T00:00:00+00:00"
        ]
        assert local_times("cron", "@weekly", "UTC", utc(2026, 1, 1, 12), 1) == [
            "2026-01-04T00:00:00+00:00"
        ]

    def test_names_steps_and_ranges(self):
        assert local_times("cron", "*/20 9-10 * JAN MON-FRI", "UTC", utc(2026, 1, 2, 9, 30), 4) == [
            "2026-01-02T09:40:00+00:00",
            "2026-01-02T10:00:00+00:00",
            "2026-01-02T10:20:00+00:00",
            "2026-01-02T10:40:00+00:00",
        ]

    def test_day_of_month_or_day_of_week_when_both_are_restricted(self):
        # The 13th or any Friday (classic cron "either" rule).
        days = local_times("cron", "0 0 13 * FRI", "UTC", utc(2026, 2, 1), 4)
        assert days == [
            "2026-02-06T00:00:00+00:00",
            "2026-02-13T00:00:00+00:00",
            "2026-02-20T00:00:00+00:00",
            "2026-02-27T00:00:00+00:00",
        ]

    def test_sunday_is_both_0_and_7(self):
        assert local_times("cron", "0 0 * * 7", "UTC", utc(2026, 1, 1), 1) == local_times(
            "cron", "0 0 * * 0", "UTC", utc(2026, 1, 1), 1
        )

    def test_hash_field_is_stable_per_definition_and_spreads_definitions(self):
        def minute(seed):
            built = schedule.build(
                "cron", "H * * * *", zone="UTC", anchor=utc(2026, 1, 1), hash_seed=seed
            )
            return built.next_after(utc(2026, 1, 1)).at.minute

        assert minute("team/report") == minute("team/report")
        assert len({minute(f"team/job-{index}") for index in range(100)}) > 30

    def test_hash_with_range_and_step_stays_in_range(self):
        built = schedule.build(
            "cron", "H(0-29)/10 * * * *", zone="UTC", anchor=utc(2026, 1, 1), hash_seed="a/b"
        )
        minutes = {o.at.minute for o in built.upcoming(utc(2026, 1, 1), count=12)}
        assert len(minutes) == 3 and all(m < 30 for m in minutes)
        assert len({m % 10 for m in minutes}) == 1

    def test_february_29_fires_in_leap_years_only(self):
        assert local_times("cron", "0 12 29 2 *", "UTC", utc(2026, 1, 1), 1) == [
            "2028-02-29T12:00:00+00:00"
        ]

    @pytest.mark.parametrize(
        ("text", "complaint", "example"),
        [
            ("61 * * * *", "minute value 61 in '61' is out of range 0-59", "*/15 * * * *"),
            ("* * *", "has 3 fields, expected 5", "30 8 * * MON-FRI"),
            ("0 0 31 2 *", "never fires", "0 0 28 2 *"),
            ("0 0 * * FUNDAY", "not a number or a name", "0 9 * * MON-FRI"),
            ("*/0 * * * *", "step in '*/0' must be a positive integer", "*/15"),
            ("5-1 * * * *", "runs backwards", "0-59"),
            ("@fortnightly", "unknown macro", "@hourly"),
            # str.isdigit() accepts these: int() crashed on superscript two, read Arabic-Indic one as 1.
            ("*/\u00b2 * * * *", "step in '*/\u00b2' must be a positive integer", "*/15"),
            ("\u0661 * * * *", "minute value '\u0661' in '\u0661' is not a number", "*/15 * * * *"),
            ("9" * 5000 + " * * * *", "is not a number", "*/15 * * * *"),
        ],
    )
    def test_invalid_expressions_name_the_field_and_give_an_example(self, text, complaint, example):
        with pytest.raises(schedule.ScheduleError) as caught:
            schedule.build("cron", text, zone="UTC", anchor=utc(2026, 1, 1))
        assert complaint in caught.value.message
        assert caught.value.example == example


class TestOneShot:
    def test_local_run_at_is_in_the_definition_zone(self):
        assert local_times("once", "2026-12-24T18:00:00", SOFIA, utc(2026, 1, 1), 5) == [
            "2026-12-24T18:00:00+02:00"
        ]

    def test_run_at_with_an_offset_is_an_absolute_instant(self):
        built = schedule.build("once", "2026-12-24T16:00:00Z", zone=SOFIA, anchor=utc(2026, 1, 1))
        assert [o.at for o in built.occurrences_after(utc(2026, 1, 1))] == [utc(2026, 12, 24, 16)]

    def test_run_at_in_a_dst_gap_is_shifted_like_any_occurrence(self):
        assert local_times("once", "2026-03-08T02:30:00", NEW_YORK, utc(2026, 1, 1), 5) == [
            "2026-03-08T03:00:00-04:00"
        ]

    @pytest.mark.parametrize("text", ["tomorrow", "2026-12-24", "2026-13-01T00:00:00"])
    def test_invalid_run_at(self, text):
        with pytest.raises(schedule.ScheduleError, match="example: "):
            schedule.build("once", text, zone="UTC", anchor=utc(2026, 1, 1))


@pytest.mark.parametrize("zone", ["Mars/Olympus", "europe/sofia ", "../etc/passwd", ""])
def test_unknown_time_zones_are_rejected(zone):
    with pytest.raises(schedule.ScheduleError, match="example: "):
        schedule.build("cron", "* * * * *", zone=zone, anchor=utc(2026, 1, 1))


def test_transitions_finds_both_offset_changes_of_a_year_to_the_second() -> None:
    found = zones.transitions(
        ZoneInfo(SOFIA), datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)
    )
    assert [(t.at, t.offset_before, t.offset_after) for t in found] == [
        (datetime(2026, 3, 29, 1, 0, tzinfo=UTC), timedelta(hours=2), timedelta(hours=3)),
        (datetime(2026, 10, 25, 1, 0, tzinfo=UTC), timedelta(hours=3), timedelta(hours=2)),
    ]
