"""Store steps several tests take, written once."""

from __future__ import annotations

from bridge.store.base import NewSummary, SummaryRow
from bridge.store.tables import DatabaseStore


async def summarise(
    store: DatabaseStore, session_id: str, upto: int, content: str, *, run_id: str = "c"
) -> SummaryRow | None:
    """A finished compaction of the session's turns up to user message `upto`, as the compactor
    records it (one turn of 10 characters, by the accounts it keeps)."""
    return await store.record_compaction(
        run_id,
        session_id,
        started_at=0.0,
        status="ok",
        error=None,
        trace=None,
        prompt_tokens=0,
        completion_tokens=0,
        summary=NewSummary(upto, content, 1, 10),
    )
