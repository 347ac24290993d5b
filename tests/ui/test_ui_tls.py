"""The UI's optional TLS listener: HTTPS with the certificate it is given, nothing else on
that port, and a clear error for files it cannot use."""

from __future__ import annotations

import http.client
import ssl

import pytest

from cli_runner import pgsched
from conftest import Certificate, History, Served, serve
from pgsched.ui import access, server


def test_the_tls_listener_serves_the_pages_over_https_with_the_given_certificate(
    dsn: str, history: History, certificate: Certificate
) -> None:
    tls = server.tls_context(str(certificate.cert), str(certificate.key))
    for ui in serve(dsn, access.OpenAccess(), tls=tls, trust=certificate.trust()):
        assert ui.url.startswith("https://127.0.0.1:")
        status, page = ui.get("/")
        assert status == 200 and "daily at 09:00 Europe/Sofia" in page
        port = int(ui.url.rsplit(":", 1)[1])
        served = ssl.get_server_certificate(("127.0.0.1", port))
        assert ssl.PEM_cert_to_DER_cert(served) == ssl.PEM_cert_to_DER_cert(
            certificate.cert.read_text()
        )
        # Plain HTTP on the TLS port gets no page.
        with pytest.raises((http.client.HTTPException, OSError)):
            Served(ui.url.replace("https://", "http://")).get("/")


def test_a_certificate_the_ui_cannot_load_is_a_clear_error(certificate: Certificate) -> None:
    with pytest.raises(ValueError, match="cannot load the UI's TLS certificate '/nonexistent"):
        server.tls_context("/nonexistent/tls.crt", str(certificate.key))
    with pytest.raises(ValueError, match="PEM certificate chain and its PEM private key"):
        server.tls_context(str(certificate.key), str(certificate.cert))  # swapped


def test_pgsched_ui_wants_both_tls_files_and_names_a_bad_one(
    dsn: str, certificate: Certificate
) -> None:
    alone = pgsched("ui", "--no-auth", "--tls-cert", str(certificate.cert), dsn=dsn)
    assert alone.code == 2 and "--tls-cert and --tls-key go together" in alone.err
    missing = pgsched(
        "ui", "--no-auth", "--tls-cert", "/nonexistent.crt", "--tls-key", "/x.key", dsn=dsn
    )
    assert missing.code == 2 and "cannot load the UI's TLS certificate" in missing.err
