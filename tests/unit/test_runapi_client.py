"""The job pod's run API client (runner/runapi_client.py) against a real HTTPS server in a
thread, scripted request by request: what the pod sends, what it retries, and what a
broken or hostile server cannot make it do (trust another CA, read without bound, hang)."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

from devenv import pki
from devenv.waiting import wait_for
from pgsched.engine.lease import Lease
from pgsched.runner import patience
from pgsched.runner.heartbeat import HeartbeatLoop, request_timeout
from pgsched.runner.runapi_client import (
    MAX_RESPONSE_BYTES,
    RunApiClient,
    RunApiError,
    address,
    trusting,
)
from scripted_run_api import reply, then_hang_up

LEASE = Lease(42, uuid.UUID("3f2c6a9e-8d1b-4c55-9a57-0e7d2b1c4f10"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory):
    """Some other CA's certificate: a pod given it must trust nobody it meets here."""
    tls = pki.serving_tls(
        tmp_path_factory.mktemp("other-tls"), ips=["127.0.0.1"], ca_name="another-ca"
    )
    return (tls / "ca.crt").read_text()


@pytest.fixture
def api(scripted_api):
    """The operator's side, scripted (tests/scripted_run_api.py)."""
    return scripted_api


def client_of(api, **options):
    return RunApiClient(api.url, api.ca, LEASE, **options)


def test_a_heartbeat_speaks_for_its_run_with_the_lease_and_keeps_its_connection(api):
    api.answers = [reply(200, {"state": "active"}), reply(200, {"state": "cancel_requested"})]
    client = client_of(api)

    assert client.heartbeat() == "active"
    assert client.heartbeat() == "cancel_requested"

    first, second = api.seen
    assert (first.method, first.path) == ("POST", "/v1/runs/42/heartbeat")
    assert first.headers["Authorization"] == f"Bearer {LEASE.token}"
    assert first.port == second.port  # kept alive


def test_the_final_write_sends_the_outcome_as_the_protocol_names_it(api):
    api.answers = [reply(200, {"finished": True}), reply(200, {"finished": False})]
    client = client_of(api)

    assert client.finish(
        "FAILED", reason="KeyError", error="KeyError: 'x'", exit_code=1, retry_hint="never"
    )
    assert not client.finish("COMPLETED", exit_code=0)

    full, short = api.seen
    assert (full.path, full.headers["Content-Type"]) == ("/v1/runs/42/finish", "application/json")
    assert json.loads(full.body) == {
        "status": "FAILED",
        "reason": "KeyError",
        "error": "KeyError: 'x'",
        "exitCode": 1,
        "retryHint": "never",
    }
    assert json.loads(short.body) == {"status": "COMPLETED", "exitCode": 0}


def test_the_long_poll_names_the_state_it_knows_and_never_asks_to_wait_over_30_s(api):
    api.answers = [reply(200, {"state": "lost"}), reply(200, {"state": "active"})]
    client = client_of(api)

    assert client.wait_while("cancel_requested", 45) == "lost"
    assert client.lease_state() == "active"

    assert [seen.path for seen in api.seen] == [
        "/v1/runs/42/lease?state=cancel_requested&wait=30",
        "/v1/runs/42/lease",
    ]


def test_503_and_429_are_retried_on_fresh_connections_after_the_servers_retry_after(api):
    api.answers = [
        reply(503, {"error": "the database did not answer in time"}),
        reply(429, {"error": "namespace over its rate"}, Retry_After="2"),
        reply(200, {"finished": True}),
    ]
    client = client_of(api)
    pauses: list[float] = []

    tried = patience.write(
        lambda: client.finish("COMPLETED", exit_code=0),
        what="recording COMPLETED",
        run_id=42,
        timeout_seconds=60,
        sleep=pauses.append,
    )

    assert (tried.value, tried.attempts) == (True, 3)
    assert pauses == [patience.FIRST_PAUSE_SECONDS, 2.0]  # the server's wait, being longer
    assert len({seen.port for seen in api.seen}) == 3


def test_a_refusal_says_whether_to_retry_and_a_retry_after_is_capped(api):
    api.answers = [
        reply(503, {"error": "the database did not answer in time"}),
        reply(429, {}, Retry_After="3600"),
        reply(429, {}, Retry_After="Wed, 21 Oct 2026 07:28:00 GMT"),
    ]
    client = client_of(api)
    errors = []
    for _ in range(3):
        with pytest.raises(RunApiError) as raised:
            client.heartbeat()
        errors.append(raised.value)

    assert [(error.transient, error.retry_after) for error in errors] == [
        (True, None),
        (True, 30.0),
        (True, None),  # a date is not worth parsing: the usual pause applies
    ]
    assert str(errors[0]) == (
        f"POST {api.url}/v1/runs/42/heartbeat: 503 Service Unavailable: the database did not"
        " answer in time"
    )


@pytest.mark.parametrize("status", [400, 401, 404, 413])
def test_a_refused_request_is_not_retried(api, status):
    api.answers = [reply(status, {"error": "no"})]
    client = client_of(api)

    tried = patience.write(
        client.workload_ended,
        what="noting that the workload ended",
        run_id=42,
        timeout_seconds=60,
        sleep=lambda _: pytest.fail("a refusal was retried"),
    )

    assert tried.error is not None and not tried.error.transient
    assert f": {status} " in str(tried.error)
    assert (tried.attempts, len(api.seen)) == (1, 1)


def test_an_answer_over_64_kib_is_not_read_when_it_says_so(api):
    def announce_a_gigabyte(handler):
        handler.send_response(200)
        handler.send_header("Content-Length", str(2**30))
        handler.end_headers()
        handler.wfile.write(b"{" * 1024)
        api.release.wait(10)

    api.answers = [announce_a_gigabyte]
    with pytest.raises(RunApiError, match="larger than 65536 bytes") as raised:
        client_of(api).heartbeat()
    assert not raised.value.transient


def test_an_endless_chunked_answer_is_read_no_further_than_64_kib(api):
    written = []

    def stream_forever(handler):
        handler.send_response(200)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        chunk = b"4000\r\n" + b" " * 0x4000 + b"\r\n"
        try:
            for _ in range(4096):  # 64 MiB, if anyone read it
                handler.wfile.write(chunk)
                written.append(len(chunk))
        except OSError:
            pass  # the pod hung up

    api.answers = [stream_forever]
    with pytest.raises(RunApiError, match="larger than 65536 bytes"):
        client_of(api).heartbeat()
    time.sleep(0.2)
    assert sum(written) < 100 * MAX_RESPONSE_BYTES  # what the socket buffers held, no more


@pytest.mark.parametrize("stall", ["before answering", "in the middle of the answer"])
def test_a_stalled_server_fails_the_request_after_its_timeout(api, stall):
    def answer_then_stall(handler):
        if stall == "in the middle of the answer":
            handler.send_response(200)
            handler.send_header("Content-Length", "100")
            handler.end_headers()
            handler.wfile.write(b'{"state": ')
            handler.wfile.flush()
        api.release.wait(10)

    api.answers = [answer_then_stall]
    client = client_of(api, timeout_seconds=0.5)
    started = time.monotonic()
    with pytest.raises(RunApiError, match=r"no answer within 0\.5s") as raised:
        client.heartbeat()
    assert time.monotonic() - started < 3
    assert raised.value.transient


def test_a_long_poll_is_given_its_wait_on_top_of_the_timeout(api):
    def answer_late(handler):
        time.sleep(1.0)
        reply(200, {"state": "cancel_requested"})(handler)

    api.answers = [answer_late]
    client = client_of(api, timeout_seconds=0.5)
    assert client.wait_while("active", 2) == "cancel_requested"


def test_a_certificate_from_another_ca_is_refused_and_nothing_is_sent(api, other_ca):
    client = RunApiClient(api.url, other_ca, LEASE)

    with pytest.raises(RunApiError, match="PGSCHED_RUN_API_CA") as raised:
        client.finish("COMPLETED")

    assert not raised.value.transient
    assert api.seen == []


def test_a_certificate_for_another_host_is_refused(api):
    """The operator's certificate is for 127.0.0.1; "localhost" resolves there, but it is
    not a name the certificate carries."""
    url = api.url.replace("127.0.0.1", "localhost")
    client = RunApiClient(url, api.ca, LEASE)

    with pytest.raises(RunApiError, match="not valid for 'localhost'"):
        client.heartbeat()
    assert api.seen == []


def test_a_connection_the_server_closed_while_idle_is_retried_once_for_a_heartbeat(api):
    api.answers = [then_hang_up(reply(200, {"state": "active"})), reply(200, {"state": "lost"})]
    client = client_of(api)
    assert client.heartbeat() == "active"
    time.sleep(0.2)  # the server has hung up

    assert client.heartbeat() == "lost"
    assert len(api.seen) == 2 and api.seen[0].port != api.seen[1].port


def test_a_final_write_is_not_repeated_behind_its_callers_back(api):
    """Its callers count the attempts: a finish whose answer was lost may have committed
    (outcome.record)."""
    api.answers = [then_hang_up(reply(200, {"state": "active"})), reply(200, {"finished": True})]
    client = client_of(api)
    client.heartbeat()
    time.sleep(0.2)

    with pytest.raises(RunApiError) as raised:
        client.finish("COMPLETED")
    assert raised.value.transient
    assert client.finish("COMPLETED")


def test_no_server_at_all_is_a_transient_error(api):
    client = RunApiClient("https://127.0.0.1:1", api.ca, LEASE)
    with pytest.raises(RunApiError, match="ConnectionRefusedError") as raised:
        client.heartbeat()
    assert raised.value.transient


def test_each_thread_talks_on_a_connection_of_its_own(api):
    client = client_of(api)
    client.heartbeat()
    other = threading.Thread(target=client.heartbeat)
    other.start()
    other.join()
    client.heartbeat()

    ports = [seen.port for seen in api.seen]
    assert ports[0] == ports[2] != ports[1]


def test_an_answer_that_is_not_the_protocols_is_an_error(api):
    api.answers = [reply(200, {"state": "paused"}), reply(200, b"<html>")]
    client = client_of(api)
    with pytest.raises(RunApiError, match="unknown lease state 'paused'"):
        client.heartbeat()
    with pytest.raises(RunApiError, match="not a JSON object"):
        client.heartbeat()


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://10.0.0.5", "is not an https:// URL"),
        ("https://", "has no host"),
        ("https://10.0.0.5:http", "has a port that is not a number"),
        ("https://10.0.0.5/?x=1", "must not have a query"),
    ],
)
def test_an_address_that_cannot_be_the_run_apis_is_refused(url, problem):
    with pytest.raises(ValueError, match=problem):
        address(url)


def test_addresses_name_a_host_and_maybe_a_port_and_a_path():
    assert address("https://10.0.0.5") == ("10.0.0.5", 443, "")
    assert address("https://[fd00::5]:8443/") == ("fd00::5", 8443, "")
    assert address("https://pgsched-run-api.pgsched.svc/api") == (
        "pgsched-run-api.pgsched.svc",
        443,
        "/api",
    )


def test_only_a_pem_certificate_is_trusted_and_never_the_systems_cas_instead(api):
    assert trusting(api.ca).get_ca_certs()[0]["subject"] == (
        (("commonName", "pgsched-run-api-ca"),),
    )
    with pytest.raises(ValueError, match="not PEM text of a certificate"):
        trusting("")
    with pytest.raises(ValueError, match="cannot be loaded as a CA certificate"):
        trusting("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")


def test_a_beat_a_frozen_replica_holds_is_given_up_within_the_interval_and_sent_again(api):
    """A replica paused mid-answer (SIGSTOP, a GC pause) holds the beat's connection: the
    loop gives the beat up after twice its interval (2.5 s at least: the server may queue
    a request 2 s for a call slot) and beats again on a fresh connection, which the Service
    may send to another replica, well before a timeout of three intervals and more. With
    the general 10 s request timeout a 1 s interval's run went silent for 11 s, and was
    reaped, in the cluster chaos (seed 947361542)."""
    beats: list[float] = []

    def frozen(handler):
        api.release.wait(30)

    def respond(seen):
        if seen.method == "POST":
            beats.append(time.monotonic())
            if len(beats) == 1:
                return frozen
        return reply(200, {"state": "active"})

    api.respond = respond
    loop = HeartbeatLoop(client_of(api), interval_seconds=1).start()
    try:
        wait_for(lambda: len(beats) >= 2, 20, describe="a second beat")
    finally:
        loop.stop(timeout=1)
    assert beats[1] - beats[0] < 4.5, f"the next beat came {beats[1] - beats[0]:.1f}s after"
    assert request_timeout(1) == 2.5 and request_timeout(3) == 6 and request_timeout(30) == 10
