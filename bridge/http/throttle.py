"""What a wrong admin token costs: after a few in a minute, the sender's tokens are not checked at all.

A sleep per wrong token (what the login form had) costs a guesser nothing who sends in parallel:
200 parallel guesses got 180 answers a second, and a wrong bearer header was answered in 0.3 ms. So
wrong tokens are counted instead, per client (its IP address) and for all clients together, each in
a window of WINDOW_S from its first failure:

- a client with PER_CLIENT wrong tokens (bearer header or login form) in its window is answered 429
  with Retry-After, without a check, until its window ends;
- once IN_TOTAL wrong tokens came from all clients in a window, every bearer token and login is
  answered so until that window ends (a guesser with many addresses).

A locked-out client's token waits even when it is right: checking it would tell a guesser which of
its guesses was right. A browser already logged in keeps working (its cookie is an HMAC of the
token, as hard to guess as the token itself, and is not counted). Each window logs one line when it
locks, never one per request. The counts live in one process: each worker counts its own.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

WINDOW_S = 60.0
PER_CLIENT = 5
IN_TOTAL = 50


@dataclass(slots=True)
class _Window:
    start: float
    failures: int = 0


class WrongTokens:
    """Counts wrong tokens per client and in total, and says how long a client must wait."""

    def __init__(
        self,
        *,
        per_client: int = PER_CLIENT,
        in_total: int = IN_TOTAL,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_client = per_client
        self.in_total = in_total
        self.window_s = window_s
        self._clock = clock
        self._clients: dict[str, _Window] = {}
        self._total: _Window | None = None

    def wait_s(self, client: str) -> int | None:
        """Whole seconds until this client's token is checked again (for Retry-After); None: now."""
        now = self._clock()
        waits = [
            window.start + self.window_s - now
            for window, limit in ((self._clients.get(client), self.per_client), (self._total, self.in_total))
            if window is not None and window.failures >= limit and self._current(window, now)
        ]
        return max(1, math.ceil(max(waits))) if waits else None

    def failed(self, client: str) -> None:
        """Count a wrong token from this client; the failure that reaches a limit logs its one line."""
        now = self._clock()
        if self._total is None or not self._current(self._total, now):
            self._total = _Window(now)
        self._total.failures += 1
        window = self._clients.get(client)
        if window is None or not self._current(window, now):
            # Old windows go when a new one starts; at most IN_TOTAL clients can fail in one window.
            self._clients = {key: w for key, w in self._clients.items() if self._current(w, now)}
            window = self._clients[client] = _Window(now)
        window.failures += 1
        if window.failures == self.per_client:
            log.warning(
                "admin server: %d wrong tokens from %s within %g s; its bearer tokens and logins are "
                "answered 429 until its minute is up. If that was you, `bridge admin` prints the token; "
                "if not, someone is guessing it.",
                window.failures,
                client,
                self.window_s,
            )
        if self._total.failures == self.in_total:
            log.warning(
                "admin server: %d wrong tokens from %d addresses within %g s; every bearer token and login "
                "is answered 429 until the minute is up. Someone is guessing the token: keep the admin "
                "server on a loopback address, or behind a proxy that limits who reaches it.",
                self._total.failures,
                len(self._clients),
                self.window_s,
            )

    def _current(self, window: _Window, now: float) -> bool:
        return now < window.start + self.window_s


__all__ = ["IN_TOTAL", "PER_CLIENT", "WINDOW_S", "WrongTokens"]
