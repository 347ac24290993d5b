"""The validating admission webhook, served by kopf in a thread of the operator.

kopf carries the requests: its HTTPS server (``kopf.WebhookServer``) answers the API
server's AdmissionReviews and calls the two handlers below, which ask ``admission`` —
the controller's own validation — and turn a ``SpecError`` into ``kopf.AdmissionError``,
so ``kubectl apply`` fails with the message the ``Ready`` condition would carry.

Only admission handlers are registered, so kopf watches nothing: no resource handlers
(pgsched's own controllers reconcile, ``controller``), no peering (``standalone``), no
namespace or CRD scanning (``scanning.disabled``), no Events posted. What is left is an
API discovery at start, the server, and — when ``configuration`` is set — the
ValidatingWebhookConfiguration kopf creates and patches with its address and CA bundle
(the local cluster's way; the Helm chart writes its own, docs/admission.md says why).

Fail-open, as the webhook's ``failurePolicy: Ignore`` is: a handler that fails for any
reason other than an invalid spec allows the request (and logs why), since a denial would
block ``kubectl apply`` where an outage does not. The controller judges every spec anyway.

kopf keeps a memory per object it is asked about on update; with no watch to tell it of a
deletion, that memory would never be freed (a fleet's worth over time). ``_Forgetful``
keeps none, as kopf does for creations. It subclasses a class kopf does not export, the
only way to that memory, so kopf is pinned exactly and tests/unit/test_webhook_kopf.py
checks the class's shape (docs/architecture.md, "Why kopf serves admission only").
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import kopf
from kopf._core.reactor import inventory

from pgsched import spec as spec_module
from pgsched.db import clock
from pgsched.k8s import names
from pgsched.k8s.serve import admission
from pgsched.k8s.serve.settings import WebhookSettings

log = logging.getLogger(__name__)

# The files of PGSCHED_WEBHOOK_CERT_DIR: a Kubernetes TLS Secret's, as cert-manager
# writes them (ca.crt: the CA the API server is told to trust).
CERT_FILE, KEY_FILE, CA_FILE = "tls.crt", "tls.key", "ca.crt"
# HTTP status of a refused spec in the AdmissionReview (kubectl shows the message).
INVALID = 422


class WebhookError(RuntimeError):
    """The webhook cannot start (its certificate files are missing)."""


def registry() -> kopf.OperatorRegistry:
    """A registry with the admission handlers alone (never kopf's default registry), and
    the login the operator's own client uses: in-cluster, else the kubeconfig."""
    found = kopf.OperatorRegistry()
    kopf.on.login(registry=found)(kopf.login_via_client)
    options: dict[str, Any] = {
        "registry": found,
        "operations": ["CREATE", "UPDATE"],
        # Kept in a configuration kopf manages when the operator stops, so a rolling
        # update never leaves specs unchecked; with Ignore an outage blocks nothing.
        "persistent": True,
        "ignore_failures": True,
    }

    @kopf.on.validate(names.GROUP, names.VERSION, names.PLURAL, id="scheduledjobs", **options)
    def scheduled_job(body: kopf.Body, **kwargs: Any) -> None:
        old = _raw(kwargs.get("old"))
        _judge(body, lambda: admission.check_scheduled_job(dict(body), old, now=clock.local()))

    @kopf.on.validate(
        names.GROUP, names.VERSION, names.POOL_PLURAL, id="concurrencypools", **options
    )
    def pool(body: kopf.Body, **kwargs: Any) -> None:
        old = _raw(kwargs.get("old"))
        _judge(body, lambda: admission.check_pool(dict(body), old))

    @kopf.on.validate(names.GROUP, names.VERSION, names.CALENDAR_PLURAL, id="calendars", **options)
    def calendar(body: kopf.Body, **kwargs: Any) -> None:
        old = _raw(kwargs.get("old"))
        _judge(body, lambda: admission.check_calendar(dict(body), old))

    @kopf.on.validate(
        names.GROUP,
        names.VERSION,
        names.NOTIFICATION_POLICY_PLURAL,
        id="notificationpolicies",
        **options,
    )
    def notification_policy(body: kopf.Body, **kwargs: Any) -> None:
        old = _raw(kwargs.get("old"))
        _judge(body, lambda: admission.check_notification_policy(dict(body), old))

    return found


def _raw(old: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return dict(old) if old else None


def _judge(body: Mapping[str, Any], check: Callable[[], None]) -> None:
    try:
        check()
    except spec_module.SpecError as error:
        meta = body.get("metadata") or {}
        log.info("refused %s/%s: %s", meta.get("namespace"), meta.get("name"), error)
        raise kopf.AdmissionError(str(error), code=INVALID) from None
    except Exception:
        meta = body.get("metadata") or {}
        log.exception(
            "admission of %s/%s failed; allowed (the controller still validates it)",
            meta.get("namespace"),
            meta.get("name"),
        )


def kopf_settings(settings: WebhookSettings) -> kopf.OperatorSettings:
    """kopf's settings: the server, the managed configuration, and nothing else running."""
    directory = Path(settings.cert_dir)
    missing = [name for name in (CERT_FILE, KEY_FILE) if not (directory / name).is_file()]
    if missing:
        raise WebhookError(
            f"PGSCHED_WEBHOOK_CERT_DIR={settings.cert_dir}: no {' or '.join(missing)}"
            " (mount the webhook's TLS Secret there; docs/admission.md)"
        )
    host, _, port = settings.bind.rpartition(":")
    ca = directory / CA_FILE
    found = kopf.OperatorSettings()
    found.admission.server = kopf.WebhookServer(
        addr=host,
        port=int(port),
        certfile=directory / CERT_FILE,
        pkeyfile=directory / KEY_FILE,
        cafile=ca if ca.is_file() else None,  # None: the certificate is its own CA
        **_callers(settings.client_ca_file),
    )
    found.admission.managed = settings.configuration or None
    found.scanning.disabled = True
    found.posting.enabled = False
    return found


def _callers(client_ca_file: str) -> dict[str, Any]:
    """Who may call: with a client CA, only a caller presenting a certificate it signed (the
    TLS handshake fails for any other, before a byte of a request is read); else anyone."""
    if not client_ca_file:
        return {}
    try:
        ssl.create_default_context(cafile=client_ca_file)
    except (OSError, ssl.SSLError) as error:
        raise WebhookError(
            f"PGSCHED_WEBHOOK_CLIENT_CA_FILE={client_ca_file}: not a readable PEM CA bundle"
            f" ({error}); mount the CA that signs the API server's webhook client certificate"
            " (docs/admission.md)"
        ) from None
    return {"verify_mode": ssl.CERT_REQUIRED, "verify_cafile": client_ca_file}


class _RefusalsAreNoErrors(logging.Filter):
    """kopf logs every ``AdmissionError`` as "<handler> failed permanently: ..." at ERROR:
    a user's typo, refused with its message, is no trouble of the operator's (``_judge``
    says it at INFO). The webhook's handlers raise no other permanent error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno >= logging.ERROR and "failed permanently" in record.getMessage())


_REFUSALS_ARE_NO_ERRORS = _RefusalsAreNoErrors()


class _Forgetful(inventory.ResourceMemories):
    """Remembers nothing about the objects admitted (see the module's docstring)."""

    async def recall(
        self,
        raw_body: Any,
        *,
        memobase: Any = None,
        noticed_by_listing: bool = False,
        ephemeral: bool = False,
    ) -> inventory.ResourceMemory:
        return await super().recall(
            raw_body, memobase=memobase, noticed_by_listing=noticed_by_listing, ephemeral=True
        )


class Webhook:
    """kopf's operator machinery, admission only, on its own event loop and thread."""

    def __init__(self, settings: WebhookSettings) -> None:
        logging.getLogger("kopf.objects").addFilter(_REFUSALS_ARE_NO_ERRORS)
        self._settings = kopf_settings(settings)
        self._stop = threading.Event()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="pgsched-webhook", daemon=True)

    def _run(self) -> None:
        asyncio.run(
            kopf.operator(
                registry=registry(),
                settings=self._settings,
                memories=_Forgetful(),
                clusterwide=True,  # no namespace is watched: scanning is off
                standalone=True,
                stop_flag=self._stop,
                ready_flag=self.ready,
            )
        )

    def start(self) -> None:
        self.thread.start()

    def alive(self) -> bool:
        return self.thread.is_alive()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        self.thread.join(timeout=timeout)
