"""The job host of the database variant: the "node" that runs simulated job processes.

A replica launches a run by sending a datagram here (see ``replica.JobHostLauncher``); the
job host forks one process per run — cheap, pgsched is already imported — and forgets it
(``SIGCHLD`` ignored: the kernel reaps). Job processes are children of the job host, not
of the replica that launched them, so killing a replica leaves its jobs running, as killing
the operator leaves its pods running. Each one names itself ``job-<run id>``
(``/proc/<pid>/comm``), which is how the fault injector finds, kills and freezes them.

A job does what the heartbeat sidecar and the SDK runner do, through the same fenced
calls: ``lease.heartbeat`` every ``heartbeat.intervalSeconds``, and after its duration
(1-10 s, drawn from the seed and the run id) ``lease.finish`` — COMPLETED, or for one run
in twenty FAILED/NonZeroExit. A failed heartbeat (database down) is retried and never
stops the work (I6); ``lost`` stops it at once; ``cancel_requested`` ends it CANCELLED.

Every job appends what it did to the execution log (``--exec-log``, JSON lines): when it
finished its work, with the outcome and whether the fenced finish acknowledged it. The
checker compares that log with the final tables (I8): it is evidence the database cannot
take back.

``--forgetful`` is the planted bug of the I8 self-test: after an acknowledged COMPLETED,
the job rolls its row back to RUNNING with a stale heartbeat — what an asynchronous
failover does to a commit the standby never received — so the reaper fails the run
HeartbeatLost and it is retried: succeeded work runs again.

``--unfenced`` is the planted bug of the I4 self-test: jobs ignore a lost lease and write
their outcome with a bare ``UPDATE ... WHERE id = …`` — no ``status = 'RUNNING' AND
lease_token = …`` fence — so a job frozen past its heartbeat timeout overwrites the
FAILED/HeartbeatLost the reaper wrote meanwhile. Test-only: the package has no such path.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import random
import signal
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg

from pgsched.db.connection import Connection
from pgsched.db.session import Session, describe_error
from pgsched.engine import lease

log = logging.getLogger("chaos.jobhost")

COMM_PREFIX = "job-"
FAILURE_RATE = 0.05
# How long a finished job keeps trying to record its outcome through a database outage.
FINISH_PATIENCE_SECONDS = 30.0


@dataclass(frozen=True)
class Job:
    run_id: int
    lease_token: uuid.UUID
    heartbeat_seconds: float

    def encode(self) -> bytes:
        return json.dumps(
            {
                "run_id": self.run_id,
                "lease": str(self.lease_token),
                "heartbeat_seconds": self.heartbeat_seconds,
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Job:
        fields = json.loads(data)
        return cls(fields["run_id"], uuid.UUID(fields["lease"]), float(fields["heartbeat_seconds"]))


@dataclass(frozen=True)
class Behaviour:
    """What a run's job does: how long it works and whether it fails. Drawn from the seed
    and the run id, so replaying a seed gives every run id the same job."""

    seconds: float
    fails: bool

    @classmethod
    def draw(cls, seed: int, run_id: int, *, shortest: float, longest: float) -> Behaviour:
        rng = random.Random(f"{seed}:{run_id}")
        return cls(rng.uniform(shortest, longest), rng.random() < FAILURE_RATE)


def run_job(
    dsn: str,
    job: Job,
    behaviour: Behaviour,
    *,
    exec_log: Path | None = None,
    unfenced: bool = False,
    forgetful: bool = False,
) -> None:
    session = Session.for_dsn(dsn, application_name=f"chaos-job-{job.run_id}")
    run_lease = lease.Lease(job.run_id, job.lease_token)
    ends = time.monotonic() + behaviour.seconds
    state: lease.LeaseState | None = None
    while True:
        try:
            state = session.run(lambda conn: lease.heartbeat(conn, run_lease))
        except psycopg.Error as error:
            log.info("run %s: heartbeat failed, working on: %s", job.run_id, describe_error(error))
        if state == "lost" and not unfenced:
            return  # the run was ended elsewhere: stop, write nothing
        if state == "cancel_requested":
            break
        left = ends - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(job.heartbeat_seconds, left))
    if state == "cancel_requested":
        outcome = ("CANCELLED", "Cancelled", "stopped after cancellation was requested")
    elif behaviour.fails:
        outcome = ("FAILED", "NonZeroExit", "the simulated job exited with code 1")
    else:
        outcome = ("COMPLETED", None, None)
    acknowledged = _record(session, run_lease, *outcome, unfenced=unfenced)
    if exec_log is not None:
        entry = {"run_id": job.run_id, "lease": str(job.lease_token), "event": "end"}
        entry |= {"status": outcome[0], "acknowledged": acknowledged, "at": time.time()}
        with exec_log.open("a") as log_file:  # O_APPEND: one write per line, whole
            log_file.write(json.dumps(entry) + "\n")
    if forgetful and acknowledged and outcome[0] == "COMPLETED":
        session.run(lambda conn: _forget(conn, job.run_id))


def _forget(conn: Connection, run_id: int) -> None:
    """The planted bug: lose the acknowledged COMPLETED, audit trail and all, as a
    failover to a standby that never received it would."""
    with conn.transaction():
        # Silent for exactly its timeout: the reaper takes it at the next tick, on time.
        conn.execute(
            "UPDATE pgsched.job_runs AS r SET status = 'RUNNING', reason = NULL,"
            " finished_at = NULL, settled_at = NULL,"
            " heartbeat_at = now() - make_interval(secs => d.heartbeat_timeout_seconds)"
            " FROM pgsched.job_definitions AS d WHERE d.id = r.definition_id AND r.id = %s",
            [run_id],
        )
        conn.execute(
            "DELETE FROM test_audit.run_changes WHERE run_id = %s"
            " AND 'COMPLETED' IN (old_row->>'status', new_row->>'status')",
            [run_id],
        )


def _record(
    session: Session,
    run_lease: lease.Lease,
    status: lease.FinalStatus,
    reason: str | None,
    error: str | None,
    *,
    unfenced: bool,
) -> bool:
    """Record the outcome; whether the database acknowledged it."""

    def fenced(conn: Connection) -> bool:
        return lease.finish(conn, run_lease, status, reason=reason, error=error)

    def bare(conn: Connection) -> bool:
        conn.execute(
            "UPDATE pgsched.job_runs SET status = %s, reason = %s, error = %s,"
            " finished_at = clock_timestamp() WHERE id = %s",
            [status, reason, error, run_lease.run_id],
        )
        return False  # not fenced, so not an acknowledgement of anything

    give_up = time.monotonic() + FINISH_PATIENCE_SECONDS
    while True:
        try:
            return session.run(bare if unfenced else fenced)
        except psycopg.Error as failure:
            if time.monotonic() > give_up:
                log.warning("run %s: outcome not recorded: %s", run_lease.run_id, failure)
                return False
            time.sleep(0.5)


def _set_name(name: str) -> None:
    """Name this process (``/proc/self/comm``, at most 15 bytes) for the fault injector."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_name = 15
    libc.prctl(pr_set_name, name.encode()[:15], 0, 0, 0)


def serve(
    socket_path: Path,
    dsn: str,
    *,
    seed: int,
    shortest: float,
    longest: float,
    exec_log: Path | None,
    unfenced: bool,
    forgetful: bool,
) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps finished jobs
    inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    inbox.bind(str(socket_path))
    log.info("job host ready on %s (jobs of %g-%gs)", socket_path, shortest, longest)
    while True:
        job = Job.decode(inbox.recv(65536))
        behaviour = Behaviour.draw(seed, job.run_id, shortest=shortest, longest=longest)
        if os.fork() == 0:
            inbox.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _set_name(f"{COMM_PREFIX}{job.run_id}")
            try:
                run_job(
                    dsn, job, behaviour, exec_log=exec_log, unfenced=unfenced, forgetful=forgetful
                )
            except BaseException:
                log.exception("run %s: the job crashed", job.run_id)
                os._exit(1)
            os._exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m chaos.jobhost")
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--shortest", type=float, default=1.0)
    parser.add_argument("--longest", type=float, default=10.0)
    parser.add_argument("--exec-log", type=Path)
    parser.add_argument("--unfenced", action="store_true")
    parser.add_argument("--forgetful", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s",
    )
    serve(
        args.socket,
        args.dsn,
        seed=args.seed,
        shortest=args.shortest,
        longest=args.longest,
        exec_log=args.exec_log,
        unfenced=args.unfenced,
        forgetful=args.forgetful,
    )


if __name__ == "__main__":
    main()
