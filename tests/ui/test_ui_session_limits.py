"""Sign-in sessions and the failed sign-in limit, on a pinned clock: when a session ends,
when a client must wait, and that neither grows without bound."""

from __future__ import annotations

from pgsched.ui import sessions, throttle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_id_is_random_256_bits_and_is_not_the_token() -> None:
    store = sessions.Sessions()
    first, second = store.open("token-a"), store.open("token-a")
    assert first.id != second.id and len(first.id) >= 43  # 32 bytes, base64url
    assert "token-a" not in first.id and first.csrf != first.id
    assert store.get(first.id) == first and store.get("guessed") is None


def test_a_session_ends_when_idle_after_its_lifetime_or_when_closed() -> None:
    clock = Clock()
    store = sessions.Sessions(idle=60, lifetime=300, clock=clock)
    idle = store.open("t")
    clock.now += 61
    assert store.get(idle.id) is None

    busy = store.open("t")
    for _ in range(5):  # used every 50 s: never idle, yet over after 300 s
        clock.now += 50
        assert store.get(busy.id) == busy
    clock.now += 50
    assert store.get(busy.id) is None

    closed = store.open("t")
    store.close(closed.id)
    assert store.get(closed.id) is None


def test_the_session_store_is_bounded_and_forgets_the_least_recently_used() -> None:
    store = sessions.Sessions(limit=3)
    kept, dropped, other = store.open("a"), store.open("b"), store.open("c")
    assert store.get(kept.id) == kept  # now the most recently used
    newest = store.open("d")
    assert store.get(dropped.id) is None
    assert [store.get(s.id) for s in (kept, other, newest)] == [kept, other, newest]


def test_failed_sign_ins_block_the_client_for_the_rest_of_the_window() -> None:
    clock = Clock()
    limit = throttle.FailedLogins(per_client=3, overall=100, window=60, clock=clock)
    for _ in range(3):
        assert limit.retry_after("10.0.0.1") is None
        limit.failed("10.0.0.1")
    clock.now += 20
    assert limit.retry_after("10.0.0.1") == 40
    assert limit.retry_after("10.0.0.2") is None  # another address is not blocked
    clock.now += 40
    assert limit.retry_after("10.0.0.1") is None


def test_failed_sign_ins_from_many_addresses_hit_the_overall_limit() -> None:
    clock = Clock()
    limit = throttle.FailedLogins(per_client=3, overall=5, window=60, clock=clock)
    for n in range(5):
        limit.failed(f"10.0.0.{n}")
    assert limit.retry_after("10.9.9.9") == 60


def test_failed_sign_ins_remember_a_bounded_number_of_addresses() -> None:
    clock = Clock()
    limit = throttle.FailedLogins(per_client=2, overall=10**9, window=60, clients=100, clock=clock)
    for n in range(10_000):
        limit.failed(f"addr-{n}")
    assert len(limit._counts) == 100
    limit.failed("addr-9999")
    assert limit.retry_after("addr-9999") == 60
