"""What a ScheduledJob may make its pods run as: the jobTemplate policy.

As with a CronJob, whoever may create a ScheduledJob in a namespace may make pods there, as
any ServiceAccount of that namespace and with any of its Secrets. This module lets an
administrator narrow that (the operator's settings and the namespace's own
``pgsched.dev/allowed-*`` annotations; a name must pass both), and always keeps out of a
jobTemplate the operator's own namespace (unless allowed) and the per-run lease Secrets.

The same check runs when a generation is synced (with the operator's lists) and before
every launch (with the namespace's too), so it holds where the chart's admission policy is
not installed and for objects older than it. Secrets are found wherever a pod spec names
one; ConfigMaps are not policed.

The lists, the two checks and where Secrets are found: docs/architecture.md, "The
jobTemplate policy".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pgsched.k8s import names
from pgsched.k8s.client import api
from pgsched.validation import FieldError, Problems

ANY = "*"
ANNOTATION_SERVICE_ACCOUNTS = f"{names.GROUP}/allowed-service-accounts"
ANNOTATION_SECRETS = f"{names.GROUP}/allowed-secrets"
POD_SPEC = "spec.jobTemplate.spec.template.spec"
LEASE_SECRET_SUFFIX = names.lease_secret_name("")

# Keys under which a pod spec names a Secret: a value that is the name itself, or an object
# whose ``name`` is (``secret`` is a projected source's; a volume's has ``secretName``).
_NAME_KEYS = frozenset({"secretName"})
_OBJECT_KEYS = frozenset({"secretKeyRef", "secretRef", "nodePublishSecretRef", "secret"})


@dataclass(frozen=True)
class JobPolicy:
    """The operator's half of the policy (its settings); ``()`` as a list allows nothing."""

    # Where the operator runs and as what; empty when it does not run in the cluster.
    operator_namespace: str = ""
    operator_service_account: str = ""
    operator_secrets: tuple[str, ...] = ()
    allow_operator_namespace: bool = False
    service_accounts: tuple[str, ...] = (ANY,)
    secrets: tuple[str, ...] = (ANY,)


def refusal(
    policy: JobPolicy,
    *,
    namespace: str,
    spec: Mapping[str, Any],
    annotations: Mapping[str, str] | None = None,
) -> str | None:
    """Why ``spec`` may not run in ``namespace``, one line per problem, or None; the
    namespace's lists are checked when its ``annotations`` are given."""
    found = refusals(policy, namespace=namespace, spec=spec, annotations=annotations or {})
    return "\n".join(str(error) for error in found) or None


def refusals(
    policy: JobPolicy, *, namespace: str, spec: Mapping[str, Any], annotations: Mapping[str, str]
) -> list[FieldError]:
    """Every way ``spec`` (a ScheduledJob's) breaks the policy in ``namespace`` (whose
    annotations are ``annotations``), each naming the field; empty when it is allowed."""
    problems = Problems()
    home = bool(policy.operator_namespace) and namespace == policy.operator_namespace
    if home and not policy.allow_operator_namespace:
        problems.add(
            "metadata.namespace",
            f"{namespace!r} is the pgsched operator's own namespace, where jobs do not run"
            " unless the administrator allows it (chart value allowReleaseNamespace)",
            "a namespace the operator watches, e.g. jobs",
        )
        return problems.errors
    pod_spec = _pod_spec(spec)
    account_field, account = service_account(pod_spec)
    _require_allowed(
        problems,
        f"{POD_SPEC}.{account_field}",
        account or "default",
        _allowed(policy.service_accounts, annotations.get(ANNOTATION_SERVICE_ACCOUNTS)),
        forbidden=(policy.operator_service_account,) if home else (),
        namespace=namespace,
        fallback="default",
    )
    allowed = _allowed(policy.secrets, annotations.get(ANNOTATION_SECRETS))
    for path, secret in secret_references(pod_spec):
        if secret.endswith(LEASE_SECRET_SUFFIX):
            problems.add(
                f"{POD_SPEC}.{path}",
                f"{secret!r} is a name of pgsched's per-run lease Secrets (…{LEASE_SECRET_SUFFIX}),"
                " which no jobTemplate may name",
                "a Secret of your own, e.g. reports-credentials",
            )
        else:
            _require_allowed(
                problems,
                f"{POD_SPEC}.{path}",
                secret,
                allowed,
                kind="Secret ",
                forbidden=policy.operator_secrets if home else (),
                namespace=namespace,
                fallback="reports-credentials",
            )
    return problems.errors


def service_account(pod_spec: Mapping[str, Any]) -> tuple[str, str | None]:
    """The field that names the ServiceAccount a pod runs as, and that account (None: the
    namespace's ``default``), as the API server decides it: ``serviceAccountName`` unless
    it is empty, then the deprecated ``serviceAccount`` (the API server's defaulting
    copies it over an empty ``serviceAccountName``: judging ``serviceAccountName: ""`` as
    ``default`` would let ``serviceAccount: admin`` through). The Job builder writes this
    account back as ``serviceAccountName`` alone, so what runs is what was judged."""
    for field in ("serviceAccountName", "serviceAccount"):
        if pod_spec.get(field):
            return field, str(pod_spec[field])
    return "serviceAccountName", None


def secret_references(pod_spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(field path, Secret name)`` of every Secret the pod spec names."""
    for index, reference in enumerate(_list(pod_spec.get("imagePullSecrets"))):
        if isinstance(reference, Mapping) and reference.get("name"):
            yield f"imagePullSecrets[{index}].name", str(reference["name"])
    for key in ("volumes", "containers", "initContainers"):
        for index, item in enumerate(_list(pod_spec.get(key))):
            yield from _walk(item, f"{key}[{index}]")


def _walk(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            where = f"{path}.{key}"
            if key in _NAME_KEYS and isinstance(inner, str) and inner:
                yield where, inner
            elif key in _OBJECT_KEYS and isinstance(inner, Mapping) and inner.get("name"):
                yield f"{where}.name", str(inner["name"])
            else:
                yield from _walk(inner, where)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _walk(inner, f"{path}[{index}]")


def _pod_spec(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Any = spec
    for key in ("jobTemplate", "spec", "template", "spec"):
        found = found.get(key) if isinstance(found, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _require_allowed(
    problems: Problems,
    path: str,
    name: str,
    lists: tuple[tuple[str, ...], ...],
    *,
    forbidden: tuple[str, ...],
    namespace: str,
    fallback: str,
    kind: str = "",
) -> None:
    """A problem at ``path`` unless ``name`` passes every list and is not ``forbidden``."""
    if not _permits(lists, name, forbidden=forbidden):
        problems.add(
            path,
            f"{kind}{name!r} is not allowed in namespace {namespace}"
            f" (allowed: {_describe(lists, forbidden)})",
            _example(lists, forbidden, fallback),
        )


def _allowed(chart: tuple[str, ...], annotation: str | None) -> tuple[tuple[str, ...], ...]:
    """The lists a name must pass: the operator's and, if it has one, the namespace's."""
    if annotation is None:
        return (chart,)
    return chart, tuple(part.strip() for part in annotation.split(",") if part.strip())


def _permits(lists: tuple[tuple[str, ...], ...], name: str, *, forbidden: tuple[str, ...]) -> bool:
    return name not in forbidden and all(ANY in names_ or name in names_ for names_ in lists)


def _describe(lists: tuple[tuple[str, ...], ...], forbidden: tuple[str, ...]) -> str:
    """The names that pass every list, for a message."""
    if all(ANY in names_ for names_ in lists):
        text = "any"
    else:
        explicit = [names_ for names_ in lists if ANY not in names_]
        common = [name for name in explicit[0] if all(name in other for other in explicit)]
        text = ", ".join(common) if common else "none"
    if forbidden:
        text += f" except {', '.join(forbidden)}"
    return text


def _example(lists: tuple[tuple[str, ...], ...], forbidden: tuple[str, ...], fallback: str) -> str:
    for name in lists[-1]:
        if name != ANY and _permits(lists, name, forbidden=forbidden):
            return name
    return fallback


class Gate:
    """The whole policy, for the launcher: the operator's lists and the namespaces'
    annotations, read from the API and kept for ``ttl`` seconds (a namespace's change
    applies within that), shared by the launch threads."""

    ttl = 10.0

    def __init__(self, kube: api.KubeApi, policy: JobPolicy) -> None:
        self.policy = policy
        self._kube = kube
        self._lock = threading.Lock()
        self._annotations: dict[str, tuple[float, Mapping[str, str]]] = {}

    def refusal(self, namespace: str, spec: Mapping[str, Any]) -> str | None:
        """Why ``spec`` may not run in ``namespace`` (one line per problem), or None.
        Raises ``api.ApiError`` when the namespace cannot be read: the policy is then
        unknown, and nothing is allowed on a guess."""
        return refusal(self.policy, namespace=namespace, spec=spec, annotations=self._of(namespace))

    def _of(self, namespace: str) -> Mapping[str, str]:
        now = time.monotonic()
        with self._lock:
            cached = self._annotations.get(namespace)
        if cached is not None and now - cached[0] < self.ttl:
            return cached[1]
        body = self._kube.get(api.path_of(plural="namespaces", name=namespace))
        annotations = dict((body.get("metadata") or {}).get("annotations") or {})
        with self._lock:
            self._annotations[namespace] = (now, annotations)
        return annotations
