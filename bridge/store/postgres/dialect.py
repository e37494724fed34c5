"""PostgreSQL speaking the tables' SQL dialect: sqlite3's `?` and `:name` placeholders translated for
psycopg. Shared by the store's engine (engine.py) and the lease connection (leases.py)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from bridge.store.engine import Cursor, Params

if TYPE_CHECKING:
    # Only for the type: psycopg is the `postgresql` extra, and a SQLite install imports this module
    # (the intake table's SQL lives beside the leases) without it.
    import psycopg


class PgConn:
    """A psycopg connection speaking the tables' dialect: `?` and `:name` placeholders."""

    def __init__(self, conn: psycopg.Connection[Any], pipeline: psycopg.Pipeline | None = None) -> None:
        self._conn = conn
        # The pipeline `conn` is in, where the caller put it in pipeline mode.
        self._pipeline = pipeline

    def execute(self, sql: str, params: Params = (), /) -> Cursor:
        # No placeholders to fill, so no % to escape either.
        query = translate(sql) if params else sql.encode()
        cursor = self._conn.execute(query, params or None)
        return cursor if self._pipeline is None else _Sent(cursor, self._pipeline)

    def raw(self, script: str) -> None:
        """A script of several statements (a migration), sent as it is."""
        self._conn.execute(script.encode())


class _Sent:
    """A statement's cursor in pipeline mode, where its result comes back with those sent after it:
    reading its rows waits for them (psycopg does), and so does asking how many rows it changed,
    which psycopg would answer with -1 until then."""

    __slots__ = ("_cursor", "_pipeline")

    def __init__(self, cursor: psycopg.Cursor[Any], pipeline: psycopg.Pipeline) -> None:
        self._cursor = cursor
        self._pipeline = pipeline

    @property
    def rowcount(self) -> int:
        if self._cursor.pgresult is None:
            # Every result sent so far comes back; inside a transaction, that commits nothing.
            self._pipeline.sync()
        return self._cursor.rowcount

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cursor)


TOKENS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|::|\?|:[A-Za-z_]\w*|%")


@functools.lru_cache(maxsize=1024)
def translate(sql: str) -> bytes:
    """sqlite3's placeholders as psycopg's: `?` → `%s`, `:name` → `%(name)s`, `%` → `%%`; quoted
    text and `::` casts are left as they are."""

    def swap(match: re.Match[str]) -> str:
        token = match.group()
        if token == "?":
            return "%s"
        if token == "%":
            return "%%"
        if token.startswith(":") and token != "::":
            return f"%({token[1:]})s"
        return token

    return TOKENS.sub(swap, sql).encode()
