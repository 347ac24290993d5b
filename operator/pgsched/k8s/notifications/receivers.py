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
most ``timeout`` seconds, the whole attempt, from resolving the host to the answer's last
byte, at most its deadline (a watchdog shuts the socket down under a receiver that
trickles its answer), redirects are never followed (``http.client`` does not), and at
most ``MAX_RESPONSE_BYTES`` of the answer are read. It connects to an address the
notifier resolved and checked (``destinations``), never to the name again.
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
from datetime import datetime
from typing import Any

from pgsched import __version__, wording
from pgsched.db import clock
from pgsched.k8s import names
from pgsched.k8s.notifications import destinations

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
        f" scheduled for {_moment(run['scheduledFor'])})"
        f" {_DESCRIBED.get(payload['event'], payload['event'])}"
    )
    detail = ": ".join(str(part) for part in (run.get("reason"), run.get("error")) if part)
    return f"{line}: {detail}" if detail and payload["event"] != "recovered" else line


def _moment(value: object) -> str:
    """A time in the text as people read it: UTC to the second (the payload's fields keep
    the database's microseconds, for tools); anything else as it came."""
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    return str(value) if moment.tzinfo is None else wording.instant(moment)


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


def endpoint(url: str) -> tuple[str, int]:
    """The receiver's host name (or address) and port, as the URL gives them."""
    parts = urllib.parse.urlsplit(url)
    return str(parts.hostname), parts.port or (443 if parts.scheme == "https" else 80)


def post(
    url: str,
    address: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    timeout: float,
    deadline: destinations.Deadline,
) -> Answer:
    """POST once to ``address`` (what the URL's host resolved to, already checked); raises
    ``OSError`` (refused, timed out, cut at the deadline) or ``http.client.HTTPException``
    (a malformed answer).

    The deadline is kept on the kernel's socket, not on an object http.client holds:
    ``getresponse()`` drops ``conn.sock`` when the receiver answers "Connection: close",
    and the response reads on from its own file, so a watchdog that shut ``conn.sock``
    down cut nothing and a receiver trickling one byte per read timeout held a worker
    for hours. A duplicate descriptor of the connected socket, kept here, reaches the
    socket whatever object reads it (TLS included). An asyncio client with a total
    timeout would bound it too, but means an event loop beside the worker threads for a
    pool of eight; one timer thread per request is cheaper than that, and measured at
    the deadline to within a few milliseconds (tests/db/test_notification_bulkheads.py).
    """
    host, port = endpoint(url)
    parts = urllib.parse.urlsplit(url)
    raw = socket.create_connection((address, port), timeout=min(timeout, deadline.left()))
    try:
        handle = raw.dup()  # shut down at the deadline: ends any read on this socket
    except OSError:
        raw.close()
        raise
    cut = threading.Event()
    watchdog = threading.Timer(deadline.remaining(), _cut, args=(handle, cut))
    watchdog.daemon = True
    watchdog.start()
    try:
        sock: socket.socket = raw
        if parts.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(raw, server_hostname=host)
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.sock = sock  # connected, checked, and (https) verified for the URL's host
        try:
            target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
            conn.request("POST", target, body=body, headers=dict(headers))
            response = conn.getresponse()
            status, location = response.status, response.getheader("Location")
            # A 2xx settles the attempt: its body is not waited for.
            text = b"" if 200 <= status < 300 else _some_of(response)
        finally:
            conn.close()
            sock.close()
    except (OSError, http.client.HTTPException):
        if cut.is_set():
            raise TimeoutError(deadline.exceeded()) from None
        raise
    finally:
        watchdog.cancel()
        handle.close()
    return Answer(status, text, location)


def _some_of(response: http.client.HTTPResponse) -> bytes:
    """At most ``MAX_RESPONSE_BYTES`` of an answer's body, what came before a cut."""
    try:
        return response.read(MAX_RESPONSE_BYTES)
    except http.client.IncompleteRead as error:
        return error.partial[:MAX_RESPONSE_BYTES]
    except OSError:
        return b""


def _cut(handle: socket.socket, cut: threading.Event) -> None:
    cut.set()
    with contextlib.suppress(OSError):  # already closed
        handle.shutdown(socket.SHUT_RDWR)
