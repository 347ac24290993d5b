"""What a notification looks like on the wire, and one bounded POST to a receiver.

Three target types (docs/notifications.md has the schemas):

- ``Webhook``: the notification's JSON payload, signed;
- ``Slack``: ``{"text": ...}``, what a Slack-compatible incoming webhook takes, with
  ``&``, ``<`` and ``>`` escaped as Slack's formatting rules ask: the text carries a
  job's own words (its error, its reason), and unescaped ``<!channel>`` would ping a
  channel and ``<http://evil|bank>`` show one link as another;
- ``CloudEvents``: CloudEvents 1.0 in structured mode (``application/cloudevents+json``),
  ``id`` the idempotency key; signed too when the target names a signing key.

Every request carries ``Idempotency-Key``. A signed one carries ``X-Pgsched-Timestamp``
(Unix seconds when it was sent) and ``X-Pgsched-Signature: sha256=<hex>``, the HMAC-SHA256
of ``<timestamp>.<body>`` under the key: the timestamp is in the signed material, so a
receiver that refuses old timestamps refuses replays, and de-duplicates redeliveries by
the key.

A receiver is untrusted, so ``post`` bounds everything: connecting and each read take at
most ``timeout`` seconds, the whole exchange at most ``deadline`` (a watchdog shuts the
socket down under a receiver that trickles its answer), redirects are never followed
(``http.client`` does not), and at most ``MAX_RESPONSE_BYTES`` of the answer are read.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import json
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pgsched import __version__
from pgsched.db import clock
from pgsched.k8s import names

MAX_RESPONSE_BYTES = 4096
SIGNATURE_HEADER = "X-Pgsched-Signature"
TIMESTAMP_HEADER = "X-Pgsched-Timestamp"
_DESCRIBED = {
    "failed": "failed",
    "retried": "is queued: its previous attempt failed",
    "autoSuspended": "failed too often: the ScheduledJob is suspended",
    "skipped": "was skipped",
    "recovered": "succeeded after a failure",
    "deadlineMissed": "has not finished by its deadline (it keeps running)",
}


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    location: str | None = None


def message(payload: Mapping[str, Any]) -> str:
    """One line for humans (Slack's text, the webhook payload's ``message``)."""
    job, run = payload["scheduledJob"], payload["run"]
    line = (
        f"pgsched: {job['namespace']}/{job['name']} run {run['id']} (attempt {run['attempt']},"
        f" scheduled for {run['scheduledFor']}) {_DESCRIBED.get(payload['event'], payload['event'])}"
    )
    detail = ": ".join(str(part) for part in (run.get("reason"), run.get("error")) if part)
    return f"{line}: {detail}" if detail and payload["event"] != "recovered" else line


def slack_escaped(text: str) -> str:
    """``text`` as Slack's mrkdwn shows it literally: ``&``, ``<``, ``>`` as entities (only
    these three; Slack decodes no others)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def body_of(kind: str, payload: Mapping[str, Any]) -> tuple[bytes, str]:
    """The request body of a target type, and its content type."""
    if kind == "Slack":
        document: dict[str, Any] = {"text": slack_escaped(message(payload))}
        content_type = "application/json"
    elif kind == "CloudEvents":
        job = payload["scheduledJob"]
        document = {
            "specversion": "1.0",
            "id": payload["idempotencyKey"],
            "source": (
                f"/apis/{names.API_VERSION}/namespaces/{job['namespace']}"
                f"/scheduledjobs/{job['name']}"
            ),
            "type": f"dev.pgsched.run.{payload['event']}",
            "subject": f"runs/{payload['run']['id']}",
            "time": payload["occurredAt"],
            "datacontenttype": "application/json",
            "data": {**payload, "message": message(payload)},
        }
        content_type = "application/cloudevents+json; charset=utf-8"
    else:
        document = {**payload, "message": message(payload)}
        content_type = "application/json"
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode(), content_type


def signature(key: bytes, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 of ``<timestamp>.<body>``."""
    digest = hmac.new(key, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def headers_for(
    *, idempotency_key: str, content_type: str, body: bytes, signing_key: bytes | None
) -> dict[str, str]:
    headers = {
        "Content-Type": content_type,
        "Idempotency-Key": idempotency_key,
        "User-Agent": f"pgsched/{__version__}",
        "Connection": "close",
    }
    if signing_key is not None:
        timestamp = str(int(clock.local().timestamp()))  # the receiver compares its own
        headers[TIMESTAMP_HEADER] = timestamp
        headers[SIGNATURE_HEADER] = signature(signing_key, timestamp, body)
    return headers


def host_of(url: str) -> str:
    """The receiver's host and port: the unit of the per-receiver bounds."""
    return urllib.parse.urlsplit(url).netloc.lower()


def post(
    url: str, body: bytes, headers: Mapping[str, str], *, timeout: float, deadline: float
) -> Answer:
    """POST once; raises ``OSError`` (refused, timed out, cut at the deadline) or
    ``http.client.HTTPException`` (a malformed answer)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            str(parts.hostname), parts.port, timeout=timeout, context=ssl.create_default_context()
        )
    else:
        conn = http.client.HTTPConnection(str(parts.hostname), parts.port, timeout=timeout)
    watchdog = threading.Timer(deadline, _cut, args=(conn,))
    watchdog.daemon = True
    watchdog.start()
    try:
        target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        conn.request("POST", target, body=body, headers=dict(headers))
        response = conn.getresponse()
        return Answer(
            response.status, response.read(MAX_RESPONSE_BYTES), response.getheader("Location")
        )
    finally:
        watchdog.cancel()
        conn.close()


def _cut(conn: http.client.HTTPConnection) -> None:
    sock = conn.sock
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)
