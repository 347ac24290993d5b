"""Access answers (SubjectAccessReviews) kept briefly: a user who keeps asking never waits
for a review once the first is answered, and no answer is used older than its time."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from pgsched.k8s.access import Permission, SubjectReviews, Unavailable, User
from pgsched.k8s.client import api

TTL = 3.0  # long enough that a loaded machine cannot let an answer expire between two steps
LIST_RUNS = Permission("runs.pgsched.dev", "runs", verb="list")
ALICE = User("alice", ("team-a",))


class ReviewingApiServer:
    """Answers SubjectAccessReviews from ``allowed``; ``hold`` makes the next reviews wait
    until it is set; ``down`` makes them fail as an unreachable API server's would."""

    def __init__(self) -> None:
        self.allowed = True
        self.down = False
        self.reviews = 0
        self.hold = threading.Event()
        self.hold.set()

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert path.endswith("/subjectaccessreviews"), path
        self.reviews += 1
        self.hold.wait(10)
        if self.down:
            raise api.ApiError("POST", path, 503, {"message": "the server is unavailable"})
        return {"status": {"allowed": self.allowed}}


def reviews() -> tuple[SubjectReviews, ReviewingApiServer]:
    server = ReviewingApiServer()
    return SubjectReviews(server, ttl=TTL), server  # type: ignore[arg-type]


def settle(server: ReviewingApiServer, reviews: int) -> None:
    deadline = time.monotonic() + 5
    while server.reviews < reviews and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # the refreshed answer stored


def test_an_ageing_answer_is_asked_again_in_the_background_while_the_user_is_answered_at_once():
    access, server = reviews()
    assert access.allows(ALICE, "team-a", LIST_RUNS)
    assert server.reviews == 1
    assert access.allows(ALICE, "team-a", LIST_RUNS)
    assert server.reviews == 1, "a fresh answer is used as it is"
    time.sleep(TTL * 0.6)
    server.hold.clear()  # the API server answers slowly now
    server.allowed = False  # and the RoleBinding was removed
    started = time.monotonic()
    assert access.allows(ALICE, "team-a", LIST_RUNS), "the kept answer, still within its time"
    assert time.monotonic() - started < 0.3, "the user did not wait for the review (held 10 s)"
    assert access.allows(ALICE, "team-a", LIST_RUNS)
    settle(server, 2)
    assert server.reviews == 2, "one review in the background, however often asked meanwhile"
    server.hold.set()
    settle(server, 2)
    assert not access.allows(ALICE, "team-a", LIST_RUNS), "the revocation bites once reviewed"


def test_no_answer_is_used_past_its_time_when_the_background_review_fails():
    access, server = reviews()
    assert access.allows(ALICE, "team-a", LIST_RUNS)
    time.sleep(TTL * 0.6)
    server.down = True
    assert access.allows(ALICE, "team-a", LIST_RUNS)  # kept, and asked again in vain
    settle(server, 2)
    time.sleep(TTL * 0.5)  # the kept answer's time is up
    with pytest.raises(Unavailable):
        access.allows(ALICE, "team-a", LIST_RUNS)  # refused: fail closed


def test_each_question_is_its_own_answer():
    access, server = reviews()
    assert access.allows(ALICE, "team-a", LIST_RUNS)
    server.allowed = False
    assert not access.allows(ALICE, "team-b", LIST_RUNS)
    assert not access.allows(User("alice", ("team-b",)), "team-a", LIST_RUNS)
    assert access.allows(ALICE, "team-a", LIST_RUNS)
    assert server.reviews == 3
