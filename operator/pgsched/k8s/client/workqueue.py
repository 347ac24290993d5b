"""A keyed work queue: what the watches hand to the operator's worker threads.

Small, and on purpose like client-go's workqueue in the three ways that matter:

- **one entry per key**: a newer value for a key that is waiting replaces it (the newest
  state of an object is the only one worth handling), so a busy object costs one place;
- **one worker per key at a time**: a value that arrives while its key is being handled
  waits until that handling is done, then runs — handlers never race on one object;
- **retries later**: a handler that could not finish (the database is down) gives its key
  back with a delay; a newer value for it makes it due at once.

And **bounded**: ``put`` of a new key waits while ``capacity`` keys are held (waiting,
delayed or handled), so a watch that lists 100,000 objects is paced by the handlers
instead of holding every body at once. Keys already held never wait (their place is taken).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class WorkQueue(Generic[K, V]):
    def __init__(
        self,
        *,
        capacity: int,
        merge: Callable[[V, V], V] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._merge = merge or (lambda _old, new: new)
        self._clock = clock
        self._ready: dict[K, V] = {}  # waiting, in arrival order (dicts keep it)
        self._order: deque[K] = deque()
        self._active: set[K] = set()
        self._arrived: dict[K, V] = {}  # came while its key was being handled
        self._delayed: dict[K, tuple[float, V]] = {}
        self._timers: list[tuple[float, int, K]] = []  # heap; stale entries skipped
        self._sequence = itertools.count()
        self._closed = False
        # One lock, two conditions: a key made ready wakes one getter, a place freed one
        # putter (waking every thread on every change costs more than the work at 100/s).
        self._lock = threading.Lock()
        self._ready_or_timer = threading.Condition(self._lock)
        self._room = threading.Condition(self._lock)

    def __len__(self) -> int:
        """Keys held: waiting, delayed or being handled."""
        with self._lock:
            return self._held()

    def put(self, key: K, value: V) -> bool:
        """Hand over ``value`` for ``key``; waits for room if the key is new and the queue
        is full. False if the queue was closed."""
        with self._lock:
            while True:
                if self._closed:
                    return False
                if key in self._active:
                    old = self._arrived.get(key)
                    self._arrived[key] = value if old is None else self._merge(old, value)
                    return True
                if key in self._ready:
                    self._ready[key] = self._merge(self._ready[key], value)
                    return True
                delayed = self._delayed.pop(key, None)
                if delayed is not None:  # news for a key waiting to retry: due now
                    self._make_ready(key, self._merge(delayed[1], value))
                    return True
                if self._held() < self.capacity:
                    self._make_ready(key, value)
                    return True
                self._room.wait()

    def get(self, *, timeout: float | None = None) -> tuple[K, V] | None:
        """The oldest waiting key and its value, now being handled (call :meth:`done`);
        None after ``timeout`` or once closed."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._lock:
            while True:
                self._release_due()
                if self._closed:
                    return None
                if self._order:
                    key = self._order.popleft()
                    value = self._ready.pop(key)
                    self._active.add(key)
                    return key, value
                waits = [deadline - self._clock()] if deadline is not None else []
                if self._timers:
                    waits.append(self._timers[0][0] - self._clock())
                if deadline is not None and waits[0] <= 0:
                    return None
                self._ready_or_timer.wait(max(0.0, min(waits)) if waits else None)

    def done(self, key: K, value: V, *, retry_in: float | None = None) -> None:
        """``key`` was handled. ``retry_in``: it was not, try ``value`` again that much later
        (unless a newer value arrived meanwhile: that one runs now)."""
        with self._lock:
            self._active.discard(key)
            arrived = self._arrived.pop(key, None)
            if arrived is not None:
                self._make_ready(key, arrived)
            elif retry_in is not None and not self._closed:
                due = self._clock() + retry_in
                self._delayed[key] = (due, value)
                heapq.heappush(self._timers, (due, next(self._sequence), key))
                self._ready_or_timer.notify()  # a getter may now wait for this timer
            else:
                self._room.notify()

    def close(self) -> None:
        """Wake every waiter; nothing more is put or got."""
        with self._lock:
            self._closed = True
            self._ready_or_timer.notify_all()
            self._room.notify_all()

    def _held(self) -> int:
        # A key that arrived while handled is still one key (it is in _active).
        return len(self._ready) + len(self._active) + len(self._delayed)

    def _make_ready(self, key: K, value: V) -> None:
        self._ready[key] = value
        self._order.append(key)
        self._ready_or_timer.notify()

    def _release_due(self) -> None:
        now = self._clock()
        while self._timers and self._timers[0][0] <= now:
            due, _, key = heapq.heappop(self._timers)
            found = self._delayed.get(key)
            if found is not None and found[0] == due:
                del self._delayed[key]
                self._make_ready(key, found[1])
