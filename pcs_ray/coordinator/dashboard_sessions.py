"""Who is signed in to the dashboard: one-time sign-in tickets and sessions, each with its CSRF token.

A ticket (``pcs-ray dashboard``, through the token-authenticated API call
``dashboard_ticket``) signs one browser in once, within ``TICKET_TTL_S``. A
session lives ``SESSION_TTL_S`` unless its owner signs out. Secrets are kept
only as their SHA-256 (a lookup by digest leaks nothing about the secret
through timing) and CSRF tokens are compared in constant time. Thread-safe:
the API's thread pool and the event loop both use it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pcs_ray.tenants.identity import Caller

TICKET_TTL_S = 120.0
SESSION_TTL_S = 12 * 3600.0
MAX_OPEN = 10_000  # tickets, and sessions, kept at most (the oldest go first)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "replace")).hexdigest()


@dataclass(frozen=True)
class DashboardSession:
    """A signed-in browser: its caller, CSRF token and expiry (unix seconds)."""

    caller: Caller
    csrf: str
    expires: float


class DashboardSessions:
    """Tickets and sessions of one coordinator process (lost with it: people sign in again)."""

    def __init__(self, ttl_s: float = SESSION_TTL_S, ticket_ttl_s: float = TICKET_TTL_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.ttl_s, self.ticket_ttl_s, self.clock = ttl_s, ticket_ttl_s, clock
        self.lock = threading.Lock()
        self.tickets: dict[str, tuple[Caller, float]] = {}
        self.sessions: dict[str, DashboardSession] = {}

    def issue_ticket(self, caller: Caller) -> tuple[str, float]:
        """A single-use ticket for ``caller`` and when it expires."""
        ticket = secrets.token_urlsafe(32)
        expires = self.clock() + self.ticket_ttl_s
        with self.lock:
            self._prune(self.tickets, lambda v: v[1])
            self.tickets[_digest(ticket)] = (caller, expires)
        return ticket, expires

    def redeem(self, ticket: str) -> Caller | None:
        """The ticket's caller, once: a second use, an unknown or an expired ticket gives None."""
        with self.lock:
            found = self.tickets.pop(_digest(ticket), None)
        if found is None or found[1] <= self.clock():
            return None
        return found[0]

    def open(self, caller: Caller) -> tuple[str, DashboardSession]:
        """A new session for ``caller``: its id (the cookie's value) and the session."""
        sid = secrets.token_urlsafe(32)
        session = DashboardSession(caller, secrets.token_urlsafe(32), self.clock() + self.ttl_s)
        with self.lock:
            self._prune(self.sessions, lambda s: s.expires)
            self.sessions[_digest(sid)] = session
        return sid, session

    def get(self, sid: str | None) -> DashboardSession | None:
        """The live session of a cookie's value, or None (none, unknown, expired)."""
        if not sid:
            return None
        key = _digest(sid)
        with self.lock:
            session = self.sessions.get(key)
            if session is not None and session.expires <= self.clock():
                del self.sessions[key]
                session = None
        return session

    def close(self, sid: str | None) -> None:
        if sid:
            with self.lock:
                self.sessions.pop(_digest(sid), None)

    @staticmethod
    def csrf_ok(session: DashboardSession, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(given.encode("utf-8", "replace"), session.csrf.encode())

    def _prune(self, table: dict, expiry) -> None:
        """Drop what expired; past ``MAX_OPEN``, the oldest too (dicts keep insertion order)."""
        now = self.clock()
        for key in [k for k, v in table.items() if expiry(v) <= now]:
            del table[key]
        while len(table) >= MAX_OPEN:
            del table[next(iter(table))]
