"""Test-side wrapper: run the operator with its engine clock shifted, not the database's.

An operator process started with this directory first on ``PYTHONPATH`` imports this module
before anything else (Python's ``site`` does). If ``SHIFTED_CLOCK_SECONDS`` is set, it hands
``pgsched.k8s.operator.run`` a clock that far from the local time, the way a test pins "now"
for the tick: a cluster test can watch a run due on a date months away without the product
having a setting for it. See ``start_with_shifted_clock`` in test_operator_scheduling.py.
"""

from __future__ import annotations

import os

if os.environ.get("SHIFTED_CLOCK_SECONDS"):
    import functools
    from datetime import UTC, datetime, timedelta

    from pgsched.k8s import operator

    _OFFSET = timedelta(seconds=float(os.environ["SHIFTED_CLOCK_SECONDS"]))

    def _shifted() -> datetime:
        return datetime.now(UTC) + _OFFSET

    operator.run = functools.partial(operator.run, clock=_shifted)
