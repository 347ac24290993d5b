"""Test- and bench-side wrapper: run the operator with its engine clock shifted, not the
database's.

An operator process started with this directory first on ``PYTHONPATH`` imports this module
before anything else (Python's ``site`` does). It hands ``pgsched.k8s.serve.operator.run`` a clock
that far from the local time, the way a test pins "now" for the tick, without the product
having a setting for it:

- ``SHIFTED_CLOCK_SECONDS``: a fixed offset (a cluster test watches a run due on a date
  months away; see ``start_with_shifted_clock`` in tests/cluster/test_operator_scheduling.py);
- ``SHIFTED_CLOCK_FILE``: the offset is the number in that file, read again when the file
  changes, so a benchmark can set its ScheduledJobs up first and then move the clock to a
  few seconds before their due instant (``bench/stampede.py``).
"""

from __future__ import annotations

import os

if os.environ.get("SHIFTED_CLOCK_SECONDS") or os.environ.get("SHIFTED_CLOCK_FILE"):
    import functools
    from datetime import UTC, datetime, timedelta

    from pgsched.k8s.serve import operator

    _FILE = os.environ.get("SHIFTED_CLOCK_FILE")
    _offset = {"seconds": float(os.environ.get("SHIFTED_CLOCK_SECONDS") or 0), "mtime": 0.0}

    def _current_offset() -> timedelta:
        if _FILE:
            try:
                changed = os.stat(_FILE).st_mtime
                if changed != _offset["mtime"]:
                    with open(_FILE) as file:
                        _offset["seconds"] = float(file.read())
                    _offset["mtime"] = changed
            except (OSError, ValueError):
                pass  # a half-written file: keep the last offset, read it again next time
        return timedelta(seconds=_offset["seconds"])

    def _shifted() -> datetime:
        return datetime.now(UTC) + _current_offset()

    operator.run = functools.partial(operator.run, clock=_shifted)
