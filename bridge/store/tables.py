"""The Store on any engine: the table classes put together, written once for both backends."""

from __future__ import annotations

from bridge.store.claims import WorkerClaim
from bridge.store.hooks import HookTable
from bridge.store.intake import IntakeTable
from bridge.store.outbox import OutboxTable
from bridge.store.pairing import PairingTable
from bridge.store.runs import RunTable
from bridge.store.search import HistorySearch
from bridge.store.tasks import TaskTable
from bridge.store.workers import WorkerTable


class DatabaseStore(
    RunTable,
    OutboxTable,
    IntakeTable,
    WorkerTable,
    WorkerClaim,
    PairingTable,
    TaskTable,
    HookTable,
    HistorySearch,
):
    """Sessions, messages, runs, the outbox, memories, DM pairing, scheduled tasks and webhook events,
    on the engine given (SQLite or PostgreSQL).

    Each table's code is a class of its own (sessions.py, messages.py, runs.py, outbox.py, pairing.py,
    tasks.py, hooks.py, search.py); this class only puts them together. The one thing written twice is
    full-text search, whose SQL differs: each engine's store names its `search_dialect`.
    """
