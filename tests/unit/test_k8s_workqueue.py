"""The operator's work queue: one place per key, one handler per key, bounded, retries."""

from __future__ import annotations

import threading
import time

import pytest

from pgsched.k8s.client.workqueue import WorkQueue


def test_a_newer_value_replaces_the_waiting_one_and_keeps_its_place():
    queue: WorkQueue[str, int] = WorkQueue(capacity=10)
    queue.put("a", 1)
    queue.put("b", 1)
    queue.put("a", 2)

    assert len(queue) == 2
    assert queue.get(timeout=0) == ("a", 2)
    assert queue.get(timeout=0) == ("b", 1)
    assert queue.get(timeout=0) is None


def test_merge_combines_what_waits():
    queue: WorkQueue[str, list[int]] = WorkQueue(capacity=10, merge=lambda old, new: old + new)
    queue.put("a", [1])
    queue.put("a", [2])

    assert queue.get(timeout=0) == ("a", [1, 2])


def test_a_key_being_handled_is_not_handed_out_again_until_done():
    queue: WorkQueue[str, int] = WorkQueue(capacity=10)
    queue.put("a", 1)
    key, value = queue.get(timeout=0) or ("", 0)
    queue.put("a", 2)  # arrives while "a" is handled

    assert queue.get(timeout=0) is None
    queue.done(key, value)
    assert queue.get(timeout=0) == ("a", 2)


def test_put_of_a_new_key_waits_while_full_but_a_held_key_never_waits():
    queue: WorkQueue[str, int] = WorkQueue(capacity=2)
    queue.put("a", 1)
    queue.put("b", 1)
    queue.put("a", 2)  # held: takes no new place
    entered = threading.Event()

    def put_c() -> None:
        queue.put("c", 1)
        entered.set()

    thread = threading.Thread(target=put_c)
    thread.start()
    assert not entered.wait(0.2)  # full: waits
    item = queue.get(timeout=0)
    assert item is not None
    assert not entered.wait(0.1)  # being handled still holds its place
    queue.done(*item)
    assert entered.wait(2)
    thread.join()
    assert len(queue) == 2


def test_a_failed_key_runs_again_after_its_delay_with_the_same_value():
    queue: WorkQueue[str, int] = WorkQueue(capacity=10)
    queue.put("a", 1)
    item = queue.get(timeout=0)
    assert item == ("a", 1)
    queue.done("a", 1, retry_in=0.3)

    started = time.monotonic()
    assert queue.get(timeout=0.1) is None
    assert queue.get(timeout=2) == ("a", 1)
    assert time.monotonic() - started >= 0.25


def test_a_newer_value_for_a_key_waiting_to_retry_runs_at_once():
    queue: WorkQueue[str, int] = WorkQueue(capacity=10)
    queue.put("a", 1)
    queue.get(timeout=0)
    queue.done("a", 1, retry_in=60)
    assert queue.get(timeout=0) is None  # not due for a minute

    queue.put("a", 2)

    assert queue.get(timeout=0) == ("a", 2)


def test_what_arrived_while_handled_beats_the_retry():
    queue: WorkQueue[str, int] = WorkQueue(capacity=10)
    queue.put("a", 1)
    queue.get(timeout=0)
    queue.put("a", 2)
    queue.done("a", 1, retry_in=60)

    assert queue.get(timeout=0) == ("a", 2)


def test_delayed_keys_count_against_the_capacity():
    queue: WorkQueue[str, int] = WorkQueue(capacity=1)
    queue.put("a", 1)
    queue.get(timeout=0)
    queue.done("a", 1, retry_in=60)

    assert len(queue) == 1
    blocked = threading.Thread(target=queue.put, args=("b", 1), daemon=True)
    blocked.start()
    blocked.join(0.2)
    assert blocked.is_alive()
    queue.close()
    blocked.join(2)
    assert not blocked.is_alive()


def test_close_wakes_a_waiting_get():
    queue: WorkQueue[str, int] = WorkQueue(capacity=1)
    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append(queue.get()))
    thread.start()
    time.sleep(0.1)
    queue.close()
    thread.join(2)
    assert got == [None]
    assert queue.put("a", 1) is False


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity must be at least 1"):
        WorkQueue(capacity=0)
