"""The CA job pods trust for the run API: ``ca.crt`` of ``PGSCHED_RUN_API_CERT_DIR``.

Every Job the operator creates carries its PEM text as ``PGSCHED_RUN_API_CA``
(docs/run-api.md). It is read once, when the operator starts, as the connection string's
file is (``db.dsn``): the CA outlives the serving certificates it signs (the chart's lives
ten years, and with cert-manager it is a CA certificate of its own), so a renewed serving
certificate needs no new CA in the pods. A file that is missing, unreadable or holds no
certificate stops the start, naming the variable and the path: every pod started with it
would fail to trust the run API.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from pgsched.validation import Problems

VARIABLE = "PGSCHED_RUN_API_CERT_DIR"
FILE = "ca.crt"
EXAMPLE = f"{VARIABLE}=/etc/pgsched/run-api"


def read(cert_dir: str, problems: Problems) -> str:
    """The PEM text of ``<cert_dir>/ca.crt``; empty, with a problem added, if it is not one."""
    path = Path(cert_dir) / FILE
    try:
        pem = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        problems.add(
            VARIABLE,
            f"cannot read {str(path)!r}: {reason}; mount the run API's TLS Secret there"
            " (tls.crt, tls.key, ca.crt)",
            EXAMPLE,
        )
        return ""
    try:
        # Loaded the way the pods' client will load it, so what passes here is usable there.
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError):
        problems.add(
            VARIABLE,
            f"{str(path)!r} holds no PEM certificate; it must be the CA that signed tls.crt"
            " (-----BEGIN CERTIFICATE----- ...)",
            EXAMPLE,
        )
        return ""
    return pem
