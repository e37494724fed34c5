"""A run's first step with attachments: read them (bounded by the run's time), never lose the run to it."""

from __future__ import annotations

import asyncio
import logging

from bridge.agent.runstate import MediaReader
from bridge.store.base import MessageRow
from bridge.store.tables import DatabaseStore

log = logging.getLogger(__name__)


async def read_attachments(
    media: MediaReader, rows: list[MessageRow], *, run_id: str, store: DatabaseStore, timeout_s: float
) -> list[MessageRow]:
    """The rows with their attachments read, within the run's time limit; as they were if reading
    failed as a whole or ran out of time (the run still answers, its attachments named but unread,
    and a later run reads them), rather than leave its row running."""
    try:
        async with asyncio.timeout(timeout_s):
            return await media(rows)
    except asyncio.CancelledError:
        # /stop or a shutdown while a file downloads: the run ends here, recorded as cancelled.
        await asyncio.shield(store.finish_run(run_id, "cancelled", error="cancelled"))
        raise
    except TimeoutError:
        log.warning("run %s: reading its attachments took too long; answering without them", run_id)
        return rows
    except Exception:
        log.exception("reading the attachments of a message failed")
        return rows
