"""One replica of the database variant: the real tick loop, launching into the job host.

``python -m chaos.replica`` runs ``pgsched.engine.tick.Ticker`` exactly as the operator
does — leader election on, every phase, fail-open — with a launcher that hands each
claimed run to the job host instead of creating a Kubernetes Job. Before sending, the
launcher appends the launch (run id, lease token, replica) to a shared log: a line
written is in the page cache, so a replica killed a microsecond later still leaves the
evidence the I1 check counts.

``--leaderless --unlocked-dispatch`` is the planted bug of the I2 self-test: every replica
acts as leader (``planted.LeaderlessTicker``) and claims through the copy of the claim
function without its per-definition advisory locks that the driver created in the test
database (``planted.install_unlocked_claim``), so concurrent claimers read the same
RUNNING count and overshoot caps. Both live in ``bench/planted.py``, not in the product.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from bench import planted
from chaos.jobhost import Job
from pgsched.db import connection
from pgsched.engine.launcher import LaunchError
from pgsched.engine.models import Definition, Run
from pgsched.engine.tick import Ticker, TickSettings

log = logging.getLogger("chaos.replica")

APPLICATION_NAME = "chaos-replica-{index}"


class JobHostLauncher:
    """Launches take as long as creating a Job through the API server does (5-30 ms), so
    a leader killed after its claim commits has claimed runs it never launched — the
    orphans the reaper must find."""

    def __init__(self, socket_path: Path, launch_log: Path, replica: int) -> None:
        self._socket_path = str(socket_path)
        self._launch_log = launch_log
        self._replica = replica
        self._outbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._rng = random.Random()

    def launch(self, run: Run, definition: Definition) -> str | None:
        assert run.lease_token is not None
        record = {
            "run_id": run.id,
            "lease": str(run.lease_token),
            "replica": self._replica,
            "pid": os.getpid(),
            "at": time.time(),
        }
        with self._launch_log.open("a") as log_file:
            log_file.write(json.dumps(record) + "\n")
        job = Job(run.id, run.lease_token, definition.heartbeat_interval_seconds)
        time.sleep(self._rng.uniform(0.005, 0.03))
        try:
            self._outbox.sendto(job.encode(), self._socket_path)
        except OSError as error:
            raise LaunchError(f"the job host did not take run {run.id}: {error}") from error
        return f"job-{run.id}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m chaos.replica")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--launch-log", type=Path, required=True)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--leaderless", action="store_true")
    parser.add_argument("--unlocked-dispatch", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    if args.unlocked_dispatch:
        # The planted bug: the tick's dispatch phase claims without the per-definition locks.
        planted.use_unlocked_claim()
    name = APPLICATION_NAME.format(index=args.index)
    ticker = (planted.LeaderlessTicker if args.leaderless else Ticker)(
        lambda: connection.connect(args.dsn, application_name=name, connect_timeout=3),
        JobHostLauncher(args.socket, args.launch_log, args.index),
        TickSettings(interval_seconds=args.interval, dispatch_batch=args.batch),
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    log.info("replica %s ticking every %ss (pid %s)", args.index, args.interval, os.getpid())
    ticker.run_forever(stop)


if __name__ == "__main__":
    main()
