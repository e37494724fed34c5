"""A small, short-lived in-memory copy of recently used active sessions, kept exact by the store."""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from bridge.store.base import SessionRow

DEFAULT_SIZE = 2048
# `bridge chat` and `bridge run` may share one database, and a /clear in one ends the session the
# other holds: an entry is trusted for this long, so the other process sees the change within it.
DEFAULT_MAX_AGE_S = 1.0
# Trusted this long while every other process's change to a session is told to this one (a worker
# listening on PostgreSQL, bridge.gateway.sharing): the age only bounds what no notice covers, such as
# updated_at. At 1 s nearly every turn of a chat at a human pace read its session again.
TOLD_MAX_AGE_S = 30.0


class ActiveSessions:
    """Active session rows by key, least recently used dropped first, each trusted for max_age_s.

    A turn looks its session up several times (the run, the policy check of every send and edit), so
    these lookups are served from memory. This process's own writes update the copy where they write
    the row, so within its age a hit is exact. The bound keeps memory flat however many chats there
    are: idle sessions live in SQLite.
    """

    def __init__(
        self,
        size: int = DEFAULT_SIZE,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.size = size
        self.max_age_s = self._untold_age_s = max_age_s
        self._clock = clock
        self._by_key: OrderedDict[str, tuple[SessionRow, float]] = OrderedDict()
        self._key_of: dict[str, str] = {}

    def get(self, key: str) -> SessionRow | None:
        entry = self._by_key.get(key)
        if entry is None:
            return None
        row, stored = entry
        if self._clock() - stored > self.max_age_s:
            self.drop(key)
            return None
        self._by_key.move_to_end(key)
        return row

    def put(self, row: SessionRow) -> None:
        """`row` is now the active session of its key (replacing the one before it, if any)."""
        self.drop(row.key)
        self._by_key[row.key] = (row, self._clock())
        self._key_of[row.id] = row.key
        while len(self._by_key) > self.size:
            oldest = next(iter(self._by_key))
            self.drop(oldest)

    def update(self, session_id: str, **changes: Any) -> None:
        """Apply a write to a session by id, if it is held here."""
        key = self._key_of.get(session_id)
        if key is not None:
            row, stored = self._by_key[key]
            self._by_key[key] = (dataclasses.replace(row, **changes), stored)

    def told(self, told: bool) -> None:
        """Whether other processes' changes are told to this one from now on: if so, every copy held
        is dropped (it was read before, when a change could go untold) and the next ones are trusted
        for TOLD_MAX_AGE_S; if not, for the age it was made with again (older copies expire at once)."""
        if told:
            self._by_key.clear()
            self._key_of.clear()
        self.max_age_s = TOLD_MAX_AGE_S if told else self._untold_age_s

    def drop(self, key: str) -> None:
        """Forget the key's row: the next lookup reads it from the database."""
        entry = self._by_key.pop(key, None)
        if entry is not None:
            self._key_of.pop(entry[0].id, None)
