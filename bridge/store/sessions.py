"""Sessions: one active conversation per chat key, its chat's metadata, and its /send, /model, /voice
and /agent choices."""

from __future__ import annotations

import dataclasses
import random
import time

from bridge.store.base import SessionMeta, SessionRow, SessionSummary
from bridge.store.cache import ActiveSessions
from bridge.store.engine import Conn, Database, Engine

SESSION_COLS = (
    "id, key, created_at, updated_at, ended_at, surface, chat_type, display_name, send_policy, last_route, "
    "parent_id, model_profile, voice_replies, agent"
)

# The session columns an inbound message describes (SessionMeta's fields, same names as columns).
_META_FIELDS = tuple(f.name for f in dataclasses.fields(SessionMeta))


_ids = random.Random()  # seeded from os.urandom, once


def new_id() -> str:
    """A 16-hex-digit id for a session or run. Ids name rows, they guard nothing, so they come from a
    generator seeded once from the OS: a fresh os.urandom call took ~0.1 ms on a VM, once per turn."""
    return f"{_ids.getrandbits(64):016x}"


class SessionTable(Database):
    """The sessions table, with a cache of the active rows that every write here keeps exact."""

    def __init__(self, engine: Engine, *, sessions: ActiveSessions | None = None) -> None:
        super().__init__(engine)
        self._active = sessions or ActiveSessions()

    def forget_session(self, key: str) -> None:
        """Another process changed the key's session: drop this process's copy of it."""
        self._active.drop(key)

    def sessions_told(self, told: bool) -> None:
        """Whether every other process's change to a session is now told to this one (through
        forget_session), or no longer: how long this process's copies are trusted (ActiveSessions.told)."""
        self._active.told(told)

    async def active_session(self, key: str) -> SessionRow | None:
        cached = self._active.get(key)
        if cached is not None:
            return cached
        rows = await self._rows(
            f"SELECT {SESSION_COLS} FROM sessions WHERE key = ? AND ended_at IS NULL", (key,), quick=True
        )
        if not rows:
            return None
        row = SessionRow(*rows[0])
        self._active.put(row)
        return row

    async def ensure_active_session(self, key: str, meta: SessionMeta | None = None) -> SessionRow:
        found = await self.active_session(key)
        if found is not None:
            if meta is not None and _meta_differs(found, meta):
                return await self._update_meta(found, meta)
            return found
        row = await self._write(lambda conn: _insert_session(conn, key, meta, or_existing=True))
        self._active.put(row)
        return row

    async def start_new_session(self, key: str, meta: SessionMeta | None = None) -> SessionRow:
        previous = await self.active_session(key)
        if meta is None and previous is not None:
            meta = SessionMeta(**{name: getattr(previous, name) for name in _META_FIELDS})

        def replace(conn: Conn) -> SessionRow:
            conn.execute(
                "DELETE FROM intake WHERE session_id IN (SELECT id FROM sessions WHERE key = ? AND "
                "ended_at IS NULL)",
                (key,),
            )
            conn.execute(
                "UPDATE sessions SET ended_at = ? WHERE key = ? AND ended_at IS NULL", (time.time(), key)
            )
            row = _insert_session(conn, key, meta)
            if previous is not None and previous.send_policy is not None:
                # The operator's /send choice is about the chat, not the conversation: /clear keeps it.
                conn.execute(
                    "UPDATE sessions SET send_policy = ? WHERE id = ?", (previous.send_policy, row.id)
                )
                row = dataclasses.replace(row, send_policy=previous.send_policy)
            if previous is not None and previous.model_profile is not None:
                # So is the /model choice: a fresh conversation on the model the owner picked here.
                conn.execute(
                    "UPDATE sessions SET model_profile = ? WHERE id = ?", (previous.model_profile, row.id)
                )
                row = dataclasses.replace(row, model_profile=previous.model_profile)
            if previous is not None and previous.voice_replies is not None:
                # And /voice: whether this chat hears its answers is about the chat too.
                conn.execute(
                    "UPDATE sessions SET voice_replies = ? WHERE id = ?", (previous.voice_replies, row.id)
                )
                row = dataclasses.replace(row, voice_replies=previous.voice_replies)
            if previous is not None and previous.agent is not None:
                # And /agent: which agent answers here is the owner's choice for the chat.
                conn.execute("UPDATE sessions SET agent = ? WHERE id = ?", (previous.agent, row.id))
                row = dataclasses.replace(row, agent=previous.agent)
            return row

        row = await self._write(replace)
        self._active.put(row)
        return row

    async def _update_meta(self, session: SessionRow, meta: SessionMeta) -> SessionRow:
        merged = {name: getattr(meta, name) or getattr(session, name) for name in _META_FIELDS}
        await self._write(
            lambda conn: conn.execute(
                f"UPDATE sessions SET {', '.join(f'{name} = ?' for name in merged)} WHERE id = ?",
                (*merged.values(), session.id),
            )
        )
        found = await self.get_session(session.id)
        assert found is not None
        self._active.put(found)
        return found

    async def get_session(self, session_id: str) -> SessionRow | None:
        rows = await self._rows(
            f"SELECT {SESSION_COLS} FROM sessions WHERE id = ?", (session_id,), quick=True
        )
        return SessionRow(*rows[0]) if rows else None

    async def list_sessions(
        self, *, limit: int, active_since: float | None = None, active_only: bool = True
    ) -> list[SessionSummary]:
        where, params = ["1 = 1"], []
        if active_only:
            where.append("s.ended_at IS NULL")
        if active_since is not None:
            where.append("s.updated_at >= ?")
            params.append(active_since)
        rows = await self._rows(
            f"SELECT {', '.join('s.' + c.strip() for c in SESSION_COLS.split(','))}, "
            "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) "
            f"FROM sessions s WHERE {' AND '.join(where)} ORDER BY s.updated_at DESC LIMIT ?",
            (*params, limit),
        )
        return [SessionSummary(SessionRow(*row[:-1]), row[-1]) for row in rows]

    async def keys_under(self, prefix: str) -> list[str]:
        """The keys of every session, active or ended, that begin with `prefix` (a parent's sub-agents:
        `agent:<parent session id>:`). substr, not LIKE: an id may hold LIKE's wildcards."""
        rows = await self._rows(
            "SELECT DISTINCT key FROM sessions WHERE substr(key, 1, ?) = ?", (len(prefix), prefix)
        )
        return [str(row[0]) for row in rows]

    async def set_send_policy(self, session_id: str, value: str | None) -> None:
        await self._write(
            lambda conn: conn.execute("UPDATE sessions SET send_policy = ? WHERE id = ?", (value, session_id))
        )
        self._active.update(session_id, send_policy=value)

    async def set_model_profile(self, session_id: str, name: str | None) -> None:
        await self._write(
            lambda conn: conn.execute(
                "UPDATE sessions SET model_profile = ? WHERE id = ?", (name, session_id)
            )
        )
        self._active.update(session_id, model_profile=name)

    async def set_voice_replies(self, session_id: str, choice: str | None) -> None:
        """/voice: "on", "off", or None (answers to voice notes are spoken)."""
        await self._write(
            lambda conn: conn.execute(
                "UPDATE sessions SET voice_replies = ? WHERE id = ?", (choice, session_id)
            )
        )
        self._active.update(session_id, voice_replies=choice)

    async def set_agent(self, session_id: str, name: str | None) -> None:
        """/agent: the [agents.NAME] of this chat, or None to follow [[agents.bindings]]."""
        await self._write(
            lambda conn: conn.execute("UPDATE sessions SET agent = ? WHERE id = ?", (name, session_id))
        )
        self._active.update(session_id, agent=name)


def _insert_session(
    conn: Conn, key: str, meta: SessionMeta | None, *, or_existing: bool = False
) -> SessionRow:
    """A new active session for `key`; with `or_existing`, the one another writer (a second
    worker on the same database) made first, if it did."""
    values = {name: getattr(meta or SessionMeta(), name) for name in _META_FIELDS}
    now = time.time()
    row = SessionRow(id=new_id(), key=key, created_at=now, updated_at=now, **values)
    columns = ("id", "key", "created_at", "updated_at", *values)
    # The conflict target names the partial unique index: one active session per key.
    ignore = " ON CONFLICT (key) WHERE ended_at IS NULL DO NOTHING" if or_existing else ""
    inserted = conn.execute(
        f"INSERT INTO sessions ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        f"{ignore} RETURNING id",
        (row.id, key, now, now, *values.values()),
    ).fetchone()
    if inserted is None:
        found = conn.execute(
            f"SELECT {SESSION_COLS} FROM sessions WHERE key = ? AND ended_at IS NULL", (key,)
        ).fetchone()
        return SessionRow(*found)
    return row


def _meta_differs(session: SessionRow, meta: SessionMeta) -> bool:
    return any(
        getattr(meta, name) is not None and getattr(meta, name) != getattr(session, name)
        for name in _META_FIELDS
    )
