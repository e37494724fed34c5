"""PostgreSQL speaking the tables' SQL dialect: sqlite3's `?` and `:name` placeholders translated for
psycopg. Shared by the store's engine (postgres.py) and the lease connection (pg_leases.py)."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

from bridge.store.engine import Cursor, Params

if TYPE_CHECKING:
    # Only for the type: psycopg is the `postgresql` extra, and a SQLite install imports this module
    # (the intake table's SQL lives beside the leases) without it.
    import psycopg


class PgConn:
    """A psycopg connection speaking the tables' dialect: `?` and `:name` placeholders."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Params = (), /) -> Cursor:
        if not params:
            # No placeholders to fill, so no % to escape either.
            return self._conn.execute(sql.encode())
        return self._conn.execute(translate(sql), params)

    def raw(self, script: str) -> None:
        """A script of several statements (a migration), sent as it is."""
        self._conn.execute(script.encode())


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
