"""Sign-in sessions and the failed sign-in limit, on a pinned clock: when a session ends,
when a client must wait, and that neither grows without bound."""

from __future__ import annotations

from pgsched.ui import sessions, signin, throttle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_id_is_random_256_bits_and_is_not_the_token() -> None:
    store = sessions.Sessions()
    first, second = (
        store.open("token-a", identity="u-token-a"),
        store.open("token-a", identity="u-token-a"),
    )
    assert first.id != second.id and len(first.id) >= 43  # 32 bytes, base64url
    assert "token-a" not in first.id and first.csrf != first.id
    assert store.get(first.id) == first and store.get("guessed") is None


def test_a_session_ends_when_idle_after_its_lifetime_or_when_closed() -> None:
    clock = Clock()
    store = sessions.Sessions(idle=60, lifetime=300, clock=clock)
    idle = store.open("t", identity="u-t")
    clock.now += 61
    assert store.get(idle.id) is None

    busy = store.open("t", identity="u-t")
    for _ in range(5):  # used every 50 s: never idle, yet over after 300 s
        clock.now += 50
        assert store.get(busy.id) == busy
    clock.now += 50
    assert store.get(busy.id) is None

    closed = store.open("t", identity="u-t")
    store.close(closed.id)
    assert store.get(closed.id) is None


def test_the_session_store_is_bounded_and_forgets_the_least_recently_used() -> None:
    store = sessions.Sessions(limit=3)
    kept, dropped, other = (
        store.open("a", identity="u-a"),
        store.open("b", identity="u-b"),
        store.open("c", identity="u-c"),
    )
    assert store.get(kept.id) == kept  # now the most recently used
    newest = store.open("d", identity="u-d")
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


def test_one_identity_signing_in_again_and_again_evicts_only_its_own_sessions() -> None:
    store = sessions.Sessions(limit=100, per_identity=3)
    others = [store.open(f"token-{n}", identity=f"user-{n}") for n in range(50)]
    flood = [store.open("same", identity="mallory") for _ in range(10_000)]
    assert all(store.get(item.id) == item for item in others), "nobody else was signed out"
    assert [store.get(item.id) is not None for item in flood[-4:]] == [False, True, True, True]
    assert sum(store.get(item.id) is not None for item in flood) == 3


def test_the_identity_a_token_claims_is_read_without_trusting_it_and_hostile_input_is_opaque():
    import base64
    import json

    def jwt(claims: object) -> str:
        body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
        return f"eyJhbGciOiJSUzI1NiJ9.{body}.c2ln"

    assert signin.claimed_identity(jwt({"sub": "system:serviceaccount:a:b"})) == (
        "sub=system:serviceaccount:a:b"
    )
    for hostile in (
        "not-a-jwt",
        "a.b.c",
        "a.%%%.c",
        jwt(["sub"]),
        jwt({"sub": 7}),
        jwt({"sub": ""}),
        "x." + "A" * 20_000 + ".y",
        "a.b.c.d",
    ):
        assert signin.claimed_identity(hostile) == "opaque", hostile
    assert len(signin.claimed_identity(jwt({"sub": "s" * 10_000}))) == 4 + 256
