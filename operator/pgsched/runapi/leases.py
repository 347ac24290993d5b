"""Checking a request's lease in memory, before any database work.

A lease is 8 bytes of nonce and the first 8 bytes of HMAC-SHA256(lease key, run id ||
nonce) (``sql/functions/lease_for.sql``). The operator owns the schema and reads the key
once at start, so a made-up lease, or another run's, costs one HMAC here and nothing in
the database. The database checks the lease again on every write (the row's token).
"""

from __future__ import annotations

import hashlib
import hmac
from uuid import UUID

from pgsched.db import queries
from pgsched.db.connection import Connection


class LeaseKeyMissing(RuntimeError):
    """The database has no lease key (migration 0032 makes it)."""


class LeaseKey:
    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def load(cls, conn: Connection) -> LeaseKey:
        row = conn.execute(queries.get("lease_key")).fetchone()
        if row is None:
            raise LeaseKeyMissing("pgsched.lease_key has no key: run `pgsched migrate`")
        return cls(bytes(row["key"]))

    def genuine(self, run_id: int, lease: UUID) -> bool:
        """Whether ``lease`` is one a claim of ``run_id`` could have been given."""
        if not -(2**63) <= run_id < 2**63:
            return False
        raw = lease.bytes
        nonce, mac = raw[:8], raw[8:]
        message = run_id.to_bytes(8, "big", signed=True) + nonce
        expected = hmac.new(self._key, message, hashlib.sha256).digest()[:8]
        return hmac.compare_digest(mac, expected)
