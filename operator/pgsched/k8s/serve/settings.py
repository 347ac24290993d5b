"""Operator settings, read from the environment (and flags), validated at start-up.

Every variable ``pgsched operator`` reads is a row of :data:`VARIABLES`: its name, the
setting it fills (a dotted path into :class:`OperatorSettings`), how its text is read, and
what it means. The default is the setting's dataclass field's, stated once there, and
docs/configuration.md's table of variables is generated from these rows
(``hack/docs/reference.py``), so the code and the reference cannot disagree. A reader
checks one value (a number and its minimum, a choice, ``host:port``); what involves two
variables (the namespaces, the UI's TLS pair, the webhook's certificate) is checked after
them, and a bad value stops the operator with every problem listed (``validation``), each
naming the variable, what is wrong and a valid example.

Four rows are read elsewhere and listed for the reference: the connection string
(``db.dsn``, which every command shares) and the log settings (``cli.main``, for every
command). Two files are read with the variables, once: the connection string's
(``db.dsn``) and the run API's CA (``run_api_ca``), which every Job carries to its pods.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pgsched import names
from pgsched.db import dsn as dsn_source
from pgsched.engine.tick import TickSettings
from pgsched.k8s.jobside.jobpolicy import JobPolicy
from pgsched.k8s.jobside.jobs import JobSettings
from pgsched.k8s.notifications import destinations
from pgsched.k8s.serve import run_api_ca
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
    # The CA bundle whose client certificates alone may call the webhook (the API
    # server's, docs/admission.md); empty: any caller that reaches the port.
    client_ca_file: str = ""


@dataclass(frozen=True)
class RunApiSettings:
    """The run API job pods talk to (``pgsched.runapi``, docs/run-api.md)."""

    # host:port of its HTTPS server.
    bind: str = "0.0.0.0:8443"
    # A folder with tls.crt, tls.key and ca.crt: a mounted TLS Secret. Pods are given
    # ca.crt (PGSCHED_RUN_API_CA) to trust.
    cert_dir: str = ""
    # The address pods are given (PGSCHED_RUN_API_URL): the Service in front of every
    # replica's server.
    url: str = ""
    # Per namespace (I14): requests a second and bursts, database calls in flight, open
    # long polls.
    namespace_rate: float = 200.0
    namespace_burst: int = 400
    namespace_concurrency: int = 2
    namespace_waiters: int = 2000
    # Database connections of the run API (its own pool, beside the watches').
    pool_size: int = 4


@dataclass(frozen=True)
class RunsApiSettings:
    """The Run API: runs as Kubernetes objects through the aggregation layer
    (``k8s.runs_api``, docs/runs-api.md)."""

    # host:port of its HTTPS server; empty: not served.
    bind: str = ""
    # A folder with tls.crt and tls.key: a mounted TLS Secret (the APIService's caBundle
    # is its CA).
    cert_dir: str = ""
    # Database connections of the Run API (its own pool).
    pool_size: int = 2
    # How long an access review's answer is kept (a revoked RoleBinding bites after it).
    access_ttl_seconds: float = 10.0


@dataclass(frozen=True)
class NotifySettings:
    """The notifier's workers, shared by every namespace, and what one may take of them."""

    workers: int = 8
    namespace_concurrency: int = 2
    address_concurrency: int = 2
    # One delivery attempt, whole: name resolution, connect, TLS, request and answer.
    deadline_seconds: float = 10.0


@dataclass(frozen=True)
class OperatorSettings:
    dsn: str
    jobs: JobSettings
    tick: TickSettings
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False
    # Namespaces served by their labels (``key=value,...``); empty: by the list above.
    namespace_selector: str = ""
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
    # Notification destinations allowed beside public addresses: CIDRs and host names
    # (k8s/notifications/destinations.py).
    notify_allow: tuple[str, ...] = ()
    # The notifier's shared workers and their bulkheads (I14, k8s/notifications/notifier.py).
    notify: NotifySettings = NotifySettings()
    webhook: WebhookSettings = WebhookSettings()
    run_api: RunApiSettings = RunApiSettings()
    runs_api: RunsApiSettings = RunsApiSettings()

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> OperatorSettings:
        """The settings ``environ`` (by default the process's) gives: each variable of
        :data:`VARIABLES` read into its setting; ``SettingsError`` listing every problem."""
        env = os.environ if environ is None else environ
        problems = Problems()
        try:
            dsn = dsn_source.from_environment(env)
        except SettingsError as error:
            problems.extend(error)
            dsn = ""
        values = {
            variable.name: variable.read(
                variable.name, env.get(variable.name), variable.default, problems
            )
            for variable in VARIABLES
            if variable.read is not None
        }
        _check_together(values, problems)
        chosen = {  # by setting: "tick.interval_seconds" -> 0.5
            variable.setting: values[variable.name] for variable in VARIABLES if variable.setting
        }
        if values["PGSCHED_UI_API_SERVER_TOKENS"]:
            chosen["ui_audience"] = None
        try:
            tick = TickSettings(**_section(chosen, "tick"))
        except SettingsError as error:
            for found in error.errors:  # name the variable, not the field
                name = _VARIABLE_OF.get(f"tick.{found.path}", found.path)
                problems.add(name, found.message, f"{name}={found.example}")
            tick = TickSettings()
        policy = JobPolicy(**_section(chosen, "jobs.policy"))
        cert_dir = values["PGSCHED_RUN_API_CERT_DIR"]
        jobs = JobSettings(
            **_section(chosen, "jobs"),
            run_api_url=values["PGSCHED_RUN_API_URL"],
            run_api_ca=run_api_ca.read(cert_dir, problems) if cert_dir else "",
            policy=policy,
        )
        settings = cls(
            dsn=dsn,
            jobs=jobs,
            tick=tick,
            webhook=WebhookSettings(**_section(chosen, "webhook")),
            run_api=RunApiSettings(**_section(chosen, "run_api")),
            runs_api=RunsApiSettings(**_section(chosen, "runs_api")),
            notify=NotifySettings(**_section(chosen, "notify")),
            **_section(chosen, ""),
        )
        problems.raise_if_any(SettingsError, title="invalid operator settings:")
        return settings


# -- How a variable's text is read --------------------------------------------------------
#
# A reader gets the variable's name, its text (None: unset), the setting's default and the
# problems found so far; it returns the value, adding a problem (and returning its best
# guess) when the text is wrong.
Reader = Callable[[str, str | None, Any, Problems], Any]
# The default of a setting that has none: the variable must be set.
REQUIRED = object()


def text(name: str, raw: str | None, default: Any, problems: Problems) -> Any:
    """As given (set but empty: empty); unset: the default, or a problem if required."""
    if default is REQUIRED:
        if not raw:
            problems.add(name, "is required")
            return ""
        return raw
    return default if raw is None else raw


def text_or_default(name: str, raw: str | None, default: Any, problems: Problems) -> Any:
    """As given; unset or empty: the default."""
    return raw or default


def flag(name: str, raw: str | None, default: Any, problems: Problems) -> Any:
    """``true``, ``yes`` or ``1`` (any case); anything else set is false."""
    return default if raw is None else raw.lower() in {"1", "true", "yes"}


def name_list(name: str, raw: str | None, default: Any, problems: Problems) -> Any:
    """Comma-separated names, blanks dropped; set but empty: none."""
    if raw is None:
        return default
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def number(*, minimum: float, integer: bool = False) -> Reader:
    """A number of at least ``minimum`` (truncated to an integer with ``integer``);
    unset or empty: the default, which is also the example a message gives."""

    def read(name: str, raw: str | None, default: Any, problems: Problems) -> Any:
        if raw is None or raw == "":
            return default
        example = f"{name}={default:g}"
        try:
            value = float(raw)
        except ValueError:
            problems.add(name, f"{raw!r} is not a number", example)
            return default
        if value < minimum:
            problems.add(name, f"{raw} must be at least {minimum:g}", example)
        return int(value) if integer else value

    return read


def choice(allowed: tuple[str, ...], *, said: str) -> Reader:
    """One of ``allowed`` (``said`` is how a message lists them); unset: the default."""

    def read(name: str, raw: str | None, default: Any, problems: Problems) -> Any:
        value = default if raw is None else raw
        if value not in allowed:
            problems.add(name, f"{value!r} must be {said}", f"{name}={default}")
        return value

    return read


def bind(name: str, raw: str | None, default: Any, problems: Problems) -> Any:
    """``host:port``; unset: the default; empty: none (the server is off)."""
    if raw and not _is_bind(raw):
        problems.add(name, f"{raw!r} must be host:port", f"{name}=0.0.0.0:8080")
    return default if raw is None else raw


def retention(name: str, raw: str | None, default: Any, problems: Problems) -> Any:
    """``90d`` or ``36h``; unset or empty: forever (None)."""
    if raw is None or not raw.strip():
        return default
    found = _RETENTION.fullmatch(raw.strip())
    if not found or int(found.group(1)) == 0:
        problems.add(
            name,
            f"{raw!r} must be a positive number of days or hours (or empty: keep forever)",
            f"{name}=90d",
        )
        return default
    count = int(found.group(1))
    return timedelta(days=count) if found.group(2) == "d" else timedelta(hours=count)


_RETENTION = re.compile(r"(\d+)([dh])")


def destination_list(name: str, raw: str | None, default: Any, problems: Problems) -> Any:
    """Comma-separated CIDRs and host names; each checked (destinations.Allowed)."""
    entries = name_list(name, raw, default, problems)
    try:
        destinations.Allowed.parse(entries)
    except ValueError as error:
        problems.add(name, str(error), f"{name}=10.0.0.0/8,.tools.svc.cluster.local")
        return default
    return entries


def label_selector(name: str, raw: str | None, default: Any, problems: Problems) -> Any:
    """``key=value`` pairs, comma-separated (a namespace must carry all of them), each a
    Kubernetes label key and value; normalized to ``key=value,...``; unset or empty: none."""
    if raw is None or not raw.strip():
        return default
    pairs = []
    for part in raw.split(","):
        key, equals, value = (item.strip() for item in part.strip().partition("="))
        if not equals or not _LABEL_KEY.fullmatch(key) or not _LABEL_VALUE.fullmatch(value):
            problems.add(
                name,
                f"{part.strip()!r} is not a label key=value (a key of letters, digits, '-',"
                " '_', '.', with an optional DNS prefix and '/'; a value of at most 63 of"
                " the same, no '/')",
                f"{name}=pgsched.dev/serve=true",
            )
            return default
        pairs.append(f"{key}={value}")
    return ",".join(pairs)


_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}")
_LABEL_VALUE = re.compile(rf"({_LABEL_NAME})?")


def _is_bind(value: str) -> bool:
    host, _, port = value.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) < 65536


# -- The variables ------------------------------------------------------------------------

# Where a setting's default is stated: the dataclass of each section of the settings.
_SECTIONS: dict[str, type] = {
    "": OperatorSettings,
    "jobs": JobSettings,
    "jobs.policy": JobPolicy,
    "tick": TickSettings,
    "webhook": WebhookSettings,
    "run_api": RunApiSettings,
    "runs_api": RunsApiSettings,
    "notify": NotifySettings,
}


@dataclass(frozen=True, kw_only=True)
class Variable:
    """One environment variable of the operator, a row of docs/configuration.md's table."""

    name: str = field(kw_only=False)
    # The setting it fills: a dotted path into OperatorSettings ("tick.interval_seconds");
    # None for a variable that is read elsewhere or only changes another setting.
    setting: str | None
    # How its text is read; None: read elsewhere (then ``default`` is given here).
    read: Reader | None
    meaning: str
    given_default: Any = None
    # The default cell of the docs' table, where it is not the default itself: empty for a
    # variable that is simply unset (a list of none, no namespace), not an empty string.
    shown: str | None = None

    @property
    def default(self) -> Any:
        """The setting's dataclass field's default (:data:`REQUIRED` if it has none)."""
        if self.setting is None:
            return self.given_default
        section, _, attribute = self.setting.rpartition(".")
        return getattr(_SECTIONS[section], attribute, REQUIRED)

    @property
    def shown_default(self) -> str:
        """The default as docs/configuration.md shows it."""
        if self.shown is not None:
            return self.shown
        value = self.default
        if value is REQUIRED:
            return "required"
        if isinstance(value, bool):
            value = str(value).lower()
        elif isinstance(value, float):
            value = f"{value:g}"
        elif isinstance(value, tuple):
            value = ",".join(value)
        return f"`{'' if value is None else value}`"


# In the order of docs/configuration.md's table.
VARIABLES: tuple[Variable, ...] = (
    # read by db.dsn
    Variable(
        "PGSCHED_DSN",
        setting=None,
        read=None,
        meaning=(
            "libpq connection string of the scheduling database, e.g. `host=db user=pgsched "
            "dbname=pgsched`, unless `PGSCHED_DSN_FILE` is set (this one wins when both "
            "are). Must be a direct connection or a session-mode pooler (see "
            "[operations](operations.md#poolers))."
        ),
        given_default=REQUIRED,
    ),
    # read by db.dsn
    Variable(
        "PGSCHED_DSN_FILE",
        setting=None,
        read=None,
        meaning=(
            "Path of a file holding that connection string (surrounding whitespace ignored), "
            "read once at start-up by the operator, `pgsched migrate` and the other commands "
            "that connect through `--dsn` (not yet `pgsched doctor` and `pgsched ui`, which "
            "need `--dsn` or `PGSCHED_DSN`): how the chart passes it (the database Secret "
            "mounted at `/etc/pgsched/database/dsn`), so it is in no environment variable. A "
            "missing, unreadable or empty file stops the program with a message naming the "
            "variable and the path."
        ),
        given_default="",
        shown="",
    ),
    Variable(
        "PGSCHED_NAMESPACES",
        setting="namespaces",
        read=name_list,
        meaning=(
            "Comma-separated namespaces whose ScheduledJobs this operator watches, e.g. "
            "`jobs,reports`. One of this, `PGSCHED_ALL_NAMESPACES` and"
            " `PGSCHED_NAMESPACE_SELECTOR` is required."
        ),
        shown="",
    ),
    Variable(
        "PGSCHED_ALL_NAMESPACES",
        setting="all_namespaces",
        read=flag,
        meaning="`true` to watch ScheduledJobs in every namespace (needs cluster-wide RBAC).",
    ),
    Variable(
        "PGSCHED_NAMESPACE_SELECTOR",
        setting="namespace_selector",
        read=label_selector,
        meaning=(
            "Serve the namespaces that carry these labels, e.g. `pgsched.dev/serve=true`"
            " (`key=value`, comma-separated: all of them): a namespace labelled later is"
            " served within seconds, without a restart (needs cluster-wide RBAC; docs/"
            "namespaces.md). Instead of `PGSCHED_NAMESPACES` and `PGSCHED_ALL_NAMESPACES`."
        ),
        shown="",
    ),
    Variable(
        "PGSCHED_IMAGE",
        setting="jobs.image",
        read=text,
        meaning=(
            "The pgsched image injected as the heartbeat sidecar of every Job (and used by "
            "SDK job pods)."
        ),
    ),
    Variable(
        "PGSCHED_IMAGE_PULL_POLICY",
        setting="jobs.image_pull_policy",
        read=choice(("Always", "IfNotPresent", "Never"), said="Always, IfNotPresent or Never"),
        meaning="Pull policy of that sidecar: `Always`, `IfNotPresent` or `Never`.",
    ),
    Variable(
        "PGSCHED_OPERATOR_NAMESPACE",
        setting="jobs.policy.operator_namespace",
        read=text,
        meaning=(
            "The namespace the operator runs in (the chart: the release namespace); empty "
            "when it runs outside the cluster. ScheduledJobs there are refused "
            "(`Ready=False`, `InvalidSpec`, naming `metadata.namespace`) unless "
            "`PGSCHED_ALLOW_OPERATOR_NAMESPACE` (see [security-chart](security-chart.md))."
        ),
        shown="",
    ),
    Variable(
        "PGSCHED_ALLOW_OPERATOR_NAMESPACE",
        setting="jobs.policy.allow_operator_namespace",
        read=flag,
        meaning=(
            "`true` lets jobs run in the operator's namespace; its ServiceAccount and "
            "Secrets stay forbidden to them there."
        ),
    ),
    Variable(
        "PGSCHED_OPERATOR_SERVICE_ACCOUNT",
        setting="jobs.policy.operator_service_account",
        read=text,
        meaning=(
            "The operator's ServiceAccount, which no jobTemplate may name in the operator's "
            "namespace."
        ),
        shown="",
    ),
    Variable(
        "PGSCHED_OPERATOR_SECRETS",
        setting="jobs.policy.operator_secrets",
        read=name_list,
        meaning=(
            "Comma-separated Secrets of the operator (its database Secret), which no "
            "jobTemplate may name in the operator's namespace."
        ),
        shown="",
    ),
    Variable(
        "PGSCHED_JOB_SERVICE_ACCOUNTS",
        setting="jobs.policy.service_accounts",
        read=name_list,
        meaning=(
            "Comma-separated ServiceAccounts a jobTemplate may run as, in every namespace "
            "(`*`: any); a namespace's `pgsched.dev/allowed-service-accounts` annotation "
            "narrows it further."
        ),
    ),
    Variable(
        "PGSCHED_JOB_SECRETS",
        setting="jobs.policy.secrets",
        read=name_list,
        meaning=(
            "Comma-separated Secrets a jobTemplate may name (volumes, projected sources, "
            "`env` `secretKeyRef`, `envFrom` `secretRef`, `imagePullSecrets`; `*`: any); a "
            "namespace's `pgsched.dev/allowed-secrets` annotation narrows it further. "
            "Per-run lease Secrets (`*-lease`) are never allowed."
        ),
    ),
    Variable(
        "PGSCHED_TICK_INTERVAL_SECONDS",
        setting="tick.interval_seconds",
        read=number(minimum=0.05),
        meaning=(
            "How often every replica tries to lead a tick (0.05..3600). Ticks start ~20 ms "
            "after each whole multiple of it on the database clock, so runs due on a whole "
            "second start within milliseconds; also the scheduling resolution."
        ),
    ),
    Variable(
        "PGSCHED_DISPATCH_BATCH",
        setting="tick.dispatch_batch",
        read=number(minimum=1, integer=True),
        meaning=(
            "Runs claimed per tick at most (1..10000); a full batch makes the next tick "
            "start at once."
        ),
    ),
    Variable(
        "PGSCHED_LEADER_LOCK",
        setting="tick.lock_name",
        read=text,
        meaning=(
            "Name of the advisory lock the tick leader holds. Two pgsched installations "
            "sharing one database need different names."
        ),
    ),
    Variable(
        "PGSCHED_API_QPS",
        setting="api_qps",
        read=number(minimum=0.1),
        meaning=(
            "Client-side rate limit of pgsched's own Kubernetes API calls (requests per "
            "second). Creating Jobs comes first: Events, status patches, cleanup and lease "
            "Secret hand-overs use the tokens launching leaves over (above half the burst, "
            "which stays for Jobs), and while launching keeps the bucket empty they still "
            "get 1/40 of the rate, so in a burst of due runs they lag behind the Jobs but "
            "keep moving."
        ),
    ),
    Variable(
        "PGSCHED_API_BURST",
        setting="api_burst",
        read=number(minimum=1, integer=True),
        meaning="Burst above that rate. 429 answers are additionally honoured with Retry-After.",
    ),
    Variable(
        "PGSCHED_PUBLISH_INTERVAL_SECONDS",
        setting="publish_interval_seconds",
        read=number(minimum=0.05),
        meaning="How often the publisher turns run status changes into Events and status patches.",
    ),
    Variable(
        "PGSCHED_RESYNC_INTERVAL_SECONDS",
        setting="resync_interval_seconds",
        read=number(minimum=1),
        meaning=(
            "How often one replica compares RUNNING runs with their Jobs, to record outcomes "
            "the Job watch missed (e.g. while the operator was down)."
        ),
    ),
    Variable(
        "PGSCHED_GAUGE_INTERVAL_SECONDS",
        setting="gauge_interval_seconds",
        read=number(minimum=0.5),
        meaning=(
            "How often every replica reads the gauges from the database: queue depth, "
            "failure streaks, automatic suspensions (at least 0.5)."
        ),
    ),
    Variable(
        "PGSCHED_HISTORY_RETENTION",
        setting="history_retention",
        read=retention,
        meaning=(
            "How long run history is kept, e.g. `90d` or `36h`; empty keeps it forever. "
            "Whole months of runs (one partition each) that ended longer ago are dropped, "
            "never deleted row by row; a month still holding a QUEUED, RUNNING or unsettled "
            "run is kept until it has none (see "
            "[operations](operations.md#run-history-partitions-and-retention))."
        ),
    ),
    Variable(
        "PGSCHED_VERDICT_INTERVAL_SECONDS",
        setting="verdict_interval_seconds",
        read=number(minimum=0.1),
        meaning=(
            "How often the API is asked for the verdicts of silent container runs (their "
            "Job's outcome, see [operations](operations.md)); a verdict is late by at most "
            "this (at least 0.1). The same interval paces the check for a new WAL timeline "
            "after a failover, whose runs from before it are then compared with their Jobs "
            "(see [operations](operations.md#what-a-failover-can-lose))."
        ),
    ),
    Variable(
        "PGSCHED_HEALTH_BIND",
        setting="health_bind",
        read=bind,
        meaning=(
            "Address of the liveness endpoint `/healthz` (fails when a thread died or no "
            "tick finished for max(60 s, 20 ticks))."
        ),
    ),
    Variable(
        "PGSCHED_METRICS_BIND",
        setting="metrics_bind",
        read=bind,
        meaning="Address of the Prometheus endpoint `/metrics` (see [monitoring](monitoring.md)).",
    ),
    Variable(
        "PGSCHED_UI_BIND",
        setting="ui_bind",
        read=bind,
        meaning=(
            "Address of the read-only [web UI](ui.md) (e.g. `0.0.0.0:8090`; the chart binds "
            "every address of the pod, so that `kubectl port-forward` reaches it); empty: no "
            "UI. Visitors sign in with a Kubernetes token for `PGSCHED_UI_AUDIENCE` and see "
            "only namespaces where they may `get scheduledjobs`."
        ),
    ),
    Variable(
        "PGSCHED_UI_AUDIENCE",
        setting="ui_audience",
        read=text_or_default,
        meaning=(
            "The audience visitors' tokens must be issued for (`kubectl create token NAME "
            "--audience pgsched-ui`): such a token is worthless against the API server. "
            "Empty: the default."
        ),
    ),
    # Fills no setting of its own: when true, ui_audience is None (from_environment).
    Variable(
        "PGSCHED_UI_API_SERVER_TOKENS",
        setting=None,
        read=flag,
        meaning=(
            "`true` accepts tokens for the API server's own audience instead of "
            "`PGSCHED_UI_AUDIENCE` (e.g. OIDC tokens); every visitor then hands the UI a "
            "credential valid against the API server."
        ),
        given_default=False,
    ),
    Variable(
        "PGSCHED_UI_TLS_CERT_FILE",
        setting="ui_tls_cert_file",
        read=text,
        meaning=(
            "PEM certificate chain of the UI's TLS listener (with "
            "`PGSCHED_UI_TLS_KEY_FILE`); empty: plain HTTP. Read at start."
        ),
    ),
    Variable(
        "PGSCHED_UI_TLS_KEY_FILE",
        setting="ui_tls_key_file",
        read=text,
        meaning="PEM private key of `PGSCHED_UI_TLS_CERT_FILE`.",
    ),
    Variable(
        "PGSCHED_UI_COOKIE_SECURE",
        setting="ui_cookie_secure",
        read=choice(names.UI_COOKIE_SECURE, said=f"one of {', '.join(names.UI_COOKIE_SECURE)}"),
        meaning=(
            "When the sign-in cookie is `Secure`: `auto` (over TLS — the UI's own listener "
            "or a proxy's `X-Forwarded-Proto: https`; over plain HTTP only on a loopback "
            "address, and sign-in over plain HTTP from elsewhere is refused), `always`, or "
            "`never`."
        ),
    ),
    Variable(
        "PGSCHED_WEBHOOK_BIND",
        setting="webhook.bind",
        read=bind,
        meaning=(
            "Address of the validating [admission webhook](admission.md)'s HTTPS server "
            "(e.g. `0.0.0.0:9443`); empty: no webhook."
        ),
    ),
    Variable(
        "PGSCHED_WEBHOOK_CERT_DIR",
        setting="webhook.cert_dir",
        read=text,
        meaning=(
            "Folder of the webhook's certificate, laid out as a mounted TLS Secret: "
            "`tls.crt`, `tls.key` and `ca.crt` (the CA the API server is told to trust; "
            "without it the certificate is its own). Required with `PGSCHED_WEBHOOK_BIND`."
        ),
    ),
    Variable(
        "PGSCHED_WEBHOOK_CONFIGURATION",
        setting="webhook.configuration",
        read=text,
        meaning=(
            "Name of the ValidatingWebhookConfiguration the operator (kopf) creates and "
            "keeps pointing at its server (`url` of `PGSCHED_WEBHOOK_BIND`): for an operator "
            "outside a cluster. Empty: someone else writes it, as the Helm chart does."
        ),
    ),
    Variable(
        "PGSCHED_WEBHOOK_CLIENT_CA_FILE",
        setting="webhook.client_ca_file",
        read=text,
        meaning=(
            "A PEM CA bundle: the webhook then answers only a caller whose client certificate"
            " it signed — the API server, given one through its admission configuration"
            ' ([admission](admission.md), "Who may call the webhook"). Empty: any caller'
            " that reaches the port."
        ),
    ),
    Variable(
        "PGSCHED_RUN_API_BIND",
        setting="run_api.bind",
        read=bind,
        meaning=(
            "Address of the [run API](run-api.md)'s HTTPS server, which job pods talk to "
            "instead of the database."
        ),
    ),
    Variable(
        "PGSCHED_RUN_API_CERT_DIR",
        setting="run_api.cert_dir",
        read=text,
        meaning=(
            "Folder of the run API's certificate, laid out as a mounted TLS Secret: "
            "`tls.crt`, `tls.key` and `ca.crt` (read once at start and given to every job "
            "pod to trust: a missing or unreadable one, or one without a PEM certificate, "
            "stops the start). Required."
        ),
        shown="required",
    ),
    Variable(
        "PGSCHED_RUN_API_URL",
        setting="run_api.url",
        read=text,
        meaning=(
            "The run API's address as job pods reach it, given to every Job (the chart: its "
            "Service, `https://<fullname>-run-api.<namespace>.svc`, or `runApi.url`). Required."
        ),
        shown="required",
    ),
    Variable(
        "PGSCHED_RUN_API_NAMESPACE_RATE",
        setting="run_api.namespace_rate",
        read=number(minimum=0.1),
        meaning=(
            "Run API requests a second one namespace may make (a token bucket); more are "
            "answered 429. A running run sends about two per `heartbeat.intervalSeconds` "
            "(its beat and its cancel long poll): the default carries 1,000 runs beating "
            "every 10 s."
        ),
    ),
    Variable(
        "PGSCHED_RUN_API_NAMESPACE_BURST",
        setting="run_api.namespace_burst",
        read=number(minimum=1, integer=True),
        meaning="Requests one namespace may make at once above its rate (the bucket's size).",
    ),
    Variable(
        "PGSCHED_RUN_API_NAMESPACE_CONCURRENCY",
        setting="run_api.namespace_concurrency",
        read=number(minimum=1, integer=True),
        meaning=(
            "Database calls the run API makes for one namespace at a time; more queue "
            "up to 2 s, then 429."
        ),
    ),
    Variable(
        "PGSCHED_RUN_API_NAMESPACE_WAITERS",
        setting="run_api.namespace_waiters",
        read=number(minimum=1, integer=True),
        meaning=(
            "Cancel long polls one namespace may keep open (one per running run is "
            "normal); more: 429."
        ),
    ),
    Variable(
        "PGSCHED_RUN_API_POOL_SIZE",
        setting="run_api.pool_size",
        read=number(minimum=1, integer=True),
        meaning=(
            "Database connections of the run API: its own, whatever the number of running pods."
        ),
    ),
    Variable(
        "PGSCHED_RUNS_API_BIND",
        setting="runs_api.bind",
        read=bind,
        meaning=(
            "Address of the [Run API](runs-api.md)'s HTTPS server, which the API server's"
            " aggregation layer proxies `kubectl get runs` to. Empty: not served."
        ),
    ),
    Variable(
        "PGSCHED_RUNS_API_CERT_DIR",
        setting="runs_api.cert_dir",
        read=text,
        meaning=(
            "Folder of the Run API's serving certificate, laid out as a mounted TLS Secret "
            "(`tls.crt`, `tls.key`); the APIService's `caBundle` must hold its CA. Required "
            "with `PGSCHED_RUNS_API_BIND`."
        ),
    ),
    Variable(
        "PGSCHED_RUNS_API_POOL_SIZE",
        setting="runs_api.pool_size",
        read=number(minimum=1, integer=True),
        meaning="Database connections of the Run API (a pool of its own).",
    ),
    Variable(
        "PGSCHED_RUNS_API_ACCESS_TTL_SECONDS",
        setting="runs_api.access_ttl_seconds",
        read=number(minimum=0.0),
        meaning=(
            "How long the Run API keeps a SubjectAccessReview's answer: a revoked "
            "RoleBinding stops showing runs after at most this long."
        ),
    ),
    Variable(
        "PGSCHED_NOTIFY_ALLOW",
        setting="notify_allow",
        read=destination_list,
        meaning=(
            "Notification destinations allowed although not public, comma-separated: CIDRs "
            "(`10.0.0.0/8`, `fd00::/8`), host names (`hooks.tools.svc.cluster.local`) and "
            "`.domain` for every name under it. Unset: a URL must resolve to a public "
            "address; loopback, link-local (`169.254.169.254`), private, multicast and "
            "unspecified addresses are refused, in any spelling, checked where the socket "
            "connects (see [notifications](notifications.md#destinations))."
        ),
        shown="",
    ),
    Variable(
        "PGSCHED_NOTIFY_WORKERS",
        setting="notify.workers",
        read=number(minimum=1, integer=True),
        meaning="Notification deliveries in flight at once, for every namespace together.",
    ),
    Variable(
        "PGSCHED_NOTIFY_NAMESPACE_CONCURRENCY",
        setting="notify.namespace_concurrency",
        read=number(minimum=1, integer=True),
        meaning=(
            "Of those, how many one namespace's deliveries may hold: a namespace whose "
            "receivers hang waits for its own, never another's (see "
            "[notifications](notifications.md))."
        ),
    ),
    Variable(
        "PGSCHED_NOTIFY_ADDRESS_CONCURRENCY",
        setting="notify.address_concurrency",
        read=number(minimum=1, integer=True),
        meaning=(
            "Of those, how many may go to one resolved receiver address at once, whatever "
            "the host names and ports that lead there."
        ),
    ),
    Variable(
        "PGSCHED_NOTIFY_DEADLINE_SECONDS",
        setting="notify.deadline_seconds",
        read=number(minimum=1),
        meaning=(
            "One delivery attempt, whole: name resolution, connect, TLS, request and the "
            "answer; past it the attempt fails and is retried with backoff."
        ),
    ),
    Variable(
        "PGSCHED_DB_POOL_SIZE",
        setting="pool_size",
        read=number(minimum=2, integer=True),
        meaning=(
            "Database connections of the watches' workers (at least 2): syncing "
            "ScheduledJobs and ConcurrencyPools, writing their statuses, recording Job "
            "outcomes. The tick and the publisher have one session each."
        ),
    ),
    # read by cli.main
    Variable(
        "PGSCHED_LOG_LEVEL",
        setting=None,
        read=None,
        meaning=(
            "`DEBUG`, `INFO`, `WARNING` or `ERROR` (flag `--log-level`; every `pgsched` command)."
        ),
        given_default="INFO",
    ),
    # read by cli.main
    Variable(
        "PGSCHED_LOG_FORMAT",
        setting=None,
        read=None,
        meaning=(
            "`text`, or `json`: one object per line with `timestamp`, `level`, `logger`, "
            "`message`, and `run_id`, `definition` (`namespace/name`), `attempt` on every "
            "line about a run (flag `--log-format`)."
        ),
        given_default="text",
    ),
)
_VARIABLE_OF = {variable.setting: variable.name for variable in VARIABLES if variable.setting}


def _check_together(values: Mapping[str, Any], problems: Problems) -> None:
    """The checks that involve two variables."""
    ways = [
        name
        for name in ("PGSCHED_NAMESPACES", "PGSCHED_ALL_NAMESPACES", "PGSCHED_NAMESPACE_SELECTOR")
        if values[name]
    ]
    if not ways:
        problems.add(
            "PGSCHED_NAMESPACE_SELECTOR",
            "is empty, and so are PGSCHED_NAMESPACES and PGSCHED_ALL_NAMESPACES: say which"
            " namespaces to serve",
            "PGSCHED_NAMESPACE_SELECTOR=pgsched.dev/serve=true",
        )
    if len(ways) > 1:
        problems.add(ways[0], f"set one of {' and '.join(ways)}, not both")
    if bool(values["PGSCHED_UI_TLS_CERT_FILE"]) != bool(values["PGSCHED_UI_TLS_KEY_FILE"]):
        problems.add(
            "PGSCHED_UI_TLS_CERT_FILE",
            "and PGSCHED_UI_TLS_KEY_FILE must be set together (or neither)",
            "PGSCHED_UI_TLS_CERT_FILE=/tls/tls.crt PGSCHED_UI_TLS_KEY_FILE=/tls/tls.key",
        )
    for name, example in (
        ("PGSCHED_RUN_API_CERT_DIR", "/etc/pgsched/run-api"),
        ("PGSCHED_RUN_API_URL", "https://pgsched-run-api.pgsched.svc"),
    ):
        if not values[name]:
            problems.add(
                name, "is required: job pods reach pgsched through the run API", f"{name}={example}"
            )
    if values["PGSCHED_RUNS_API_BIND"] and not values["PGSCHED_RUNS_API_CERT_DIR"]:
        problems.add(
            "PGSCHED_RUNS_API_CERT_DIR",
            "is required with PGSCHED_RUNS_API_BIND: the folder of the Run API's TLS Secret",
            "PGSCHED_RUNS_API_CERT_DIR=/etc/pgsched/runs-api",
        )
    if values["PGSCHED_WEBHOOK_BIND"] and not values["PGSCHED_WEBHOOK_CERT_DIR"]:
        problems.add(
            "PGSCHED_WEBHOOK_CERT_DIR",
            "is required with PGSCHED_WEBHOOK_BIND: the folder of the webhook's TLS Secret",
            "PGSCHED_WEBHOOK_CERT_DIR=/etc/pgsched/webhook",
        )


def _section(values: Mapping[str, Any], section: str) -> dict[str, Any]:
    """The values of one section's own settings, by field (``jobs``: not ``jobs.policy``'s)."""
    return {
        path.rpartition(".")[2]: value
        for path, value in values.items()
        if path.rpartition(".")[0] == section
    }
