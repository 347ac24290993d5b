"""The two pod programs on the run API's wire, against a scripted run API: the sidecar
(``pgsched heartbeat``) and the SDK runner (``pgsched run``) as real processes, and the
sidecar's note that the workload ended (``mark_ended``). The same against the real server
and database: tests/sdk."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import pgsched
from pgsched.engine.lease import Lease
from pgsched.runner import sidecar
from pgsched.runner.runapi_client import RunApiClient
from scripted_run_api import reply, unanswered

TESTS = Path(__file__).resolve().parents[1]
PACKAGE_ROOT = Path(pgsched.__file__).resolve().parents[1]  # the pgsched under test


def pod(api, command: str, tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    environment = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.pathsep.join([str(PACKAGE_ROOT), str(TESTS / "sdk")]),
        "PGSCHED_RUN_ID": "42",
        "PGSCHED_LEASE_TOKEN": str(uuid.uuid4()),
        "PGSCHED_RUN_API_URL": api.url,
        "PGSCHED_RUN_API_CA": api.ca,
        "PGSCHED_HEARTBEAT_INTERVAL_SECONDS": "20",  # long polls fill the interval
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "pgsched.cli.main", command],
        env=environment,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_until(predicate, *, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_the_sidecar_writes_the_cancel_file_as_the_long_poll_answers_and_ends_at_sigterm(
    scripted_api, tmp_path
):
    cancel = threading.Event()

    def answer_when_cancelled(handler):
        cancel.wait(20)
        reply(200, {"state": "cancel_requested"})(handler)

    def hold(handler):
        scripted_api.release.wait(60)

    scripted_api.answers = [
        reply(200, {"state": "active"}),
        answer_when_cancelled,
        hold,  # the next long poll, open when SIGTERM comes
        reply(200, {"marked": True}),
    ]
    cancel_file = tmp_path / "cancel"
    sidecar_process = pod(scripted_api, "heartbeat", tmp_path, PGSCHED_CANCEL_FILE=str(cancel_file))
    try:
        wait_until(lambda: len(scripted_api.seen) == 2)
        cancel.set()
        wait_until(cancel_file.exists, timeout=2)
        assert cancel_file.read_text().startswith("cancelled ")
        wait_until(lambda: len(scripted_api.seen) == 3)

        asked = time.monotonic()
        sidecar_process.send_signal(signal.SIGTERM)
        assert sidecar_process.wait(10) == 0
        assert time.monotonic() - asked < 2  # not held up by the open long poll
    finally:
        sidecar_process.kill()
    output = sidecar_process.stdout.read()
    requests = [f"{seen.method} {seen.path}" for seen in scripted_api.seen]
    assert requests[0] == "POST /v1/runs/42/heartbeat", output
    for request, state in zip(requests[1:3], ("active", "cancel_requested"), strict=True):
        path, _, wait = request.partition("&wait=")
        assert path == f"GET /v1/runs/42/lease?state={state}"
        assert 15 < float(wait) <= 20  # open until the next beat is due
    assert requests[3:] == ["POST /v1/runs/42/workload-ended"]
    assert "noted that the workload ended" in output and " WARNING " not in output, output


def test_the_runner_records_its_outcome_without_waiting_for_the_long_poll(scripted_api, tmp_path):
    def respond(seen):
        if "wait=" in seen.path:
            return lambda handler: scripted_api.release.wait(60)  # a long poll stays open
        if seen.path.endswith("/finish"):
            return reply(200, {"finished": True})
        return reply(200, {"state": "active"})

    scripted_api.respond = respond
    progress = tmp_path / "progress"
    runner = pod(
        scripted_api,
        "run",
        tmp_path,
        PGSCHED_ATTEMPT="1",
        PGSCHED_JOB_KIND="steps",
        PGSCHED_JOB_MODULES="sdk_test_jobs",
        PGSCHED_JOB_ARGS=json.dumps({"count": 3, "seconds": 0.1, "progress": str(progress)}),
    )
    try:
        assert runner.wait(10) == 0, runner.stdout.read()
    finally:
        runner.kill()
    [finish] = [seen for seen in scripted_api.seen if seen.path.endswith("/finish")]
    assert json.loads(finish.body) == {"status": "COMPLETED", "exitCode": 0}
    assert any("wait=" in seen.path for seen in scripted_api.seen)


@pytest.fixture
def client(scripted_api):
    return RunApiClient(scripted_api.url, scripted_api.ca, Lease(42, uuid.uuid4()))


def test_the_end_is_noted_through_an_outage_of_the_run_api(scripted_api, client, caplog):
    scripted_api.answers = [
        reply(503, {"error": "the database did not answer in time"}),
        unanswered,
        reply(200, {"marked": True}),
    ]
    pauses = []

    with caplog.at_level(logging.INFO):
        sidecar.mark_ended(client, sleep=pauses.append)

    assert [seen.path for seen in scripted_api.seen] == ["/v1/runs/42/workload-ended"] * 3
    assert len(pauses) == 2
    assert "run 42: noted that the workload ended" in caplog.text


def test_a_refused_note_is_logged_not_retried(scripted_api, client, caplog):
    scripted_api.answers = [reply(401, {"error": "this lease is not run 42's"})]

    sidecar.mark_ended(client, sleep=pytest.fail)

    assert len(scripted_api.seen) == 1
    assert "could not note that the workload ended" in caplog.text
