"""DM pairing's tables: strangers' codes (pairing_codes) and the people owners approved (paired_users)."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass

from bridge.store.engine import Conn, Database

# How many times issuing a code draws again when the one drawn is already taken (40 bits each, at
# most a few thousand live codes: a second draw is already a one-in-a-hundred-million event).
_DRAWS = 5


def shown(code: str) -> str:
    """A stored code as people read and type it: ABCD-EFGH."""
    half = len(code) // 2
    return f"{code[:half]}-{code[half:]}"


@dataclass(frozen=True, slots=True)
class PendingCode:
    """A code a stranger was given, waiting for an owner to approve it."""

    surface: str
    user_id: str
    display_name: str | None
    # As shown to people, e.g. "ABCD-EFGH"; approving takes it with or without the dash, any case.
    code: str
    # Where the stranger wrote from (a Discord DM is a channel of its own), for the "approved" notice.
    chat_id: str
    created_at: float
    expires_at: float
    # When the code was last sent to them: a repeat DM gets it again only after a while.
    sent_at: float


@dataclass(frozen=True, slots=True)
class PairedUser:
    """Someone an owner approved: they may DM the bot, as if in allowed_users, until revoked."""

    surface: str
    user_id: str
    display_name: str | None
    approved_at: float
    # Who approved: an owner as surface:user_id, "cli" or "dashboard".
    approved_by: str


@dataclass(frozen=True, slots=True)
class IssuedCode:
    """What a stranger's DM comes to: their one live code, and whether to send it to them now."""

    code: PendingCode
    send: bool


_CODE_COLS = "surface, user_id, display_name, code, chat_id, created_at, expires_at, sent_at"
_PAIRED_COLS = "surface, user_id, display_name, approved_at, approved_by"


def _pending(row: tuple[object, ...]) -> PendingCode:
    surface, user_id, name, code, chat_id, created, expires, sent = row
    return PendingCode(
        str(surface),
        str(user_id),
        None if name is None else str(name),
        shown(str(code)),
        str(chat_id),
        float(created),  # type: ignore[arg-type]
        float(expires),  # type: ignore[arg-type]
        float(sent),  # type: ignore[arg-type]
    )


def _paired(row: tuple[object, ...]) -> PairedUser:
    surface, user_id, name, approved_at, approved_by = row
    return PairedUser(
        str(surface),
        str(user_id),
        None if name is None else str(name),
        float(approved_at),  # type: ignore[arg-type]
        str(approved_by),
    )


class PairingTable(Database):
    """Codes and approvals. Each decision is one transaction, so two workers answering one stranger at
    once still give them one code, and a code is approved once."""

    async def issue_pairing_code(
        self,
        surface: str,
        user_id: str,
        *,
        chat_id: str,
        display_name: str | None,
        now: float,
        ttl_s: float,
        resend_after_s: float,
        max_pending: int,
        new_code: Callable[[], str],
    ) -> IssuedCode | None:
        """The stranger's live code, made if they have none (or theirs expired); `send` says whether to
        send it now (new, or last sent `resend_after_s` ago). None when `max_pending` codes are live."""

        def issue(conn: Conn) -> IssuedCode | None:
            for _ in range(_DRAWS):
                row = conn.execute(
                    f"SELECT {_CODE_COLS} FROM pairing_codes WHERE surface = ? AND user_id = ?",
                    (surface, user_id),
                ).fetchone()
                if row is not None and float(row[6]) > now:
                    code = _pending(row)
                    if now - code.sent_at < resend_after_s:
                        return IssuedCode(code, send=False)
                    conn.execute(
                        "UPDATE pairing_codes SET sent_at = ? WHERE surface = ? AND user_id = ?",
                        (now, surface, user_id),
                    )
                    return IssuedCode(_pending((*row[:7], now)), send=True)
                # Expired codes, theirs among them, make room: the table holds live codes only.
                conn.execute("DELETE FROM pairing_codes WHERE expires_at <= ?", (now,))
                live = conn.execute("SELECT COUNT(*) FROM pairing_codes").fetchone()
                if live is not None and int(live[0]) >= max_pending:
                    return None
                drawn = new_code()
                values = (surface, user_id, display_name, drawn, chat_id, now, now + ttl_s, now)
                # DO NOTHING on either key: the code is taken (draw again), or another worker has just
                # given this stranger theirs (the next pass reads it).
                inserted = conn.execute(
                    f"INSERT INTO pairing_codes ({_CODE_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT DO NOTHING",
                    values,
                )
                if inserted.rowcount == 1:
                    return IssuedCode(_pending(values), send=True)
            raise RuntimeError(f"no free pairing code after {_DRAWS} draws")

        return await self._write(issue)

    async def take_pairing_code(self, code: str, *, by: str, now: float) -> tuple[PairedUser, str] | None:
        """Approve the live code `code` (its stored form: 8 characters, no dash): the person is added to
        paired_users and the code is used up, in one transaction. The approved person and the chat
        they wrote from; None when no live code matches."""

        def take(conn: Conn) -> tuple[PairedUser, str] | None:
            rows = conn.execute(
                "SELECT surface, user_id, display_name, code, chat_id FROM pairing_codes "
                "WHERE expires_at > ?",
                (now,),
            ).fetchall()
            # Compared with each live code in constant time, and never found by an index: how long an
            # approval takes says nothing about how close a guess came.
            found = None
            for row in rows:
                if hmac.compare_digest(str(row[3]).encode(), code.encode()) and found is None:
                    found = row
            if found is None:
                return None
            surface, user_id, name, _, chat_id = found
            used = conn.execute(
                "DELETE FROM pairing_codes WHERE surface = ? AND user_id = ? AND code = ?",
                (surface, user_id, code),
            )
            if used.rowcount != 1:
                return None  # another approval took it a moment ago
            conn.execute(
                f"INSERT INTO paired_users ({_PAIRED_COLS}) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (surface, user_id) DO UPDATE SET display_name = excluded.display_name, "
                "approved_at = excluded.approved_at, approved_by = excluded.approved_by",
                (surface, user_id, name, now, by),
            )
            return PairedUser(str(surface), str(user_id), name, now, by), str(chat_id)

        return await self._write(take)

    async def pending_codes(self, now: float) -> list[PendingCode]:
        """Live codes, oldest first."""
        rows = await self._rows(
            f"SELECT {_CODE_COLS} FROM pairing_codes WHERE expires_at > ? "
            "ORDER BY created_at, surface, user_id",
            (now,),
        )
        return [_pending(row) for row in rows]

    async def paired_user(self, surface: str, user_id: str) -> PairedUser | None:
        rows = await self._rows(
            f"SELECT {_PAIRED_COLS} FROM paired_users WHERE surface = ? AND user_id = ?",
            (surface, user_id),
            quick=True,
        )
        return _paired(rows[0]) if rows else None

    async def paired_users(self) -> list[PairedUser]:
        """Everyone approved, in the order they were."""
        rows = await self._rows(
            f"SELECT {_PAIRED_COLS} FROM paired_users ORDER BY approved_at, surface, user_id"
        )
        return [_paired(row) for row in rows]

    async def unpair(self, surface: str, user_id: str) -> bool:
        """Take an approval back; False when there was none."""
        deleted = await self._write(
            lambda conn: (
                conn.execute(
                    "DELETE FROM paired_users WHERE surface = ? AND user_id = ?", (surface, user_id)
                ).rowcount
            )
        )
        return bool(deleted)
