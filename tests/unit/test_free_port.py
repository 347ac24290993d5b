"""Ports for test components: processes running at once never draw the same one."""

from __future__ import annotations

import itertools

import pytest

from devenv import processes


@pytest.mark.parametrize(
    ("phase", "worker", "count", "expected"),
    [
        ("", "", "", (0, 1)),
        ("0/2", "", "", (0, 2)),
        ("1/2", "", "", (1, 2)),
        ("1/2", "gw0", "3", (1, 6)),
        ("1/2", "gw2", "3", (5, 6)),
        ("0/2", "gw1", "3", (2, 6)),
        ("", "gw1", "3", (1, 3)),
        ("2/2", "", "", (0, 1)),  # not a share: ignored, not half-understood
        ("x/y", "", "", (0, 1)),
    ],
)
def test_each_phase_and_worker_has_its_own_class(monkeypatch, phase, worker, count, expected):
    monkeypatch.setenv("PGSCHED_PORT_SHARE", phase)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", count)
    assert processes._port_share() == expected


def test_the_two_phases_of_make_test_draw_disjoint_ports(monkeypatch):
    drawn = {}
    for share in ("0/2", "1/2"):
        monkeypatch.setenv("PGSCHED_PORT_SHARE", share)
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
        drawn[share] = {processes.free_port() for _ in range(50)}
    assert {port % 2 for port in drawn["0/2"]} == {0}
    assert {port % 2 for port in drawn["1/2"]} == {1}


def test_a_port_handed_out_is_not_handed_out_again_before_it_is_bound(monkeypatch):
    # Two components given ports before either binds. The random draw offers every port
    # twice in a row: a process that forgot what it handed out would give the same port to
    # the second caller (nobody has bound it yet, so the bind check passes).
    draws = itertools.count()
    monkeypatch.setenv("PGSCHED_PORT_SHARE", "")
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setattr(processes, "_handed", {})
    monkeypatch.setattr(
        processes.random, "randrange", lambda low, high: high - 1 - next(draws) // 2
    )
    given = [processes.free_port() for _ in range(8)]
    assert len(set(given)) == 8, given
