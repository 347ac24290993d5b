"""The heartbeat loop between beats (runner/heartbeat.py): it holds the run API's long poll
open so a cancel arrives at once, never spins when the poll fails or does not wait, and
stops without waiting for a poll; and the checkpoint's own check (runner/checkpoint.py).
The loop talks to a stand-in for the run API client here: its wire is
test_runapi_client.py's, the real server's is tests/sdk's."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from pgsched.engine.lease import Lease
from pgsched.runner.checkpoint import CancellationWatch
from pgsched.runner.heartbeat import RETRY_SECONDS, HeartbeatLoop
from pgsched.runner.runapi_client import RunApiClient, RunApiError
from pgsched.sdk import Cancelled


class LeaseHeld:
    """The run API's side of one lease: its state, which the test moves; a long poll
    returns when it differs from the state asked about, or after its wait."""

    run_id = 7

    def __init__(self, *, waits: bool = True) -> None:
        self.state = "active"
        self.waits = waits  # False: a server that answers a long poll at once
        self.beats = 0
        self.polls: list[tuple[str, int]] = []
        self.poll_error: RunApiError | None = None
        self.beat_error: RunApiError | None = None
        self.checks = 0  # read-only lease_state calls
        self.beat_gate: threading.Event | None = None  # set: a beat waits for it
        self.closed = threading.Event()
        self._changed = threading.Condition()

    def move(self, state: str) -> None:
        with self._changed:
            self.state = state
            self._changed.notify_all()

    def heartbeat(self, *, timeout: float | None = None) -> str:
        self.beats += 1
        if self.beat_error is not None:
            raise self.beat_error
        if self.beat_gate is not None:
            self.beat_gate.wait(10)
        return self.state

    def lease_state(self) -> str:
        self.checks += 1
        return self.state

    def wait_while(self, state: str, seconds: float, *, timeout: float | None = None) -> str:
        self.polls.append((state, seconds))
        if self.poll_error is not None:
            raise self.poll_error
        with self._changed:
            if self.waits:
                self._changed.wait_for(lambda: self.state != state, timeout=seconds)
            return self.state

    def close(self) -> None:
        self.closed.set()


class Observed(list):
    def __init__(self) -> None:
        super().__init__()
        self.changed = threading.Event()

    def __call__(self, state: str) -> None:
        self.append(state)
        self.changed.set()


def wait_until(predicate, *, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.fixture
def lease():
    return LeaseHeld()


def started(lease, interval: float = 60.0, observed=None) -> HeartbeatLoop:
    """A loop that has beaten once and opened its first long poll."""
    loop = HeartbeatLoop(lease, interval_seconds=interval, on_change=observed).start()
    wait_until(lambda: lease.polls)
    return loop


def test_a_cancel_arrives_through_the_long_poll_not_at_the_next_beat(lease):
    observed = Observed()
    loop = started(lease, observed=observed)
    try:
        asked = time.monotonic()
        lease.move("cancel_requested")
        assert observed.changed.wait(1)
        assert time.monotonic() - asked < 0.2
        assert (lease.beats, observed, loop.state) == (1, ["cancel_requested"], "cancel_requested")
        assert lease.polls[0][0] == "active"
        assert 59 < lease.polls[0][1] <= 60  # the rest of the interval (the client caps it)
        wait_until(lambda: len(lease.polls) == 2)
        assert lease.polls[1][0] == "cancel_requested"  # now waiting for the lease to go
    finally:
        loop.stop(5)


def test_a_lease_lost_during_the_poll_ends_the_loop_without_another_beat(lease):
    observed = Observed()
    loop = started(lease, observed=observed)
    lease.move("lost")

    assert lease.closed.wait(2), "the loop did not end"
    assert (observed, lease.beats) == (["lost"], 1)
    lease.move("active")  # no answer un-loses a lease
    assert loop.state == "lost"


def test_stop_does_not_wait_for_a_long_poll_and_drops_its_answer(lease):
    observed = Observed()
    loop = started(lease, observed=observed)

    asked = time.monotonic()
    loop.stop(timeout=5)
    assert time.monotonic() - asked < 0.5
    lease.move("lost")  # what the sidecar's own note of the end does to a cancelled run

    assert lease.closed.wait(2)
    assert (observed, lease.beats) == ([], 1)  # no warning about a lease the pod gave up


def test_stop_waits_for_a_beat_in_flight(lease):
    lease.beat_gate = threading.Event()
    loop = HeartbeatLoop(lease, interval_seconds=60).start()
    wait_until(lambda: lease.beats == 1)
    threading.Timer(0.3, lease.beat_gate.set).start()

    asked = time.monotonic()
    loop.stop(timeout=5)
    assert time.monotonic() - asked >= 0.25


def test_a_refused_long_poll_is_not_asked_again_until_the_next_beat(lease):
    lease.poll_error = RunApiError("401 Unauthorized", transient=False)
    loop = started(lease, interval=2.5)
    try:
        time.sleep(1.2)
        assert (len(lease.polls), lease.beats) == (1, 1)
    finally:
        loop.stop(5)


@pytest.mark.parametrize("retry_after", [None, 2.0])
def test_a_long_poll_that_failed_for_now_is_asked_again_after_a_pause_not_at_the_beat(
    lease, retry_after
):
    """A cancel must not wait out the interval because the API was busy (429) or away;
    asking again waits a second at least, or what Retry-After says."""
    lease.poll_error = RunApiError("429 Too Many Requests", True, retry_after)
    loop = started(lease, interval=30)
    try:
        time.sleep(4.5)
        pause = max(retry_after or 0.0, RETRY_SECONDS)
        assert lease.beats == 1
        assert len(lease.polls) == 1 + int(4.5 // pause), lease.polls
    finally:
        loop.stop(5)


@pytest.mark.parametrize("known", ["active", "cancel_requested"])
def test_a_poll_answered_at_once_with_nothing_new_is_not_repeated_until_the_next_beat(known):
    """A server that does not wait; or an answer behind what the loop knows (states only
    move forward), which would come back at once every time."""
    lease = LeaseHeld(waits=False)
    loop = HeartbeatLoop(lease, interval_seconds=2.5)
    loop.observe(known)
    loop.start()
    try:
        time.sleep(1.2)
        assert (len(lease.polls), lease.beats) == (1, 1)
        assert loop.state == known
    finally:
        loop.stop(5)


def test_an_interval_under_a_second_only_beats(lease):
    loop = HeartbeatLoop(lease, interval_seconds=0.1).start()
    time.sleep(0.5)
    loop.stop(5)
    assert lease.beats >= 3 and lease.polls == []  # too short to be worth a long poll


def test_a_checkpoint_asks_itself_when_the_loops_answer_is_stale(lease):
    loop = HeartbeatLoop(lease, interval_seconds=0.05)  # never started: always stale
    watch = CancellationWatch(loop, lease)
    watch.checkpoint()  # active: returns
    lease.move("cancel_requested")
    wait_until(lambda: watch.cause() == "cancelled", timeout=2)

    with pytest.raises(Cancelled) as raised:
        watch.checkpoint()
    assert raised.value.cause == "cancelled"
    assert lease.beats == 0 and lease.checks > 0  # the check only read


def test_a_checkpoint_does_not_ask_while_the_loops_beats_fail(lease):
    """The run API is away: a check of its own would only hold the job up until it failed
    too (a server whose database is away takes seconds to say so)."""
    lease.beat_error = RunApiError("503 Service Unavailable", True)
    loop = HeartbeatLoop(lease, interval_seconds=0.05)
    assert loop.beat_once().error is not None
    watch = CancellationWatch(loop, lease)
    for _ in range(3):
        watch.checkpoint()
        time.sleep(0.06)  # past the interval: a check would be due each time
    assert lease.checks == 0


def test_a_checkpoint_carries_on_when_the_run_api_cannot_be_asked(run_api_tls, caplog):
    ca = (run_api_tls / "ca.crt").read_text()
    client = RunApiClient("https://127.0.0.1:1", ca, Lease(7, uuid.uuid4()))
    loop = HeartbeatLoop(client, interval_seconds=0.05)  # no beat yet: the checkpoint asks
    watch = CancellationWatch(loop, client)
    watch.checkpoint()  # no answer is not a reason to stop
    assert "could not check the lease" in caplog.text
    watch.terminate()
    with pytest.raises(Cancelled) as raised:
        watch.checkpoint()
    assert raised.value.cause == "terminated"


def test_the_long_poll_stays_open_until_the_beat_is_due(lease):
    """No window without a poll open between beats (seen on the real node: polls of whole
    seconds left up to a second before each beat in which a cancel waited for the beat)."""
    loop = started(lease, interval=2.5)
    try:
        wait_until(lambda: lease.polls)
        assert 2.0 < lease.polls[0][1] <= 2.5, lease.polls
    finally:
        loop.stop(5)
