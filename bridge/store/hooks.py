"""Webhook events (hook_events): stored before the request is answered, run once, their end recorded;
and the signatures of timestamped requests (hook_signatures), each taken once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bridge.store.engine import Conn, Database

# pending: stored, not yet run. running: its run began (a crash leaves it so; the next start
# decides from the run's own row what became of it). ok, error, interrupted: ended.
HookState = Literal["pending", "running", "ok", "error", "interrupted"]
HOOK_STATES: tuple[HookState, ...] = ("pending", "running", "ok", "error", "interrupted")


@dataclass(frozen=True, slots=True)
class HookEvent:
    id: int
    hook: str
    # The Idempotency-Key header, or the body's id field: a second event with it is a redelivery.
    event_key: str | None
    # The session the run happens in (hook:<name> or hook:<name>.<event>).
    session_key: str
    # The chat that receives the answer; the prompt as rendered from the body when it came in.
    deliver_to: str
    prompt: str
    received_at: float
    state: HookState
    run_id: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class Nonce:
    """A timestamped request's signature, taken once: until `expires_at` (its timestamp plus the
    hook's max_age_s) a second request with it is a replay; after that its timestamp is too old."""

    signature: str
    expires_at: float


_COLS = (
    "id, hook, event_key, session_key, deliver_to, prompt, received_at, state, run_id, started_at, "
    "ended_at, detail"
)


def _event(row: tuple[object, ...]) -> HookEvent:
    id_, hook, key, session, deliver, prompt, received, state, run_id, started, ended, detail = row
    return HookEvent(
        int(id_),  # type: ignore[call-overload]
        str(hook),
        None if key is None else str(key),
        str(session),
        str(deliver),
        str(prompt),
        float(received),  # type: ignore[arg-type]
        state,  # type: ignore[arg-type]
        None if run_id is None else str(run_id),
        None if started is None else float(started),  # type: ignore[arg-type]
        None if ended is None else float(ended),  # type: ignore[arg-type]
        None if detail is None else str(detail),
    )


def _add(
    conn: Conn, hook: str, key: str | None, session_key: str, deliver_to: str, prompt: str, now: float
) -> tuple[HookEvent, bool]:
    row = conn.execute(
        f"INSERT INTO hook_events (hook, event_key, session_key, deliver_to, prompt, received_at, "
        f"state) VALUES (?, ?, ?, ?, ?, ?, 'pending') "
        f"ON CONFLICT (hook, event_key) WHERE event_key IS NOT NULL DO NOTHING RETURNING {_COLS}",
        (hook, key, session_key, deliver_to, prompt, now),
    ).fetchone()
    if row is not None:
        return _event(row), True
    earlier = conn.execute(
        f"SELECT {_COLS} FROM hook_events WHERE hook = ? AND event_key = ?", (hook, key)
    ).fetchone()
    assert earlier is not None, "a conflicting hook event vanished in its own transaction"
    return _event(earlier), False


class HookTable(Database):
    """Webhook events. Stored once per (hook, event key) by the database's unique index, so two
    deliveries of one event at the same moment store it once; claimed by one conditional update."""

    async def add_hook_event(
        self,
        hook: str,
        event_key: str | None,
        session_key: str,
        deliver_to: str,
        prompt: str,
        now: float,
    ) -> tuple[HookEvent, bool]:
        """Store a new event; (the event, True), or (the one stored before with its key, False)."""
        return await self._write(
            lambda conn: _add(conn, hook, event_key, session_key, deliver_to, prompt, now)
        )

    async def add_signed_hook_event(
        self,
        once: Nonce,
        hook: str,
        event_key: str | None,
        session_key: str,
        deliver_to: str,
        prompt: str,
        now: float,
    ) -> tuple[HookEvent, bool] | None:
        """As add_hook_event, for a request whose signature is taken once: None (nothing stored) when
        the signature was taken before and has not expired, a replay. The signature and the event are
        one transaction, so a request the database could not store may be sent again as it was, and
        two copies sent at once, to two workers, are taken once."""

        def add(conn: Conn) -> tuple[HookEvent, bool] | None:
            # Expired signatures go as new ones come, by the index on expires_at: no sweep to run.
            conn.execute("DELETE FROM hook_signatures WHERE expires_at < ?", (now,))
            taken = conn.execute(
                "INSERT INTO hook_signatures (hook, signature, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT (hook, signature) DO NOTHING",
                (hook, once.signature, once.expires_at),
            )
            if taken.rowcount != 1:
                return None
            return _add(conn, hook, event_key, session_key, deliver_to, prompt, now)

        return await self._write(add)

    async def hook_events_in(self, states: tuple[HookState, ...], limit: int = 100) -> list[HookEvent]:
        """Events in these states, oldest first."""
        marks = ", ".join("?" * len(states))
        rows = await self._rows(
            f"SELECT {_COLS} FROM hook_events WHERE state IN ({marks}) ORDER BY id LIMIT ?", (*states, limit)
        )
        return [_event(row) for row in rows]

    async def recent_hook_events(self, limit: int = 50) -> list[HookEvent]:
        """The newest events of every hook, newest first (the dashboard's list)."""
        rows = await self._rows(f"SELECT {_COLS} FROM hook_events ORDER BY id DESC LIMIT ?", (limit,))
        return [_event(row) for row in rows]

    async def claim_hook_event(self, event_id: int, run_id: str, now: float) -> bool:
        """Take a pending event for a run with this id; False when another took it first."""

        def claim(conn: Conn) -> bool:
            moved = conn.execute(
                "UPDATE hook_events SET state = 'running', run_id = ?, started_at = ? "
                "WHERE id = ? AND state = 'pending'",
                (run_id, now, event_id),
            )
            return moved.rowcount == 1

        return await self._write(claim)

    async def finish_hook_event(
        self, event_id: int, state: HookState, now: float, detail: str | None
    ) -> None:
        await self._write(
            lambda conn: conn.execute(
                "UPDATE hook_events SET state = ?, ended_at = ?, detail = ? WHERE id = ?",
                (state, now, detail, event_id),
            )
        )
