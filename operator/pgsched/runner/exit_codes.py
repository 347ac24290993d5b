"""Exit codes of ``pgsched run``: the outcome, readable without the run API.

The runner records the outcome itself (fenced by the lease), and the code says the same
thing, so whoever only sees the container status — the operator's Job watch, ``kubectl``,
a human — reaches the same conclusion. If the final write could not reach the run API
(see ``PGSCHED_FINISH_TIMEOUT_SECONDS``) the code is the operator's only source, which is
why it mirrors the outcome rather than whether the write succeeded.

==== ============================ ======================================================
code meaning                      recorded by the runner
==== ============================ ======================================================
0    the job returned             ``COMPLETED``
1    the job raised               ``FAILED``, reason = exception class, retry hint
2    bad configuration            contract broken: nothing (cannot); unknown kind, bad
                                  arguments, unimportable module: ``FAILED`` with
                                  ``retry_hint = never``
3    cancelled at a checkpoint    ``CANCELLED`` (after compensation)
4    lease lost                   nothing: the run already ended elsewhere
143  stopped by SIGTERM           ``FAILED/Terminated`` (no cancellation was requested)
==== ============================ ======================================================
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    COMPLETED = 0
    FAILED = 1
    CONFIGURATION = 2
    CANCELLED = 3
    LEASE_LOST = 4
    TERMINATED = 143  # 128 + SIGTERM, what a shell reports for a process SIGTERM ended
