"""Who is asking: a bearer token on the request, or a session the sign-in form opened.

In ``token`` mode a visitor presents a Kubernetes token once — in the sign-in form, or as
``Authorization: Bearer`` on every request (scripts) — and each token the UI has not seen
costs a TokenReview, so failed presentations are limited (``throttle``) per client address
*and the identity the token claims* (a JWT's unverified ``sub``; every other token is
"opaque"): behind ``kubectl port-forward`` everyone has one address, and one visitor's
wrong tokens must not lock the others out. A token the UI already knows to be good (its
review is cached) is never throttled: it costs no review. A signed-in browser then sends only its session id (``sessions``); its
token is re-checked through the TokenReview cache, and a token the API server no longer
accepts ends the session. The other modes have no sign-in: their ``authenticate`` names
the one identity they act as.

Everything here blocks (TokenReview is an API call): the server calls it from its worker
threads.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from pgsched.ui import access, sessions, throttle

# A longer token is not read for the identity it claims (Kubernetes' are about 1 KB).
MAX_READ = 16 * 1024


class Throttled(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(
            f"too many failed sign-ins from your address for this identity (or from"
            f" everyone); try again in {retry_after} s"
        )
        self.retry_after = retry_after


@dataclass(frozen=True)
class Visitor:
    user: access.User
    session: sessions.Session | None  # None: a bearer token, or a mode without sign-in


class SignIn:
    def __init__(self, ui_access: access.Access) -> None:
        self.access = ui_access
        self.sessions = sessions.Sessions()
        self._failed = throttle.FailedLogins()

    def identify(self, *, bearer: str | None, session_id: str | None, client: str) -> Visitor:
        """The visitor of a request; raises Unauthenticated, Throttled or Unavailable."""
        if self.access.mode != "token":
            return Visitor(self.access.authenticate(None), None)
        if bearer:
            return Visitor(self._review(bearer, client), None)
        session = self.sessions.get(session_id)
        if session is None:
            raise access.Unauthenticated(
                "your session ended (signed out, idle or expired)" if session_id else "no token"
            )
        try:
            return Visitor(self.access.authenticate(session.token), session)
        except access.Unauthenticated:
            self.sessions.close(session.id)
            raise access.Unauthenticated(
                "the API server no longer accepts the token you signed in with"
            ) from None

    def sign_in(self, token: str, *, client: str) -> sessions.Session:
        """A new session for a token the API server accepts (Unauthenticated otherwise)."""
        if not token:
            raise access.Unauthenticated("no token given")
        user = self._review(token, client)
        return self.sessions.open(token, identity=user.name)

    def _review(self, token: str, client: str) -> access.User:
        known = isinstance(self.access, access.TokenAccess) and self.access.known_good(token)
        key = f"{client} {claimed_identity(token)}"
        wait = None if known else self._failed.retry_after(key)
        if wait is not None:
            raise Throttled(wait)  # before the TokenReview: that is what the limit saves
        try:
            return self.access.authenticate(token)
        except access.Unauthenticated:
            self._failed.failed(key)
            raise


def claimed_identity(token: str) -> str:
    """The subject a JWT says it is for (unverified: only a key for counting failures),
    or ``opaque``. Hostile input is bounded: size, base64, JSON, the claim's type."""
    if len(token) > MAX_READ or token.count(".") != 2:
        return "opaque"
    payload = token.split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError):
        return "opaque"
    subject = claims.get("sub") if isinstance(claims, dict) else None
    return f"sub={subject[:256]}" if isinstance(subject, str) and subject else "opaque"
