"""The order faults are injected in: every kind once before any twice, the long kinds last
in their declared order, and the same order for the kinds still owed past the deadline."""

from __future__ import annotations

import random

from chaos.faults import FaultPlan

WEIGHTS = {
    "job_kill": 3.0,
    "leader_kill": 3.0,
    "apiserver_outage": 0.6,
    "replicas_down": 1.0,
    "replicas_pause": 0.6,
}
LATE = ("replicas_pause", "replicas_down", "apiserver_outage")


def test_every_kind_comes_once_before_any_twice_and_the_late_kinds_last_in_their_order():
    for seed in range(20):
        plan = FaultPlan(random.Random(seed), WEIGHTS, last=LATE)
        first = [plan.next() for _ in WEIGHTS]
        assert sorted(first) == sorted(WEIGHTS)
        assert tuple(first[-3:]) == LATE


def test_kinds_owed_past_the_deadline_come_in_the_plans_order_not_the_alphabets():
    plan = FaultPlan(random.Random(7), WEIGHTS, last=LATE)
    plan.next()
    plan.next()
    # Owed as the driver lists them (sorted): the outage first. The replicas' pause must
    # come first: after a restart of every replica it waits for them to have run 30 s.
    owed = ["apiserver_outage", "replicas_down", "replicas_pause"]
    assert plan.in_order(owed) == list(LATE)


def test_a_late_kind_that_could_not_be_injected_stays_before_the_late_kinds_after_it():
    plan = FaultPlan(random.Random(3), WEIGHTS, last=LATE)
    while plan.next() != "replicas_pause":
        pass
    plan.again("replicas_pause")
    assert plan.in_order(sorted(LATE)) == list(LATE)
    assert [plan.next() for _ in LATE] == list(LATE)


def test_owed_kinds_the_plan_no_longer_holds_come_after_those_it_does():
    plan = FaultPlan(random.Random(1), WEIGHTS, last=LATE)
    for _ in range(len(WEIGHTS) - 1):
        plan.next()
    assert plan.in_order(["job_kill", "apiserver_outage"]) == ["apiserver_outage", "job_kill"]
