"""The in-pod contract: what the operator tells ``pgsched run`` and ``pgsched heartbeat``.

Everything arrives as environment variables (the operator sets them on the container), and
any of them can be overridden by a command-line flag for local runs. They are read once,
at start-up, into a frozen :class:`RunnerSettings` that validates itself; a pod started
with a broken contract stops at once with every problem listed (``validation``), naming
the variable, what is wrong and an example of a right value — before it makes a request or
imports user code.

The table of variables lives here, once: the CLI builds its flags from it and
``docs/sdk.md`` documents the same names.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from pgsched import names
from pgsched.engine.lease import Lease
from pgsched.runner import runapi_client
from pgsched.validation import FieldError, Problems, SettingsError

DEFAULT_CANCEL_FILE = Path("/pgsched/cancel")
DEFAULT_HEARTBEAT_INTERVAL_SECONDS = 10.0
DEFAULT_FINISH_TIMEOUT_SECONDS = 300.0
# Messages quote a wrong value up to this long.
_SHOWN_CHARS = 60


@dataclass(frozen=True)
class Variable:
    env: str
    flag: str
    help: str
    example: str

    @property
    def label(self) -> str:
        return f"{self.env} ({self.flag})"


RUN_ID = Variable("PGSCHED_RUN_ID", "--run-id", "id of the run this pod executes", "42")
LEASE_TOKEN = Variable(
    "PGSCHED_LEASE_TOKEN",
    "--lease-token",
    "the run's lease token from its claim; fences every write",
    "3f2c6a9e-8d1b-4c55-9a57-0e7d2b1c4f10",
)
RUN_API_URL = Variable(
    "PGSCHED_RUN_API_URL",
    "--run-api-url",
    "address of the run API the pod talks to (docs/run-api.md)",
    "https://pgsched-run-api.pgsched.svc",
)
RUN_API_CA = Variable(
    "PGSCHED_RUN_API_CA",
    "--run-api-ca",
    "PEM text of the CA certificate of the run API's server, the only one trusted",
    '"$(cat ca.crt)"',
)
HEARTBEAT_INTERVAL = Variable(
    "PGSCHED_HEARTBEAT_INTERVAL_SECONDS",
    "--heartbeat-interval",
    f"seconds between heartbeats (default {DEFAULT_HEARTBEAT_INTERVAL_SECONDS:g})",
    "10",
)
CANCEL_FILE = Variable(
    "PGSCHED_CANCEL_FILE",
    "--cancel-file",
    f"file the sidecar writes when the run must stop (default {DEFAULT_CANCEL_FILE})",
    str(DEFAULT_CANCEL_FILE),
)
SHARED_PROCESS_NAMESPACE = Variable(
    "PGSCHED_SHARED_PROCESS_NAMESPACE",
    "--shared-process-namespace",
    "'true' when the pod shares its process namespace: the sidecar then sees the"
    " workload's processes end (default false)",
    "true",
)
ATTEMPT = Variable("PGSCHED_ATTEMPT", "--attempt", "the run's attempt number (1, 2, ...)", "1")
JOB_KIND = Variable("PGSCHED_JOB_KIND", "--kind", "the job kind to run", "nightly-report")
JOB_ARGS = Variable(
    "PGSCHED_JOB_ARGS",
    "--args",
    "the job's arguments, a JSON object (default {})",
    "'{\"days\": 7}'",
)
JOB_MODULES = Variable(
    "PGSCHED_JOB_MODULES",
    "--module",
    "comma-separated Python modules that register job kinds",
    "myapp.jobs,myapp.reports",
)
FINISH_TIMEOUT = Variable(
    "PGSCHED_FINISH_TIMEOUT_SECONDS",
    "--finish-timeout",
    "how long to keep retrying the final status write while the run API is unreachable"
    f" (default {DEFAULT_FINISH_TIMEOUT_SECONDS:g})",
    "300",
)

_LEASE = (RUN_ID, LEASE_TOKEN, RUN_API_URL, RUN_API_CA, HEARTBEAT_INTERVAL)
SIDECAR_VARIABLES = (*_LEASE, CANCEL_FILE, SHARED_PROCESS_NAMESPACE)  # pgsched heartbeat
RUNNER_VARIABLES = (
    *_LEASE,
    ATTEMPT,
    JOB_KIND,
    JOB_ARGS,
    JOB_MODULES,
    FINISH_TIMEOUT,
)  # pgsched run


def add_flags(parser: argparse.ArgumentParser, variables: tuple[Variable, ...]) -> None:
    """One flag per variable; a flag given on the command line wins over the environment."""
    for variable in variables:
        if variable is JOB_MODULES:
            parser.add_argument(
                variable.flag,
                dest=variable.env,
                action="append",
                metavar="MODULE",
                help=f"{variable.help}; repeatable (env {variable.env})",
            )
        else:
            parser.add_argument(
                variable.flag, dest=variable.env, help=f"{variable.help} (env {variable.env})"
            )


def flag_values(args: argparse.Namespace, variables: tuple[Variable, ...]) -> dict[str, str | None]:
    values: dict[str, str | None] = {}
    for variable in variables:
        value = getattr(args, variable.env)
        values[variable.env] = ",".join(value) if isinstance(value, list) else value
    return values


@dataclass(frozen=True)
class JobSelection:
    """Which kind to run, with what, from which modules (``spec.job``)."""

    kind: str
    args: Mapping[str, Any] = field(default_factory=dict)
    modules: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunnerSettings:
    run_id: int
    lease_token: UUID
    run_api_url: str
    run_api_ca: str = field(repr=False)  # a page of PEM
    heartbeat_interval_seconds: float = DEFAULT_HEARTBEAT_INTERVAL_SECONDS
    cancel_file: Path = DEFAULT_CANCEL_FILE
    shared_process_namespace: bool = False
    attempt: int = 1
    finish_timeout_seconds: float = DEFAULT_FINISH_TIMEOUT_SECONDS
    job: JobSelection | None = None

    def __post_init__(self) -> None:
        problems: list[FieldError] = []
        if self.run_id < 1:
            problems.append(_bad(RUN_ID, self.run_id, "must be a positive integer"))
        try:
            runapi_client.address(self.run_api_url)
        except ValueError as error:
            problems.append(_bad(RUN_API_URL, self.run_api_url, str(error)))
        try:
            runapi_client.trusting(self.run_api_ca)
        except ValueError as error:
            problems.append(_bad(RUN_API_CA, self.run_api_ca, str(error)))
        if not 0.05 <= self.heartbeat_interval_seconds <= 3600:
            problems.append(
                _bad(
                    HEARTBEAT_INTERVAL,
                    self.heartbeat_interval_seconds,
                    "is out of range 0.05..3600",
                )
            )
        if self.attempt < 1:
            problems.append(_bad(ATTEMPT, self.attempt, "must be 1 or more"))
        if self.finish_timeout_seconds < 0:
            problems.append(
                _bad(FINISH_TIMEOUT, self.finish_timeout_seconds, "must not be negative")
            )
        if self.job is not None:
            if not names.JOB_KIND.match(self.job.kind):
                problems.append(
                    _bad(
                        JOB_KIND,
                        self.job.kind,
                        "is not a job kind name (lowercase letters, digits, '.', '_' or '-')",
                    )
                )
            for module in self.job.modules:
                if not names.DOTTED_NAME.match(module):
                    problems.append(_bad(JOB_MODULES, module, "is not a Python module name"))
        if problems:
            raise SettingsError(problems)

    @property
    def lease(self) -> Lease:
        return Lease(self.run_id, self.lease_token)


def from_environment(
    env: Mapping[str, str],
    *,
    overrides: Mapping[str, str | None] | None = None,
    job: bool,
) -> RunnerSettings:
    """Read the contract from ``env``; ``overrides`` (flag values keyed by variable name)
    win over it. ``job=True`` also reads the SDK runner's variables."""
    values = {
        **env,
        **{key: value for key, value in (overrides or {}).items() if value is not None},
    }
    reader = _Reader(values)
    run_id = reader.integer(RUN_ID)
    token = reader.uuid(LEASE_TOKEN)
    run_api_url = reader.required(RUN_API_URL)
    run_api_ca = reader.required(RUN_API_CA)
    interval = reader.number(HEARTBEAT_INTERVAL, DEFAULT_HEARTBEAT_INTERVAL_SECONDS)
    cancel_file = Path(values.get(CANCEL_FILE.env) or DEFAULT_CANCEL_FILE)
    shared = reader.boolean(SHARED_PROCESS_NAMESPACE)
    attempt, finish_timeout, selection = 1, DEFAULT_FINISH_TIMEOUT_SECONDS, None
    if job:
        given_attempt = reader.integer(ATTEMPT)
        attempt = 1 if given_attempt is None else given_attempt
        finish_timeout = reader.number(FINISH_TIMEOUT, DEFAULT_FINISH_TIMEOUT_SECONDS)
        kind = reader.required(JOB_KIND)
        args = reader.json_object(JOB_ARGS)
        modules = tuple(
            module.strip()
            for module in values.get(JOB_MODULES.env, "").split(",")
            if module.strip()
        )
        selection = JobSelection(kind, args, modules)
    reader.problems.raise_if_any(SettingsError)
    assert run_id is not None and token is not None
    return RunnerSettings(
        run_id=run_id,
        lease_token=token,
        run_api_url=run_api_url,
        run_api_ca=run_api_ca,
        heartbeat_interval_seconds=interval,
        cancel_file=cancel_file,
        shared_process_namespace=shared,
        attempt=attempt,
        finish_timeout_seconds=finish_timeout,
        job=selection,
    )


class _Reader:
    """Reads typed values out of the merged variables, collecting every problem."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = values
        self.problems = Problems()

    def required(self, variable: Variable) -> str:
        value = self.values.get(variable.env, "").strip()
        if not value:
            self.problems.add(
                variable.env,
                f"is not set: {variable.help}; set it or pass {variable.flag}",
                f"{variable.env}={variable.example}",
            )
        return value

    def integer(self, variable: Variable) -> int | None:
        text = self.required(variable)
        if not text:
            return None
        try:
            return int(text)
        except ValueError:
            self.problems.errors.append(_bad(variable, text, "is not an integer"))
            return None

    def number(self, variable: Variable, default: float) -> float:
        text = self.values.get(variable.env, "").strip()
        if not text:
            return default
        try:
            return float(text)
        except ValueError:
            self.problems.errors.append(_bad(variable, text, "is not a number"))
            return default

    def boolean(self, variable: Variable) -> bool:
        text = self.values.get(variable.env, "").strip().lower()
        if text in ("", "false"):
            return False
        if text == "true":
            return True
        self.problems.errors.append(_bad(variable, text, "must be true or false"))
        return False

    def uuid(self, variable: Variable) -> UUID | None:
        text = self.required(variable)
        if not text:
            return None
        try:
            return UUID(text)
        except ValueError:
            self.problems.errors.append(_bad(variable, text, "is not a UUID"))
            return None

    def json_object(self, variable: Variable) -> dict[str, Any]:
        text = self.values.get(variable.env, "").strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            self.problems.errors.append(_bad(variable, text, f"is not valid JSON ({error})"))
            return {}
        if not isinstance(value, dict):
            self.problems.errors.append(_bad(variable, text, "must be a JSON object"))
            return {}
        return value


def _bad(variable: Variable, value: object, problem: str) -> FieldError:
    shown = repr(value)
    if len(shown) > _SHOWN_CHARS:  # a page of PEM, say: its start is enough to recognise it
        shown = shown[: _SHOWN_CHARS - 3] + "..."
    return FieldError(variable.label, f"{shown} {problem}", f"{variable.env}={variable.example}")
