"""Bulkheads of notification delivery (I14): one deadline covers a whole attempt, a
namespace and an address hold only their share of the workers, and a destination is
checked on the address the socket connects to.

Real servers throughout: ``devenv.receiver``'s Receiver and Trickler on loopback (Linux
answers on all of 127.0.0.0/8, so 127.0.0.2 is another host), the real database and its
trigger. The one stand-in is the slow name server: a lookup given to the notifier's
resolver that waits before asking the system's resolver, as a name server that answers
after 25 s does.
"""

from __future__ import annotations

import socket
import statistics
import threading
import time
from contextlib import contextmanager
from datetime import timedelta

import pytest

from cli_runner import pgsched
from db.test_notifications import SECRETS, T0, Secrets, fail, outbox
from devenv import pki
from devenv.receiver import Receiver, Trickler
from devenv.waiting import wait_for
from factories import define
from pgsched.db import connection
from pgsched.engine import notifications
from pgsched.k8s.notifications import destinations, notifier

TIMEOUT, DEADLINE = 1.0, 2.0
# Trickling just within the read timeout: each read succeeds, none ends the answer.
EVERY = 0.8
LOOPBACK_NET = destinations.Allowed.parse(["127.0.0.0/8"])
# Far less than a notification sitting behind a hostile's attempt waits (the attempt's
# deadline: 30 s in the share test), far more than scheduling noise on a busy machine.
WAITED_FOR_A_WORKER = 0.25
# Often enough that an attempt's end is seen within hundredths (the tests time it).
POLL = 0.02


def make(**settings) -> notifier.Notifier:
    defaults = {"allowed": LOOPBACK_NET, "timeout": TIMEOUT, "deadline": DEADLINE}
    return notifier.Notifier(Secrets(dict(SECRETS)), **{**defaults, **settings})


def target(url: str, name: str = "hook") -> dict[str, object]:
    return {"name": name, "type": "Slack", "url": url}  # Slack: no signing key to set up


@contextmanager
def delivering(dsn, notify, *, interval=0.05):
    """The publisher thread's part: ``run_once`` on its own session, every ``interval``."""
    stop = threading.Event()
    session = connection.connect(dsn)

    def loop():
        while not stop.is_set():
            notify.run_once(session)
            stop.wait(interval)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)
        notify.close()
        session.close()


def first_attempt(conn):
    rows = [row for row in outbox(conn) if row["attempts"]]
    return rows[0] if rows else None


def seconds_held(conn, dsn, hostile: Trickler) -> float:
    """How long one failed run's notification to ``hostile`` held a worker: from the
    notifier's start to its first attempt recorded."""
    job = define(conn, now=T0, notify={"targets": [target(hostile.url)]})
    fail(conn, job, T0)
    started = time.monotonic()
    try:
        with delivering(dsn, make()):
            wait_for(
                lambda: first_attempt(conn),
                DEADLINE + 3,
                describe="the attempt is recorded",
                interval=POLL,
            )
            return time.monotonic() - started
    finally:
        hostile.stop()


# -- One deadline per attempt ------------------------------------------------------------------


@pytest.mark.parametrize("status_line", [False, True], ids=["body", "status line"])
def test_a_receiver_trickling_after_connection_close_is_cut_at_the_deadline(conn, dsn, status_line):
    """CPython's getresponse() drops conn.sock on "Connection: close": a watchdog that shut
    that down cut nothing, and one byte per read timeout held the worker for hours."""
    held = seconds_held(conn, dsn, Trickler(status=500, every=EVERY, status_line=status_line))
    row = first_attempt(conn)
    assert row["state"] == "PENDING"  # a receiver's failure: retried later
    assert held < DEADLINE + 1.0, f"the attempt held a worker {held:.1f} s"
    if status_line:
        assert f"no complete answer within the {DEADLINE:g} s deadline" in row["last_error"]
    else:
        assert "answered 500" in row["last_error"]  # the status came; the body was cut


def test_a_success_is_settled_by_its_status_whatever_the_body_does(conn, dsn):
    held = seconds_held(conn, dsn, Trickler(status=200, every=EVERY))
    assert first_attempt(conn)["state"] == "DELIVERED"
    assert held < 1.0


def slow_lookup(seconds: float, released: threading.Event):
    """A name server slow to answer for ``slow.test`` (127.0.0.1), and only for it."""

    def lookup(host, port, **kwargs):
        if host == "slow.test":
            released.wait(seconds)
            host = "127.0.0.1"
        return socket.getaddrinfo(host, port, **kwargs)

    return lookup


def test_a_slow_name_server_is_inside_the_deadline_and_holds_no_worker(conn, dsn):
    """Resolution was outside the deadline: 25 s measured with a slow name server."""
    receiver = Receiver().start()
    released = threading.Event()
    resolver = destinations.Resolver(slow_lookup(25, released))
    url = f"http://slow.test:{receiver.port}/hook"
    job = define(conn, now=T0, notify={"targets": [target(url)]})
    fail(conn, job, T0)
    started = time.monotonic()
    try:
        with delivering(dsn, make(resolver=resolver)):
            wait_for(
                lambda: first_attempt(conn),
                DEADLINE + 3,
                describe="the attempt is recorded",
                interval=POLL,
            )
            held = time.monotonic() - started
    finally:
        released.set()
        receiver.stop()
    assert held < DEADLINE + 1.0, f"resolving held a worker {held:.1f} s"
    assert (
        "resolving slow.test took longer than the 2 s deadline" in first_attempt(conn)["last_error"]
    )
    assert not receiver.received()


def test_a_namespace_may_have_only_a_few_lookups_outstanding(conn):
    released = threading.Event()
    resolver = destinations.Resolver(slow_lookup(25, released), per_namespace=2)
    deadline = destinations.Deadline.starting(0.1)
    try:
        for _ in range(2):
            with pytest.raises(TimeoutError):
                resolver.addresses("slow.test", 80, namespace="slow", deadline=deadline)
        with pytest.raises(destinations.Busy):  # abandoned lookups still count
            resolver.addresses("slow.test", 80, namespace="slow", deadline=deadline)
        fresh = destinations.Deadline.starting(5)
        assert resolver.addresses("127.0.0.1", 80, namespace="other", deadline=fresh)
    finally:
        released.set()


# -- A namespace's share -------------------------------------------------------------------


def latencies(conn, receiver: Receiver, job, count: int, *, minute0: int) -> list[float]:
    """Seconds from each failure's commit to its notification's arrival, one at a time,
    4 a second (within the per-address rate: what is measured is waiting for a worker)."""
    found = []
    for index in range(count):
        time.sleep(0.25)
        before = len(receiver.received())
        fail(conn, job, T0 + timedelta(minutes=minute0 + index))
        committed = time.monotonic()
        wait_for(
            lambda before=before: len(receiver.received()) > before,
            30,
            describe="the notification",
            interval=POLL,
        )
        found.append(receiver.received()[before].at - committed)
    return found


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def test_a_hostile_namespace_trickling_on_five_ports_does_not_delay_another(conn, dsn):
    """Per host:port bounds let five ports of one host take all 8 shared workers: another
    team's notification waited 88 s. Now a namespace holds at most its share, and an
    address its own."""
    hostiles = [Trickler(status=500, every=EVERY) for _ in range(5)]
    team = Receiver(host="127.0.0.2").start()
    hostile_jobs = [  # ten lines (job, target) of notifications: more than the 8 workers
        define(
            conn,
            f"hostile-{index}",
            namespace="hostile",
            now=T0,
            notify={"targets": [target(t.url, f"h{i}") for i, t in enumerate(hostiles)]},
        )
        for index in range(2)
    ]
    team_job = define(
        conn, "export", namespace="team", now=T0, notify={"targets": [target(team.url)]}
    )
    try:
        with delivering(dsn, make(deadline=30.0)):  # the hostile holds what it can, long
            alone = latencies(conn, team, team_job, 24, minute0=0)
            for job in hostile_jobs:
                fail(conn, job, T0)
            wait_for(
                lambda: sum(len(t.opened) for t in hostiles) >= 2,
                10,
                describe="hostile load",
                interval=POLL,
            )
            beside = latencies(conn, team, team_job, 24, minute0=100)
            held = sum(len(t.opened) - len(t.closed) for t in hostiles)
    finally:
        for hostile in hostiles:
            hostile.stop()
        team.stop()
    delay = p99(beside) - p99(alone)
    print(f"team p99 alone {p99(alone):.3f} s, beside the hostile {p99(beside):.3f} s")
    assert held <= 2, f"the hostile namespace held {held} workers"
    # A notification that waits for a worker the hostile holds waits for one of its
    # attempts to end: seconds (the bug: 88 s). What the hostile's tricklers cost in CPU
    # on a shared 2-core machine is hundredths (a 1.2x bound on a 46 ms p99 failed at 62 ms
    # in CI). A quarter second tells the two apart by an order of magnitude each way.
    assert delay < WAITED_FOR_A_WORKER, (
        f"the team's p99 grew by {delay:.3f} s beside the hostile namespace"
    )


def test_an_address_takes_its_share_whatever_the_ports(conn, dsn):
    """Two namespaces, five ports of one address: at most two requests to it at once."""
    hostiles = [Trickler(status=500, every=EVERY) for _ in range(5)]
    jobs = [
        define(conn, "job", namespace=f"ns-{i}", now=T0, notify={"targets": [target(t.url)]})
        for i, t in enumerate(hostiles)
    ]
    try:
        with delivering(dsn, make(deadline=30.0, per_namespace_concurrency=8)):
            for job in jobs:
                fail(conn, job, T0)
            wait_for(
                lambda: sum(len(t.opened) for t in hostiles) >= 2,
                10,
                describe="hostile load",
                interval=POLL,
            )
            time.sleep(1.0)  # rounds enough to take more, were they allowed
            at_once = sum(len(t.opened) - len(t.closed) for t in hostiles)
    finally:
        for hostile in hostiles:
            hostile.stop()
    assert at_once == 2


# -- Destinations ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "said"),
    [
        ("127.0.0.1", "loopback"),
        ("2130706433", "loopback"),  # decimal
        ("0x7f000001", "loopback"),  # hex
        ("0177.0.0.1", "loopback"),  # octal
        ("localhost", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped IPv6
        ("169.254.169.254", "link-local, where cloud metadata services answer"),
        ("::ffff:169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("10.96.0.1", "private"),  # a cluster's kubernetes Service
        ("192.168.1.5", "private"),
        ("fd00:ec2::254", "private"),  # EC2's metadata over IPv6
        ("100.100.100.200", "not globally routable"),  # Alibaba's metadata (shared space)
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
    ],
)
def test_non_public_destinations_are_refused_in_any_spelling(host, said):
    resolver = destinations.Resolver()
    found = resolver.addresses(host, 80, namespace="ns", deadline=destinations.Deadline.starting(5))
    with pytest.raises(destinations.Refused) as refused:
        destinations.permitted(host, found, destinations.PUBLIC_ONLY)
    assert said in str(refused.value)
    assert "PGSCHED_NOTIFY_ALLOW" in str(refused.value)


def test_public_and_allowed_destinations_pass():
    allowed = destinations.Allowed.parse(["10.0.0.0/8", "hooks.tools.svc", ".svc.cluster.local"])
    assert destinations.permitted("example.org", ["93.184.215.14"], destinations.PUBLIC_ONLY)
    assert destinations.permitted("x", ["10.1.2.3"], allowed) == "10.1.2.3"
    assert destinations.permitted("hooks.tools.svc", ["172.16.0.9"], allowed) == "172.16.0.9"
    assert destinations.permitted("a.b.svc.cluster.local.", ["172.16.0.9"], allowed)
    with pytest.raises(destinations.Refused):
        destinations.permitted("other.tools.svc", ["172.16.0.9"], allowed)
    # Of a public and a private answer, only the public one is used.
    assert destinations.permitted("mixed", ["127.0.0.1", "93.184.215.14"], allowed) == (
        "93.184.215.14"
    )


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "hooks_.svc", "http://x", ""])
def test_a_bad_allow_list_entry_is_named(entry):
    if not entry:
        assert destinations.Allowed.parse([entry]) == destinations.PUBLIC_ONLY
        return
    with pytest.raises(ValueError, match="neither a CIDR nor a host name"):
        destinations.Allowed.parse([entry])


def test_a_refused_destination_is_a_dead_letter_saying_what_to_allow(conn, dsn):
    """The receiver listens: nothing reaches it, and doctor's dead letters (where a failed
    notification shows) say why and what the administrator may allow."""
    receiver = Receiver().start()
    url = f"http://2130706433:{receiver.port}/hook"
    job = define(conn, now=T0, notify={"targets": [target(url)]})
    fail(conn, job, T0)
    try:
        with delivering(dsn, make(allowed=destinations.PUBLIC_ONLY)):
            wait_for(
                lambda: first_attempt(conn), 10, describe="the attempt is recorded", interval=POLL
            )
    finally:
        receiver.stop()
    assert not receiver.received()
    [dead] = notifications.dead_letters(conn)
    assert dead["attempts"] == 1
    assert dead["last_error"] == (
        "refused: 2130706433 resolves to 127.0.0.1 (loopback): notifications go to"
        " public addresses only. For a receiver inside the cluster or your network, the"
        " administrator adds its address or host name to PGSCHED_NOTIFY_ALLOW (the chart's"
        " notifications.allowDestinations), e.g. 127.0.0.1/32 or 2130706433"
    )
    doctor = pgsched("doctor", "-o", "json", dsn=dsn)
    [check] = [item for item in doctor.json()["checks"] if item["check"] == "notifications"]
    assert check["status"] == "warn"
    assert (
        "default/job run 1 failed to hook after 1 attempts: refused: 2130706433"
        in (check["detail"])
    )


def test_a_name_rebound_to_loopback_is_refused_where_the_socket_connects(conn, dsn):
    """The address checked is the address connected to: one lookup per attempt, so a
    name that answered with a public address before cannot answer loopback after."""
    receiver = Receiver().start()
    asked = []

    def rebinding(host, port, **kwargs):
        asked.append(host)
        return socket.getaddrinfo("127.0.0.1", port, **kwargs)  # this time: loopback

    job = define(
        conn, now=T0, notify={"targets": [target(f"http://hooks.example.com:{receiver.port}/")]}
    )
    fail(conn, job, T0)
    try:
        with delivering(
            dsn,
            make(allowed=destinations.PUBLIC_ONLY, resolver=destinations.Resolver(rebinding)),
        ):
            wait_for(
                lambda: first_attempt(conn), 10, describe="the attempt is recorded", interval=POLL
            )
    finally:
        receiver.stop()
    assert asked == ["hooks.example.com"]
    assert not receiver.received()
    assert "hooks.example.com resolves to 127.0.0.1 (loopback)" in first_attempt(conn)["last_error"]


def test_an_allowed_host_name_reaches_an_in_cluster_receiver(conn, dsn):
    receiver = Receiver().start()

    def cluster_dns(host, port, **kwargs):
        assert host == "hooks.tools.svc.cluster.local"
        return socket.getaddrinfo("127.0.0.1", port, **kwargs)

    url = f"http://hooks.tools.svc.cluster.local:{receiver.port}/hook"
    job = define(conn, now=T0, notify={"targets": [target(url)]})
    fail(conn, job, T0)
    allowed = destinations.Allowed.parse(["hooks.tools.svc.cluster.local"])
    try:
        with delivering(dsn, make(allowed=allowed, resolver=destinations.Resolver(cluster_dns))):
            wait_for(lambda: receiver.received(), 10, describe="the notification", interval=POLL)
    finally:
        receiver.stop()
    [request] = receiver.received()
    assert request.headers["Host"] == f"hooks.tools.svc.cluster.local:{receiver.port}"


@pytest.fixture
def hooks_test_tls(tmp_path, monkeypatch):
    """A certificate for hooks.test (and 127.0.0.1), its CA trusted as the system's."""
    folder = pki.serving_tls(
        tmp_path / "tls", ips=["127.0.0.1"], ca_name="hooks-ca", names=["hooks.test"]
    )
    monkeypatch.setenv("SSL_CERT_FILE", str(folder / "ca.crt"))
    return folder


def to_loopback(host, port, **kwargs):
    """A name server that answers 127.0.0.1 for every name."""
    return socket.getaddrinfo("127.0.0.1", port, **kwargs)


@pytest.mark.parametrize(("name", "delivered"), [("hooks.test", True), ("other.test", False)])
def test_https_is_verified_for_the_urls_host_while_connecting_to_the_checked_address(
    conn, dsn, hooks_test_tls, name, delivered
):
    """The socket goes to the address that was checked; TLS still verifies the name the
    URL gives (SNI and the certificate), so a checked address cannot be had by a
    certificate for another name."""
    receiver = Receiver(tls=hooks_test_tls).start()
    job = define(conn, now=T0, notify={"targets": [target(f"https://{name}:{receiver.port}/")]})
    fail(conn, job, T0)
    try:
        with delivering(dsn, make(resolver=destinations.Resolver(to_loopback))):
            wait_for(
                lambda: first_attempt(conn), 10, describe="the attempt is recorded", interval=POLL
            )
    finally:
        receiver.stop()
    row = first_attempt(conn)
    if delivered:
        assert row["state"] == "DELIVERED"
        [request] = receiver.received()
        assert request.headers["Host"] == f"hooks.test:{receiver.port}"
    else:
        assert row["state"] == "PENDING" and not receiver.received()
        assert "SSLCertVerificationError" in row["last_error"]
        assert "Hostname mismatch" in row["last_error"]
