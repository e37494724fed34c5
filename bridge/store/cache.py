"""A bounded in-memory copy of recently used active sessions, kept exact by the store's own writes."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

from bridge.store.base import SessionRow

DEFAULT_SIZE = 2048


class ActiveSessions:
    """Active session rows by key, least recently used dropped first.

    A turn looks its session up several times (the run, the policy check of every send and edit), so
    these lookups are served from memory. Only this process writes sessions, and the store updates
    this copy in the same place it writes the row, so a hit is never stale. The bound keeps memory
    flat however many chats there are: idle sessions live in SQLite.
    """

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self.size = size
        self._by_key: OrderedDict[str, SessionRow] = OrderedDict()
        self._key_of: dict[str, str] = {}

    def get(self, key: str) -> SessionRow | None:
        row = self._by_key.get(key)
        if row is not None:
            self._by_key.move_to_end(key)
        return row

    def put(self, row: SessionRow) -> None:
        """`row` is now the active session of its key (replacing the one before it, if any)."""
        old = self._by_key.pop(row.key, None)
        if old is not None:
            self._key_of.pop(old.id, None)
        self._by_key[row.key] = row
        self._key_of[row.id] = row.key
        while len(self._by_key) > self.size:
            _, dropped = self._by_key.popitem(last=False)
            self._key_of.pop(dropped.id, None)

    def update(self, session_id: str, **changes: object) -> None:
        """Apply a write to a session by id, if it is held here."""
        key = self._key_of.get(session_id)
        if key is not None:
            self._by_key[key] = dataclasses.replace(self._by_key[key], **changes)  # type: ignore[arg-type]

    def clear(self) -> None:
        self._by_key.clear()
        self._key_of.clear()
