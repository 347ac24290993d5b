"""The Run API's reading of a query: selectors, page size, continue token and watch version,
each hostile form refused (400, or 410 for a version older than the changes kept) with a
message that names it and shows one that works."""

from __future__ import annotations

import base64
import binascii
import dataclasses
from dataclasses import dataclass
from typing import get_args

from pgsched.engine.models import RunStatus
from pgsched.k8s import names
from pgsched.k8s.runs_api.store import Versions

# Lists come in pages of at most this many runs (kubectl follows metadata.continue):
# a history has no end, and no request may read it whole.
MAX_PAGE = 500
RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)
_CONTINUE_PREFIX = "runs.v1:"


class Refused(Exception):
    """A request answered with a Status: HTTP code, reason and message."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason = code, reason


def scheduled_job(selector: str) -> str | None:
    """``-l pgsched.dev/scheduledjob=NAME`` (or ``==``): the one label runs carry."""
    if not selector:
        return None
    example = f"-l {names.LABEL_SCHEDULED_JOB}=nightly-export"
    key, operator, value = _term(selector, "labelSelector", example)
    if key != names.LABEL_SCHEDULED_JOB or operator == "!=" or "," in value:
        raise Refused(
            400,
            "BadRequest",
            f"labelSelector {selector!r}: runs carry one label, {names.LABEL_SCHEDULED_JOB};"
            f" select on it, e.g. {example}",
        )
    return value


@dataclass(frozen=True)
class Fields:
    """What a field selector asks for: runs in these phases, of this name, of this id."""

    statuses: list[str] | None = None
    name: str | None = None
    run_id: int | None = None


def fields(selector: str) -> Fields:
    """``status.phase=FAILED``, ``metadata.name=...`` and ``status.id=...``, comma-separated."""
    found = Fields()
    example = "--field-selector status.phase=FAILED"
    for term in filter(None, selector.split(",")):
        key, operator, value = _term(term, "fieldSelector", example)
        if key == "status.phase" and operator != "!=" and value in RUN_STATUSES:
            found = dataclasses.replace(found, statuses=[value])
        elif key == "metadata.name" and operator != "!=":
            found = dataclasses.replace(found, name=value)
        elif key == "status.id" and operator != "!=" and value.isdigit() and len(value) <= 18:
            found = dataclasses.replace(found, run_id=int(value))
        else:
            raise Refused(
                400,
                "BadRequest",
                f"fieldSelector {term!r}: runs are selected by status.phase (one of"
                f" {', '.join(RUN_STATUSES)}), metadata.name or status.id (a run id), e.g."
                f" {example}",
            )
    return found


def _term(term: str, what: str, example: str) -> tuple[str, str, str]:
    for operator in ("==", "!=", "="):
        key, found, value = term.partition(operator)
        if found:
            return key.strip(), operator, value.strip()
    raise Refused(
        400,
        "BadRequest",
        f"{what} {term!r}: only key=value is understood, e.g. {example}",
    )


def resource_version(text: str, versions: Versions) -> int:
    """Where a watch starts: after ``resourceVersion``; unset or "0", now."""
    if text in ("", "0"):
        return versions.current
    if not text.isdigit() or len(text) > 18:
        raise Refused(
            400,
            "BadRequest",
            f"resourceVersion {text!r}: a Run's resourceVersion is a whole number, as a list"
            " answers it (metadata.resourceVersion)",
        )
    after = int(text)
    if after < versions.pruned_through:
        raise Refused(
            410,
            "Expired",
            f"too old resource version: {after} ({versions.pruned_through}): changes are"
            " kept 15 minutes; list again and watch from the list's resourceVersion",
        )
    return after


def limit(text: str) -> int:
    if not text or text == "0":
        return MAX_PAGE
    if not text.isdigit():
        raise Refused(400, "BadRequest", f"limit {text!r}: a whole number, e.g. limit=50")
    return min(int(text), MAX_PAGE)


def continue_token(before: int | None) -> str | None:
    if before is None:
        return None
    return base64.urlsafe_b64encode(f"{_CONTINUE_PREFIX}{before}".encode()).decode()


def before(token: str) -> int | None:
    if not token:
        return None
    try:
        text = base64.urlsafe_b64decode(token.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        text = ""
    tail = text.removeprefix(_CONTINUE_PREFIX)
    if not text.startswith(_CONTINUE_PREFIX) or not tail.isdigit() or len(tail) > 18:
        raise Refused(
            400, "BadRequest", "continue: not a token this server gave; list again from the start"
        )
    return int(tail)


# What a Run body may hold; anything else is an unknown field, as the API server says of a
# built-in kind (fieldValidation: Strict refuses it, Warn warns, Ignore drops it).
_FIELDS: dict[str, frozenset[str]] = {
    "": frozenset(["apiVersion", "kind", "metadata", "spec", "status"]),
    "metadata": frozenset(
        [
            "name",
            "generateName",
            "namespace",
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "labels",
            "annotations",
            "ownerReferences",
            "finalizers",
            "managedFields",
            "selfLink",
        ]
    ),
    "spec": frozenset(["scheduledJob", "parameters"]),
}
FIELD_VALIDATIONS = ("Ignore", "Warn", "Strict")


def field_validation(text: str) -> str:
    """``fieldValidation``: Strict, Warn (the API server's default) or Ignore."""
    if not text:
        return "Warn"
    if text not in FIELD_VALIDATIONS:
        raise Refused(
            400,
            "BadRequest",
            f"fieldValidation {text!r}: one of {', '.join(FIELD_VALIDATIONS)}, e.g. Strict",
        )
    return text


def unknown_fields(body: object) -> list[str]:
    """The fields of a Run body no Run has (``spec.shedule``), as dotted paths."""
    if not isinstance(body, dict):
        return []
    unknown = [key for key in body if key not in _FIELDS[""]]
    for part in ("metadata", "spec"):
        inner = body.get(part)
        if isinstance(inner, dict):
            unknown += [f"{part}.{key}" for key in inner if key not in _FIELDS[part]]
    return unknown


def dry_run(text: str) -> bool:
    """``dryRun``: "All" checks everything and changes nothing; unset is a real request."""
    if not text:
        return False
    if text != "All":
        raise Refused(400, "BadRequest", f"dryRun {text!r}: the one value is All, e.g. dryRun=All")
    return True
