"""Operator settings, read from the environment (and flags), validated at start-up.

Every setting has an environment variable (what the Helm chart sets) and a default, stated
once, as the dataclass field's; a bad value stops the operator with every problem listed
(``validation``), each naming the variable, what is wrong and a valid example.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from pgsched import names
from pgsched.db import dsn as dsn_source
from pgsched.engine.tick import TickSettings
from pgsched.k8s.jobside.jobpolicy import JobPolicy
from pgsched.k8s.jobside.jobs import JobSettings
from pgsched.validation import Problems, SettingsError


@dataclass(frozen=True)
class WebhookSettings:
    """The validating admission webhook (``k8s.serve.webhook``, docs/admission.md)."""

    # host:port of its HTTPS server; empty: no webhook.
    bind: str = ""
    # A folder with tls.crt, tls.key and (optionally) ca.crt: a mounted TLS Secret.
    cert_dir: str = ""
    # The ValidatingWebhookConfiguration kopf creates and keeps pointing at the server;
    # empty: someone else writes it (the Helm chart does).
    configuration: str = ""


@dataclass(frozen=True)
class OperatorSettings:
    dsn: str
    namespaces: tuple[str, ...]
    all_namespaces: bool
    jobs: JobSettings
    tick: TickSettings
    api_qps: float = 20.0
    api_burst: int = 40
    publish_interval_seconds: float = 0.5
    resync_interval_seconds: float = 30.0
    gauge_interval_seconds: float = 5.0
    verdict_interval_seconds: float = 2.0
    health_bind: str = "0.0.0.0:8080"
    metrics_bind: str = "0.0.0.0:9090"
    # The web UI's address; empty: no UI (see pgsched.ui and docs/ui.md).
    ui_bind: str = ""
    # The audience visitors' tokens must be issued for; None: the API server's own
    # (PGSCHED_UI_API_SERVER_TOKENS=true, an explicit opt-in).
    ui_audience: str | None = names.UI_AUDIENCE
    # PEM files of the UI's TLS listener; empty: plain HTTP.
    ui_tls_cert_file: str = ""
    ui_tls_key_file: str = ""
    # When the UI's session cookie is Secure (names.UI_COOKIE_SECURE).
    ui_cookie_secure: str = "auto"
    pool_size: int = 4
    # How long run history is kept (engine/history.py); None: forever.
    history_retention: timedelta | None = None
    webhook: WebhookSettings = WebhookSettings()

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> OperatorSettings:
        env = os.environ if environ is None else environ
        problems = Problems()

        def text(name: str) -> str:
            value = env.get(name)
            if not value:
                problems.add(name, "is required")
                return ""
            return value

        def number(name: str, default: float, minimum: float, example: str) -> float:
            raw = env.get(name)
            if raw is None or raw == "":
                return default
            try:
                value = float(raw)
            except ValueError:
                problems.add(name, f"{raw!r} is not a number", f"{name}={example}")
                return default
            if value < minimum:
                problems.add(name, f"{raw} must be at least {minimum:g}", f"{name}={example}")
            return value

        def name_list(name: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
            if name not in env:
                return default
            return tuple(part.strip() for part in env[name].split(",") if part.strip())

        try:
            dsn = dsn_source.from_environment(env)
        except SettingsError as error:
            problems.extend(error)
            dsn = ""
        namespaces = name_list("PGSCHED_NAMESPACES")
        all_namespaces = _true(env.get("PGSCHED_ALL_NAMESPACES", "false"))
        if not namespaces and not all_namespaces:
            problems.add(
                "PGSCHED_NAMESPACES",
                "is empty and PGSCHED_ALL_NAMESPACES is not true: say which namespaces to watch",
                "PGSCHED_NAMESPACES=jobs,reports",
            )
        if namespaces and all_namespaces:
            problems.add("PGSCHED_NAMESPACES", "set it or PGSCHED_ALL_NAMESPACES=true, not both")
        # Each default is the dataclass field's (TickSettings, JobSettings, this class).
        try:
            tick = TickSettings(
                interval_seconds=number(
                    "PGSCHED_TICK_INTERVAL_SECONDS", TickSettings.interval_seconds, 0.05, "1"
                ),
                dispatch_batch=int(
                    number("PGSCHED_DISPATCH_BATCH", TickSettings.dispatch_batch, 1, "50")
                ),
                lock_name=env.get("PGSCHED_LEADER_LOCK", TickSettings.lock_name),
            )
        except SettingsError as error:
            for found in error.errors:  # name the variable, not the field
                name = _TICK_VARIABLES.get(found.path, found.path)
                problems.add(name, found.message, f"{name}={found.example}")
            tick = TickSettings()
        settings = cls(
            dsn=dsn,
            namespaces=namespaces,
            all_namespaces=all_namespaces,
            jobs=JobSettings(
                image=text("PGSCHED_IMAGE"),
                image_pull_policy=env.get(
                    "PGSCHED_IMAGE_PULL_POLICY", JobSettings.image_pull_policy
                ),
                dsn_secret=env.get("PGSCHED_JOB_DSN_SECRET", JobSettings.dsn_secret),
                dsn_secret_key=env.get("PGSCHED_JOB_DSN_SECRET_KEY", JobSettings.dsn_secret_key),
                policy=JobPolicy(
                    operator_namespace=env.get("PGSCHED_OPERATOR_NAMESPACE", ""),
                    operator_service_account=env.get("PGSCHED_OPERATOR_SERVICE_ACCOUNT", ""),
                    operator_secrets=name_list("PGSCHED_OPERATOR_SECRETS"),
                    allow_operator_namespace=_true(
                        env.get("PGSCHED_ALLOW_OPERATOR_NAMESPACE", "false")
                    ),
                    service_accounts=name_list(
                        "PGSCHED_JOB_SERVICE_ACCOUNTS", JobPolicy.service_accounts
                    ),
                    secrets=name_list("PGSCHED_JOB_SECRETS", JobPolicy.secrets),
                ),
            ),
            tick=tick,
            api_qps=number("PGSCHED_API_QPS", cls.api_qps, 0.1, "20"),
            api_burst=int(number("PGSCHED_API_BURST", cls.api_burst, 1, "40")),
            publish_interval_seconds=number(
                "PGSCHED_PUBLISH_INTERVAL_SECONDS", cls.publish_interval_seconds, 0.05, "0.5"
            ),
            resync_interval_seconds=number(
                "PGSCHED_RESYNC_INTERVAL_SECONDS", cls.resync_interval_seconds, 1, "30"
            ),
            gauge_interval_seconds=number(
                "PGSCHED_GAUGE_INTERVAL_SECONDS", cls.gauge_interval_seconds, 0.5, "5"
            ),
            verdict_interval_seconds=number(
                "PGSCHED_VERDICT_INTERVAL_SECONDS", cls.verdict_interval_seconds, 0.1, "2"
            ),
            health_bind=env.get("PGSCHED_HEALTH_BIND", cls.health_bind),
            metrics_bind=env.get("PGSCHED_METRICS_BIND", cls.metrics_bind),
            ui_bind=env.get("PGSCHED_UI_BIND", cls.ui_bind),
            ui_audience=None
            if _true(env.get("PGSCHED_UI_API_SERVER_TOKENS", "false"))
            else env.get("PGSCHED_UI_AUDIENCE") or cls.ui_audience,
            ui_tls_cert_file=env.get("PGSCHED_UI_TLS_CERT_FILE", cls.ui_tls_cert_file),
            ui_tls_key_file=env.get("PGSCHED_UI_TLS_KEY_FILE", cls.ui_tls_key_file),
            ui_cookie_secure=env.get("PGSCHED_UI_COOKIE_SECURE", cls.ui_cookie_secure),
            pool_size=int(number("PGSCHED_DB_POOL_SIZE", cls.pool_size, 2, "4")),
            history_retention=_retention(env.get("PGSCHED_HISTORY_RETENTION", ""), problems),
            webhook=WebhookSettings(
                bind=env.get("PGSCHED_WEBHOOK_BIND", WebhookSettings.bind),
                cert_dir=env.get("PGSCHED_WEBHOOK_CERT_DIR", WebhookSettings.cert_dir),
                configuration=env.get(
                    "PGSCHED_WEBHOOK_CONFIGURATION", WebhookSettings.configuration
                ),
            ),
        )
        if settings.jobs.image_pull_policy not in {"Always", "IfNotPresent", "Never"}:
            problems.add(
                "PGSCHED_IMAGE_PULL_POLICY",
                f"{settings.jobs.image_pull_policy!r} must be Always, IfNotPresent or Never",
                "PGSCHED_IMAGE_PULL_POLICY=IfNotPresent",
            )
        if settings.ui_cookie_secure not in names.UI_COOKIE_SECURE:
            problems.add(
                "PGSCHED_UI_COOKIE_SECURE",
                f"{settings.ui_cookie_secure!r} must be one of {', '.join(names.UI_COOKIE_SECURE)}",
                "PGSCHED_UI_COOKIE_SECURE=auto",
            )
        if bool(settings.ui_tls_cert_file) != bool(settings.ui_tls_key_file):
            problems.add(
                "PGSCHED_UI_TLS_CERT_FILE",
                "and PGSCHED_UI_TLS_KEY_FILE must be set together (or neither)",
                "PGSCHED_UI_TLS_CERT_FILE=/tls/tls.crt PGSCHED_UI_TLS_KEY_FILE=/tls/tls.key",
            )
        if settings.webhook.bind and not settings.webhook.cert_dir:
            problems.add(
                "PGSCHED_WEBHOOK_CERT_DIR",
                "is required with PGSCHED_WEBHOOK_BIND: the folder of the webhook's TLS Secret",
                "PGSCHED_WEBHOOK_CERT_DIR=/etc/pgsched/webhook",
            )
        for name in (
            "PGSCHED_HEALTH_BIND",
            "PGSCHED_METRICS_BIND",
            "PGSCHED_UI_BIND",
            "PGSCHED_WEBHOOK_BIND",
        ):
            value = env.get(name)
            if value and not _is_bind(value):
                problems.add(name, f"{value!r} must be host:port", f"{name}=0.0.0.0:8080")
        problems.raise_if_any(SettingsError, title="invalid operator settings:")
        return settings


# The tick settings the environment sets, by field (to name the variable in a message).
_TICK_VARIABLES = {
    "interval_seconds": "PGSCHED_TICK_INTERVAL_SECONDS",
    "dispatch_batch": "PGSCHED_DISPATCH_BATCH",
    "lock_name": "PGSCHED_LEADER_LOCK",
}


def _true(value: str) -> bool:
    return value.lower() in {"1", "true", "yes"}


def _is_bind(value: str) -> bool:
    host, _, port = value.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) < 65536


_RETENTION = re.compile(r"(\d+)([dh])")


def _retention(raw: str, problems: Problems) -> timedelta | None:
    """``90d`` or ``36h``; empty keeps history forever."""
    if not raw.strip():
        return None
    found = _RETENTION.fullmatch(raw.strip())
    if not found or int(found.group(1)) == 0:
        problems.add(
            "PGSCHED_HISTORY_RETENTION",
            f"{raw!r} must be a positive number of days or hours (or empty: keep forever)",
            "PGSCHED_HISTORY_RETENTION=90d",
        )
        return None
    count = int(found.group(1))
    return timedelta(days=count) if found.group(2) == "d" else timedelta(hours=count)
