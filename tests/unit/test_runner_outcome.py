"""The runner's final write (runner/outcome.py) against a scripted run API: an answer lost
after the commit does not turn into "lease lost", a refusal is not retried, an outage is
waited out up to the finish timeout.

If a lost answer did turn into "lease lost", the runner would exit LEASE_LOST (4), its Job
would read "failed", and should the committed COMPLETED itself be lost later (an
asynchronous failover), the operator — which then reads the Job — would record a failure
for work that succeeded (I8).
"""

from __future__ import annotations

import uuid

import pytest

from pgsched.engine.lease import Lease
from pgsched.runner import outcome
from pgsched.runner.exit_codes import ExitCode
from pgsched.runner.runapi_client import RunApiClient
from scripted_run_api import reply, unanswered

SUCCESS = outcome.Outcome("COMPLETED", ExitCode.COMPLETED)


@pytest.fixture
def client(scripted_api):
    return RunApiClient(scripted_api.url, scripted_api.ca, Lease(42, uuid.uuid4()))


def finishes(api):
    return [seen for seen in api.seen if seen.path == "/v1/runs/42/finish"]


def test_a_finish_whose_answer_was_lost_is_still_reported_recorded(scripted_api, client):
    # The first finish is taken and committed, its answer lost; the retry finds the run
    # ended — by that first finish.
    scripted_api.answers = [unanswered, reply(200, {"finished": False})]

    recorded = outcome.record(client, SUCCESS, timeout_seconds=10, sleep=lambda _: None)

    assert recorded == "recorded"
    assert len(finishes(scripted_api)) == 2


def test_a_finish_of_a_run_ended_elsewhere_is_lease_lost(scripted_api, client):
    scripted_api.answers = [reply(200, {"finished": False})]
    assert outcome.record(client, SUCCESS, timeout_seconds=1) == "lease-lost"


def test_a_refused_finish_is_unrecorded_at_once(scripted_api, client, caplog):
    scripted_api.answers = [reply(401, {"error": "this lease is not run 42's"})]

    recorded = outcome.record(client, SUCCESS, timeout_seconds=60, sleep=pytest.fail)

    assert recorded == "unrecorded"
    assert "will not succeed by retrying" in caplog.text
    assert "this lease is not run 42's" in caplog.text


def test_an_outage_is_waited_out_until_the_finish_timeout(scripted_api, client, caplog):
    scripted_api.answers = [reply(503, {"error": "the database did not answer in time"})] * 20
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    recorded = outcome.record(
        client, SUCCESS, timeout_seconds=10, clock=lambda: now[0], sleep=sleep
    )

    assert recorded == "unrecorded"
    assert 1 < len(finishes(scripted_api)) < 20 and now[0] <= 10
    assert "the exit code 0 states the outcome" in caplog.text
