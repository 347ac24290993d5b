"""The shared service loop: each service on its interval, fail-open, interruptible."""

from __future__ import annotations

import logging
import threading
import time

from pgsched.engine import loop


def run_for(services: list[loop.Service], seconds: float) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(services, stop))
    thread.start()
    time.sleep(seconds)
    started = time.monotonic()
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    # the slow services wait 60 s: a prompt return means stop interrupted the wait
    assert time.monotonic() - started < 5, "stop must interrupt the wait"


def test_each_service_runs_on_its_own_interval():
    rounds = {"fast": 0, "slow": 0}

    def counter(name: str):
        def run() -> int:
            rounds[name] += 1
            return rounds[name]

        return run

    run_for(
        [loop.Service("fast", counter("fast"), 0.05), loop.Service("slow", counter("slow"), 60)],
        0.5,
    )
    assert rounds["slow"] == 1
    assert 3 <= rounds["fast"] <= 11  # every 0.05 s for 0.5 s, at most 11 rounds


def test_a_failing_service_is_logged_and_neither_stops_the_loop_nor_the_others(caplog):
    rounds = {"broken": 0, "healthy": 0}
    errors: list[str] = []

    def broken() -> None:
        rounds["broken"] += 1
        raise RuntimeError("database went away")

    def healthy() -> None:
        rounds["healthy"] += 1

    stop = threading.Event()
    thread = threading.Thread(
        target=loop.run,
        args=(
            [loop.Service("broken", broken, 0.05), loop.Service("healthy", healthy, 0.05)],
            stop,
        ),
        kwargs={"on_error": lambda service, error: errors.append(f"{service.name}: {error}")},
    )
    with caplog.at_level(logging.ERROR):
        thread.start()
        time.sleep(0.6)
        stop.set()
        thread.join(5)
    assert rounds["broken"] >= 3 and rounds["healthy"] >= 3
    assert errors[0] == "broken: database went away"
    # once per streak, not once per round
    failed = [r for r in caplog.records if "broken failed, will retry" in r.getMessage()]
    assert len(failed) == 1


def test_a_service_with_more_waiting_goes_again_without_sleeping():
    backlog = [3]

    def drain() -> int:
        backlog[0] = max(0, backlog[0] - 1)
        return backlog[0]

    rounds: list[float] = []

    def timed() -> int:
        rounds.append(time.monotonic())
        return drain()

    run_for([loop.Service("drain", timed, 60, again=lambda left: left > 0)], 0.3)
    assert len(rounds) == 3  # two rounds with more waiting, then one that emptied it
    assert rounds[-1] - rounds[0] < 5  # not the 60 s interval


def test_a_computed_wait_counts_from_the_end_of_the_round():
    """The tick computes its wait after its round, to start just after the next whole
    second: a round of 0.3 s that ends at 10.3 asks for 0.72 s and must next start at
    11.02, not 10.72 (0.3 s early, before the second it aims for)."""
    now = [10.0]
    starts: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        starts.append(now[0])
        now[0] += 0.3  # the round's own length
        if len(starts) == 3:
            stop.set()

    def aligned() -> float:
        return 1.0 - now[0] % 1.0 + 0.02

    class Waiting(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            now[0] += timeout or 0.0
            return self.is_set()

    waiting = Waiting()
    stop.wait = waiting.wait  # type: ignore[method-assign]
    loop.run([loop.Service("tick", tick, aligned)], stop, clock=lambda: now[0])
    assert [round(start % 1.0, 6) for start in starts] == [0.0, 0.02, 0.02]
