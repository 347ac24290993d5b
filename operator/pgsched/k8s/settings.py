"""Operator settings, read from the environment (and flags), validated at start-up.

Every setting has an environment variable (what the Helm chart sets) and a default; a bad
value stops the operator with a message naming the variable and a valid example.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pgsched.engine.tick import SettingsError, TickSettings
from pgsched.k8s.jobs import JobSettings


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
    pool_size: int = 4

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> OperatorSettings:
        env = os.environ if environ is None else environ
        problems: list[str] = []

        def text(name: str, default: str | None = None) -> str:
            value = env.get(name, default)
            if not value:
                problems.append(f"{name} is required")
                return ""
            return value

        def number(name: str, default: float, minimum: float, example: str) -> float:
            raw = env.get(name)
            if raw is None or raw == "":
                return default
            try:
                value = float(raw)
            except ValueError:
                problems.append(f"{name}={raw!r} is not a number (example: {name}={example})")
                return default
            if value < minimum:
                problems.append(
                    f"{name}={raw} must be at least {minimum:g} (example: {name}={example})"
                )
            return value

        namespaces = tuple(
            part.strip() for part in env.get("PGSCHED_NAMESPACES", "").split(",") if part.strip()
        )
        all_namespaces = env.get("PGSCHED_ALL_NAMESPACES", "false").lower() in {"1", "true", "yes"}
        if not namespaces and not all_namespaces:
            problems.append(
                "PGSCHED_NAMESPACES is empty and PGSCHED_ALL_NAMESPACES is not true: say which"
                " namespaces to watch (example: PGSCHED_NAMESPACES=jobs,reports)"
            )
        if namespaces and all_namespaces:
            problems.append("set PGSCHED_NAMESPACES or PGSCHED_ALL_NAMESPACES=true, not both")
        try:
            tick = TickSettings(
                interval_seconds=number("PGSCHED_TICK_INTERVAL_SECONDS", 1.0, 0.05, "1"),
                dispatch_batch=int(number("PGSCHED_DISPATCH_BATCH", 50, 1, "50")),
                lock_name=env.get("PGSCHED_LEADER_LOCK", "pgsched:tick-leader"),
            )
        except SettingsError as error:
            problems.append(str(error))
            tick = TickSettings()
        settings = cls(
            dsn=text("PGSCHED_DSN"),
            namespaces=namespaces,
            all_namespaces=all_namespaces,
            jobs=JobSettings(
                image=text("PGSCHED_IMAGE"),
                image_pull_policy=env.get("PGSCHED_IMAGE_PULL_POLICY", "IfNotPresent"),
                dsn_secret=env.get("PGSCHED_JOB_DSN_SECRET", "pgsched-job-dsn"),
                dsn_secret_key=env.get("PGSCHED_JOB_DSN_SECRET_KEY", "dsn"),
            ),
            tick=tick,
            api_qps=number("PGSCHED_API_QPS", 20.0, 0.1, "20"),
            api_burst=int(number("PGSCHED_API_BURST", 40, 1, "40")),
            publish_interval_seconds=number("PGSCHED_PUBLISH_INTERVAL_SECONDS", 0.5, 0.05, "0.5"),
            resync_interval_seconds=number("PGSCHED_RESYNC_INTERVAL_SECONDS", 30.0, 1, "30"),
            gauge_interval_seconds=number("PGSCHED_GAUGE_INTERVAL_SECONDS", 5.0, 0.5, "5"),
            verdict_interval_seconds=number("PGSCHED_VERDICT_INTERVAL_SECONDS", 2.0, 0.1, "2"),
            health_bind=env.get("PGSCHED_HEALTH_BIND", "0.0.0.0:8080"),
            metrics_bind=env.get("PGSCHED_METRICS_BIND", "0.0.0.0:9090"),
            pool_size=int(number("PGSCHED_DB_POOL_SIZE", 4, 2, "4")),
        )
        if settings.jobs.image_pull_policy not in {"Always", "IfNotPresent", "Never"}:
            problems.append(
                f"PGSCHED_IMAGE_PULL_POLICY={settings.jobs.image_pull_policy!r} must be Always,"
                " IfNotPresent or Never"
            )
        for name in ("PGSCHED_HEALTH_BIND", "PGSCHED_METRICS_BIND"):
            value = env.get(name)
            if value and not _is_bind(value):
                problems.append(
                    f"{name}={value!r} must be host:port (example: {name}=0.0.0.0:8080)"
                )
        if problems:
            raise SettingsError("invalid operator settings:\n  " + "\n  ".join(problems))
        return settings


def _is_bind(value: str) -> bool:
    host, _, port = value.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) < 65536
