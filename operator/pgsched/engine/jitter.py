"""Jitter: each scheduled occurrence's start delayed by a bounded, deterministic amount.

``spec.jitterSeconds: N`` spreads the runs of jobs that share a schedule (a fleet on
``0 * * * *`` hitting one backend) over the N seconds after each occurrence. The delay is
drawn from a hash of the definition and the occurrence instant, not from a random number
generator: every replica, every restart and every re-plan of the same occurrence computes
the same delay, so an occurrence is never re-rolled (it is also materialized once, by its
unique key, but a status or ``pgsched next`` prediction computed elsewhere agrees with it).
Cron's ``H`` spreads *which minute* a job runs at, the same every hour; jitter spreads
*each run* anew, so two jobs that collide at one occurrence rarely collide at the next.

The run keeps its occurrence instant as ``scheduled_for`` (its identity: the unique key,
what "why didn't it run at 09:00?" looks up) and gets the jittered start as
``not_before``; dispatch does not claim it before then. Manual runs, backfills, retries and
chained runs are not jittered: they were asked for now, or have their own backoff.

The delay is uniform over [0, N] seconds at millisecond resolution: the first 8 bytes of a
BLAKE2b digest of ``<definition uid> <instant in UTC microseconds>``, reduced modulo
N x 1000 + 1 (the modulo bias of a 64-bit value is below 10^-12).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

MAX_SECONDS = 3600
FIELD = "jitterSeconds"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def seconds_of(spec: Mapping[str, Any]) -> int:
    """The stored spec's ``jitterSeconds`` (validated by ``pgsched.spec``), 0 without."""
    value = spec.get(FIELD)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def delay(definition_id: UUID, instant: datetime, *, seconds: int) -> timedelta:
    """The delay of the occurrence at ``instant`` (aware) of a definition: in [0, seconds]."""
    if seconds <= 0:
        return timedelta(0)
    micros = (instant - _EPOCH) // timedelta(microseconds=1)
    digest = hashlib.blake2b(f"{definition_id} {micros}".encode(), digest_size=8).digest()
    return timedelta(milliseconds=int.from_bytes(digest, "big") % (seconds * 1000 + 1))
