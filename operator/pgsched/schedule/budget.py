"""The hard limit on the work spent looking for one occurrence.

Every expansion of every schedule — materialization, ``status.nextRuns``, validation,
``pgsched next``, backfill — goes through :meth:`Schedule.occurrences_after
<pgsched.schedule.timeline.Schedule.occurrences_after>`, which gives the recurrence one
:class:`Budget` and resets it each time an occurrence is found. A recurrence spends one
step per candidate it looks at (a day for cron, a candidate time or a search window for
an RRULE), and each step is itself bounded, so no expression, however odd, can keep a
handler, the tick or the CLI busy for more than a fraction of a second: it gets a precise
:class:`~pgsched.schedule.errors.ScheduleError` instead.

The limits are far above what any useful schedule needs: cron finds every next match
within ~3,300 steps (9 years of days); an RRULE spends one step per candidate and about
one per microsecond of dateutil's scanning, so a daily rule could look ~270 years ahead.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from pgsched.schedule.errors import ScheduleError

MAX_STEPS = 50_000
# Occurrences (or whole days, where a schedule can pass over a day at once) that calendars
# exclude, passed over looking for the next one that runs (``Stream.upcoming``): a daily
# job may look ~13 years past excluded days, a minutely one a week.
MAX_EXCLUDED = 5_000
# An RRULE's COUNT is counted from DTSTART on every expansion, so it is bounded to keep
# the work per expansion well inside MAX_STEPS.
MAX_COUNT = 10_000
# No occurrence is computed at or after this instant: it keeps every date arithmetic
# (search windows, UTC offsets) clear of datetime's limits, years 1 and 9999.
LAST_INSTANT = datetime(9000, 1, 1, tzinfo=UTC)
FIRST_INSTANT = datetime(1900, 1, 2, tzinfo=UTC)
LAST_WALL = LAST_INSTANT.replace(tzinfo=None)


@dataclass
class Budget:
    """Steps left to find the next occurrence of the expression ``text``."""

    text: str
    limit: int = MAX_STEPS
    used: int = 0

    def spend(self, steps: int = 1) -> None:
        self.used += steps
        if self.used > self.limit:
            raise ScheduleError(
                f"{self.text!r} needs more than {self.limit} candidate times to find its next"
                " occurrence; pgsched stops there so that no schedule can stall the operator",
                example="FREQ=DAILY;BYHOUR=8",
            )

    def found(self) -> None:
        self.used = 0
