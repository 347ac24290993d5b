"""Waiting for a notification (LISTEN/NOTIFY) on a session's connection, interruptibly.

Two loops wait like this between rounds: the heartbeat (a cancel for its run) and the tick
(a run's end that a waiting run of its job needs). ``conn.notifies`` cannot watch a
``threading.Event``, so the wait is cut into slices of :data:`STOP_CHECK_SECONDS`, checking
``stop`` between them: shutdown is seen within that.
"""

from __future__ import annotations

import threading
import time
from contextlib import closing

from pgsched.db.connection import Connection

STOP_CHECK_SECONDS = 0.5


def wait(conn: Connection, seconds: float, stop: threading.Event) -> bool:
    """Wait up to ``seconds`` for a notification on the channels ``conn`` listens on; True
    if one came (any others pending are consumed with it). Errors of the connection raise
    (``psycopg.Error``)."""
    deadline = time.monotonic() + seconds
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        # The generator holds the connection's lock until it is closed: close it before
        # touching the connection again.
        with closing(conn.notifies(timeout=min(left, STOP_CHECK_SECONDS), stop_after=1)) as notes:
            came = next(notes, None) is not None
        if came:
            with closing(conn.notifies(timeout=0)) as burst:  # a burst is one wakeup
                for _ in burst:
                    pass
            return True
    return False
