"""`bridge migrate`: copy a bot's SQLite database into an empty PostgreSQL one, and check the counts."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bridge.config.base import mask_url
from bridge.errors import StoreError, first_line
from bridge.store.postgres import PostgresStore
from bridge.store.sqlite import SQLiteStore

# Parents before children, so every foreign key finds its row. (workers is not copied: it lists the
# processes running on a database, and none runs on the new one yet.)
TABLES = (
    "sessions",
    "runs",
    "messages",
    "intake",
    "memories",
    "outbox",
    "summaries",
    "pairing_codes",
    "paired_users",
    "tasks",
    "task_firings",
    "hook_events",
)
# Tables whose ids PostgreSQL hands out: after the copy, its counters start past the copied ids.
IDENTITY_TABLES = ("messages", "memories", "outbox", "summaries", "hook_events")


@dataclass(frozen=True, slots=True)
class Copied:
    table: str
    source: int
    target: int

    @property
    def ok(self) -> bool:
        return self.source == self.target


async def sqlite_to_postgres(source: Path, url: str) -> list[Copied]:
    """Copy every row of the SQLite database at `source` into the PostgreSQL database at `url`.

    The source is read from a consistent copy (SQLite's backup API), so the bot may still be running
    and the file itself is never changed, not even by a schema upgrade. The target must be empty:
    its schema is created first, then all rows go in one transaction (a failure leaves it empty).
    """
    if not await asyncio.to_thread(source.is_file):
        raise StoreError(f"no database at {source}", remedy="give the SQLite file: --from sqlite:PATH")
    target = PostgresStore(url, pool_size=1)
    await target.open()  # creates or upgrades the schema, and says so if the server is not there
    await target.close()
    with tempfile.TemporaryDirectory(prefix="bridge-migrate-") as tmp:
        snapshot = Path(tmp) / "source.db"
        await asyncio.to_thread(_snapshot, source, snapshot)
        # Opening the copy brings it to this Bridge's schema version, the one PostgreSQL now has.
        upgraded = SQLiteStore(snapshot)
        await upgraded.open()
        await upgraded.close()
        import psycopg

        try:
            return await asyncio.to_thread(_copy, snapshot, url)
        except psycopg.Error as exc:
            raise StoreError(
                f"copying into {mask_url(url)} failed: {first_line(exc)}; nothing was committed"
            ) from None


def _snapshot(source: Path, into: Path) -> None:
    """A consistent copy of `source`, opened read-only: the bot's file is not touched."""
    try:
        with (
            contextlib.closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as original,
            contextlib.closing(sqlite3.connect(into)) as copy,
        ):
            original.backup(copy)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read {source}: {exc}", remedy="check the path") from None


def _copy(snapshot: Path, url: str) -> list[Copied]:
    import psycopg

    with contextlib.closing(sqlite3.connect(snapshot)) as lite, psycopg.connect(url) as pg:
        for table in TABLES:
            if pg.execute(f"SELECT EXISTS (SELECT 1 FROM {table})".encode()).fetchone() == (True,):
                raise StoreError(
                    f"{mask_url(url)} already holds data (table {table} is not empty); nothing was copied",
                    remedy="migrate into a new, empty database",
                )
        for table in TABLES:
            columns = [row[1] for row in lite.execute(f"PRAGMA table_info({table})")]
            names = ", ".join(columns)
            with pg.cursor().copy(f"COPY {table} ({names}) FROM STDIN".encode()) as copy:
                for row in lite.execute(f"SELECT {names} FROM {table} ORDER BY rowid"):
                    copy.write_row(row)
        for table in IDENTITY_TABLES:
            pg.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"COALESCE((SELECT MAX(id) FROM {table}), 0) + 1, false)".encode()
            )
        counts = [
            Copied(
                table,
                int(lite.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]),
                _count(pg.execute(f"SELECT COUNT(*) FROM {table}".encode()).fetchone()),
            )
            for table in TABLES
        ]
        if not all(c.ok for c in counts):
            pg.rollback()
            return counts
        pg.commit()
    return counts


def _count(row: tuple[int] | None) -> int:
    assert row is not None
    return int(row[0])
