"""Operator settings from the environment, and the client-side rate limiter."""

from __future__ import annotations

from datetime import timedelta

import pytest

from k8sfixtures import RUN_API_CA, RUN_API_URL, run_api_cert_dir
from pgsched.k8s.client.ratelimit import Priority, TokenBucket
from pgsched.k8s.serve.settings import OperatorSettings
from pgsched.validation import SettingsError


@pytest.fixture
def base(tmp_path) -> dict[str, str]:
    """What every operator needs set: the database, what to watch, the image, the run API."""
    return {
        "PGSCHED_DSN": "host=db",
        "PGSCHED_NAMESPACES": "jobs, reports",
        "PGSCHED_IMAGE": "pgsched:dev",
        "PGSCHED_RUN_API_URL": RUN_API_URL,
        "PGSCHED_RUN_API_CERT_DIR": str(run_api_cert_dir(tmp_path / "run-api")),
    }


def test_settings_come_from_the_environment_with_defaults(base):
    settings = OperatorSettings.from_environment(base)
    assert settings.namespaces == ("jobs", "reports")
    assert (settings.api_qps, settings.api_burst, settings.tick.interval_seconds) == (20.0, 40, 1.0)
    assert (settings.run_api.bind, settings.run_api.namespace_rate) == ("0.0.0.0:8443", 200.0)


def test_jobs_are_given_the_run_api_address_and_the_ca_read_at_start(base, tmp_path):
    settings = OperatorSettings.from_environment(base)
    assert (settings.jobs.run_api_url, settings.jobs.run_api_ca) == (RUN_API_URL, RUN_API_CA)
    # Read once: a CA replaced after the start reaches pods when the operator restarts.
    (tmp_path / "run-api" / "ca.crt").write_text("replaced")
    assert settings.jobs.run_api_ca == RUN_API_CA


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot read '{path}': No such file or directory; mount the run API's TLS Secret"),
        ("not a certificate\n", "'{path}' holds no PEM certificate"),
        ("", "'{path}' holds no PEM certificate"),
    ],
)
def test_a_missing_or_wrong_run_api_ca_stops_the_start_naming_the_variable_and_path(
    base, tmp_path, content, problem
):
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    path = folder / "ca.crt"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SettingsError) as caught:
        OperatorSettings.from_environment({**base, "PGSCHED_RUN_API_CERT_DIR": str(folder)})
    message = str(caught.value)
    assert f"PGSCHED_RUN_API_CERT_DIR: {problem.format(path=path)}" in message
    assert "(example: PGSCHED_RUN_API_CERT_DIR=/etc/pgsched/run-api)" in message


def test_the_run_api_address_and_certificate_are_required(base):
    environ = {key: value for key, value in base.items() if not key.startswith("PGSCHED_RUN_API_")}
    with pytest.raises(SettingsError) as caught:
        OperatorSettings.from_environment(environ)
    message = str(caught.value)
    assert "PGSCHED_RUN_API_CERT_DIR: is required: job pods reach pgsched" in message
    assert "PGSCHED_RUN_API_URL: is required: job pods reach pgsched" in message


def test_every_bad_setting_is_named_with_an_example():
    with pytest.raises(SettingsError) as caught:
        OperatorSettings.from_environment(
            {
                "PGSCHED_API_QPS": "fast",
                "PGSCHED_METRICS_BIND": "9090",
                "PGSCHED_IMAGE_PULL_POLICY": "Sometimes",
            }
        )
    message = str(caught.value)
    for expected in (
        "PGSCHED_DSN: is required",
        "PGSCHED_IMAGE: is required",
        "PGSCHED_NAMESPACE_SELECTOR: is empty, and so are PGSCHED_NAMESPACES and"
        " PGSCHED_ALL_NAMESPACES: say which namespaces to serve (example:"
        " PGSCHED_NAMESPACE_SELECTOR=pgsched.dev/serve=true)",
        "PGSCHED_RUN_API_URL: is required: job pods reach pgsched through the run API",
        "PGSCHED_API_QPS: 'fast' is not a number (example: PGSCHED_API_QPS=20)",
        "PGSCHED_METRICS_BIND: '9090' must be host:port",
        "PGSCHED_IMAGE_PULL_POLICY: 'Sometimes'",
    ):
        assert expected in message


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        ("pgsched.dev/serve=true", "pgsched.dev/serve=true"),
        (" team = a , pgsched.dev/serve=true ", "team=a,pgsched.dev/serve=true"),
        ("example.com/tier=", "example.com/tier="),
    ],
)
def test_served_namespaces_may_be_chosen_by_labels(base, raw, kept):
    environ = {key: value for key, value in base.items() if key != "PGSCHED_NAMESPACES"}
    settings = OperatorSettings.from_environment({**environ, "PGSCHED_NAMESPACE_SELECTOR": raw})
    assert (settings.namespace_selector, settings.namespaces) == (kept, ())


@pytest.mark.parametrize(
    "raw",
    ["pgsched.dev/serve", "serve!=true", "serve in (a,b)", "a=b/c", "-bad=true", "a=" + "x" * 64],
)
def test_a_label_selector_that_is_not_key_value_pairs_is_refused_with_an_example(base, raw):
    environ = {key: value for key, value in base.items() if key != "PGSCHED_NAMESPACES"}
    with pytest.raises(SettingsError) as caught:
        OperatorSettings.from_environment({**environ, "PGSCHED_NAMESPACE_SELECTOR": raw})
    message = str(caught.value)
    assert "PGSCHED_NAMESPACE_SELECTOR: " in message
    assert "is not a label key=value" in message
    assert "(example: PGSCHED_NAMESPACE_SELECTOR=pgsched.dev/serve=true)" in message


def test_namespaces_are_chosen_one_way_only(base):
    with pytest.raises(SettingsError) as caught:
        OperatorSettings.from_environment(
            {**base, "PGSCHED_NAMESPACE_SELECTOR": "pgsched.dev/serve=true"}
        )
    assert (
        "PGSCHED_NAMESPACES: set one of PGSCHED_NAMESPACES and PGSCHED_NAMESPACE_SELECTOR, not both"
    ) in str(caught.value)


def test_a_bad_tick_setting_names_its_variable(base):
    with pytest.raises(SettingsError) as caught:
        OperatorSettings.from_environment({**base, "PGSCHED_DISPATCH_BATCH": "20000"})
    assert str(caught.value) == (
        "invalid operator settings:\n  PGSCHED_DISPATCH_BATCH: 20000 is out of range 1..10000"
        " (example: PGSCHED_DISPATCH_BATCH=50)"
    )


@pytest.mark.parametrize(
    ("raw", "kept"), [("", None), ("90d", timedelta(days=90)), (" 36h ", timedelta(hours=36))]
)
def test_history_retention_is_days_or_hours_or_forever(base, raw, kept):
    settings = OperatorSettings.from_environment({**base, "PGSCHED_HISTORY_RETENTION": raw})
    assert settings.history_retention == kept


@pytest.mark.parametrize("raw", ["90", "0d", "3 months", "-1d"])
def test_a_bad_history_retention_names_the_variable_and_an_example(base, raw):
    with pytest.raises(SettingsError) as caught:
        OperatorSettings.from_environment({**base, "PGSCHED_HISTORY_RETENTION": raw})
    assert str(caught.value) == (
        f"invalid operator settings:\n  PGSCHED_HISTORY_RETENTION: {raw!r} must be a positive"
        " number of days or hours (or empty: keep forever) (example:"
        " PGSCHED_HISTORY_RETENTION=90d)"
    )


def test_notification_destinations_allowed_are_cidrs_and_host_names(base):
    assert OperatorSettings.from_environment(base).notify_allow == ()
    raw = "10.0.0.0/8, hooks.tools.svc.cluster.local,.tools.svc"
    settings = OperatorSettings.from_environment({**base, "PGSCHED_NOTIFY_ALLOW": raw})
    assert settings.notify_allow == ("10.0.0.0/8", "hooks.tools.svc.cluster.local", ".tools.svc")


def test_a_bad_notification_destination_names_the_variable_and_an_example(base):
    with pytest.raises(SettingsError) as caught:
        OperatorSettings.from_environment({**base, "PGSCHED_NOTIFY_ALLOW": "10.0.0.0/8,http://x"})
    assert str(caught.value) == (
        "invalid operator settings:\n  PGSCHED_NOTIFY_ALLOW: 'http://x' is neither a CIDR nor"
        " a host name (examples: 10.0.0.0/8, hooks.tools.svc.cluster.local,"
        " .tools.svc.cluster.local) (example: PGSCHED_NOTIFY_ALLOW=10.0.0.0/8,"
        ".tools.svc.cluster.local)"
    )


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def test_token_bucket_allows_a_burst_then_paces_to_qps():
    clock = FakeClock()
    bucket = TokenBucket(10, 5, clock=clock, sleep=clock.sleep)
    waits = [bucket.acquire() for _ in range(15)]
    assert waits[:5] == [0.0] * 5
    assert all(wait > 0 for wait in waits[5:])
    assert clock.now == pytest.approx(1.0)  # 10 more requests at 10 qps


def test_token_bucket_refills_while_idle():
    clock = FakeClock()
    bucket = TokenBucket(10, 5, clock=clock, sleep=clock.sleep)
    for _ in range(5):
        bucket.acquire()
    clock.now += 10
    assert [bucket.acquire() for _ in range(5)] == [0.0] * 5


def test_background_requests_take_spare_tokens_above_the_half_kept_for_urgent_ones():
    clock = FakeClock()
    bucket = TokenBucket(10, 4, clock=clock, sleep=clock.sleep)
    assert [bucket.acquire(Priority.VISIBLE) for _ in range(2)] == [0.0, 0.0]  # spare: no wait
    # The other half of the burst is kept for urgent requests (the next Jobs)...
    assert bucket.acquire(Priority.VISIBLE) == pytest.approx(0.1)  # ...until one more refills
    assert [bucket.acquire() for _ in range(2)] == [0.0, 0.0]


def tokens_taken(bucket: TokenBucket, threads: dict[Priority, int]) -> dict[Priority, int]:
    """How many tokens each priority took in 1.5 s, with ``threads[priority]`` threads each
    asking for token after token, from an empty bucket (as in the middle of a stampede)."""
    import threading

    bucket.acquire()
    stop = threading.Event()
    taken = dict.fromkeys(Priority, 0)
    counting = threading.Lock()

    def loop(priority: Priority) -> None:
        while not stop.is_set():
            bucket.acquire(priority)
            with counting:
                taken[priority] += 1

    started = [
        threading.Thread(target=loop, args=(priority,))
        for priority, count in threads.items()
        for _ in range(count)
    ]
    for thread in started:
        thread.start()
    stop.wait(1.5)
    stop.set()
    for thread in started:
        thread.join(timeout=10)
    return taken


def test_background_requests_get_their_share_while_urgent_ones_keep_the_bucket_empty():
    """Statuses and Events are not starved by a stampede of Job creations: they get
    ``background_share`` of the rate, the Jobs get the rest."""
    bucket = TokenBucket(400, 1, background_share=0.05)
    taken = tokens_taken(bucket, {Priority.URGENT: 4, Priority.VISIBLE: 1})
    urgent, background = taken[Priority.URGENT], taken[Priority.VISIBLE]
    # 5% of 400 qps for 1.5 s is 30 tokens; never none, never much more than the share.
    assert 10 <= background <= 45, (background, urgent)
    assert urgent >= 0.9 * (urgent + background), (background, urgent)


def test_launching_jobs_is_not_slowed_by_background_requests():
    """A burst of urgent requests (Job creations) gets the whole budget while the
    publisher's background requests wait for tokens left over."""
    import threading
    import time

    bucket = TokenBucket(50, 1)
    bucket.acquire()  # start with an empty bucket, as in the middle of a burst
    urgent_done: list[float] = []
    background_done: list[float] = []
    started = time.monotonic()

    def launcher() -> None:
        for _ in range(15):
            bucket.acquire()
            urgent_done.append(time.monotonic() - started)

    def publisher() -> None:
        for _ in range(5):
            bucket.acquire(Priority.VISIBLE)
            background_done.append(time.monotonic() - started)

    threads = [threading.Thread(target=launcher), threading.Thread(target=publisher)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    # 15 urgent tokens at 50 qps take 0.3 s: not 0.4 s as if sharing with 5 background ones.
    assert urgent_done[-1] < 0.38, urgent_done
    assert sum(1 for at in background_done if at < urgent_done[-1]) <= 1, background_done


def test_statuses_go_before_lease_hand_overs_which_still_get_their_turn():
    """In a stampede the launcher's lease hand-overs (housekeeping, one per Job) and the
    publisher's statuses and Events (visible) share the background's tokens: visible ones
    get most, housekeeping one in HOUSEKEEPING_EVERY — not a share by thread count, which
    let four hand-over threads' worth of patches hold up another job's status."""
    bucket = TokenBucket(400, 1, background_share=0.1)
    taken = tokens_taken(
        bucket, {Priority.URGENT: 4, Priority.VISIBLE: 1, Priority.HOUSEKEEPING: 4}
    )
    visible, housekeeping = taken[Priority.VISIBLE], taken[Priority.HOUSEKEEPING]
    background = visible + housekeeping
    assert background >= 20, taken  # 10% of 400 qps for 1.5 s is 60
    assert visible >= 0.6 * background, (visible, housekeeping)  # 3 in 4 expected
    assert housekeeping >= 0.1 * background, (visible, housekeeping)  # never starved


def test_the_connection_string_may_come_from_a_file(base, tmp_path):
    path = tmp_path / "dsn"
    path.write_text("host=db user=op\n")
    environ = {**base, "PGSCHED_DSN_FILE": str(path)}
    del environ["PGSCHED_DSN"]
    assert OperatorSettings.from_environment(environ).dsn == "host=db user=op"


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "cannot read '{path}': No such file or directory"), ("  \n", "'{path}' is empty")],
)
def test_a_missing_or_empty_connection_string_file_is_named(base, tmp_path, content, problem):
    path = tmp_path / "dsn"
    if content is not None:
        path.write_text(content)
    environ = {**base, "PGSCHED_DSN_FILE": str(path)}
    del environ["PGSCHED_DSN"]
    with pytest.raises(SettingsError) as caught:
        OperatorSettings.from_environment(environ)
    assert f"PGSCHED_DSN_FILE: {problem.format(path=path)}" in str(caught.value)


def test_the_job_template_policy_comes_from_the_environment(base):
    settings = OperatorSettings.from_environment(
        {
            **base,
            "PGSCHED_OPERATOR_NAMESPACE": "pgsched",
            "PGSCHED_OPERATOR_SERVICE_ACCOUNT": "pgsched",
            "PGSCHED_OPERATOR_SECRETS": "pgsched-database",
            "PGSCHED_JOB_SERVICE_ACCOUNTS": "default, reports",
        }
    )
    policy = settings.jobs.policy
    assert (policy.operator_namespace, policy.operator_secrets) == (
        "pgsched",
        ("pgsched-database",),
    )
    assert policy.service_accounts == ("default", "reports")
    assert policy.secrets == ("*",) and not policy.allow_operator_namespace
