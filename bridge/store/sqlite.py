"""The SQLite store: sessions, messages, runs, memories and the outbox, on one SQLiteConnection."""

from __future__ import annotations

from bridge.store.messages import dumps
from bridge.store.outbox import OutboxTable
from bridge.store.runs import RunTable
from bridge.store.sessions import new_id

# dumps and new_id are imported from here by the agent and the gateway; they live with their tables.
__all__ = ["SQLiteStore", "dumps", "new_id"]


class SQLiteStore(RunTable, OutboxTable):
    """Store on one aiosqlite connection: sessions, messages, runs, the outbox and memories.

    Each table's code is a class of its own (sessions.py, messages.py, runs.py, outbox.py), all on
    the one SQLiteConnection; this class only puts them together.
    """
